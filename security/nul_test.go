package security

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	// Every service's contract, registered in protoregistry.GlobalFiles.
	_ "github.com/converge-dev/converge/gen/converge/agent/v1"
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	_ "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	_ "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/grpcerr"
)

// stringField is a string field reachable from a request: the path from the request to it and
// how to set it on a new request.
type stringField struct {
	path []protoreflect.FieldDescriptor
}

func (f stringField) String() string {
	names := make([]string, len(f.path))
	for i, fd := range f.path {
		names[i] = string(fd.Name())
	}
	return strings.Join(names, ".")
}

// set builds a request of type md whose field f holds v (one item for a list, one entry for a
// map: the value, or the key when key is set), and answers the field path a violation names.
func (f stringField) set(md protoreflect.MessageDescriptor, v string, key bool) (proto.Message, string) {
	root := dynamicpb.NewMessage(md)
	m := protoreflect.Message(root)
	var path []string
	for i, fd := range f.path {
		last := i == len(f.path)-1
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			if last {
				if key {
					mp.Set(protoreflect.ValueOfString(v).MapKey(), zeroOf(fd.MapValue()))
				} else {
					mp.Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString(v))
				}
				path = append(path, string(fd.Name()))
				continue
			}
			// map<string, Message>: descend into one value.
			k := protoreflect.ValueOfString("k").MapKey()
			m = mp.Mutable(k).Message()
			path = append(path, string(fd.Name())+`["k"]`)
		case fd.IsList():
			l := m.Mutable(fd).List()
			if last {
				l.Append(protoreflect.ValueOfString(v))
			} else {
				e := l.NewElement()
				l.Append(e)
				m = e.Message()
			}
			path = append(path, string(fd.Name())+"[0]")
		case last:
			m.Set(fd, protoreflect.ValueOfString(v))
			path = append(path, string(fd.Name()))
		default:
			m = m.Mutable(fd).Message()
			path = append(path, string(fd.Name()))
		}
	}
	return root, strings.Join(path, ".")
}

func zeroOf(fd protoreflect.FieldDescriptor) protoreflect.Value {
	if fd.Kind() == protoreflect.MessageKind {
		return protoreflect.ValueOfMessage(dynamicpb.NewMessage(fd.Message()))
	}
	return fd.Default()
}

// stringFields answers the string fields reachable from md (messages of converge's packages
// only; a message already on the path is not entered again).
func stringFields(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor, seen []protoreflect.FullName) []stringField {
	var out []stringField
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		path := append(slices.Clone(prefix), fd)
		kind := fd.Kind()
		if fd.IsMap() {
			if fd.MapKey().Kind() == protoreflect.StringKind || fd.MapValue().Kind() == protoreflect.StringKind {
				out = append(out, stringField{path})
			}
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				kind = protoreflect.MessageKind
				fd = fd.MapValue()
			} else {
				continue
			}
		}
		switch kind {
		case protoreflect.StringKind:
			out = append(out, stringField{path})
		case protoreflect.MessageKind:
			sub := fd.Message()
			if !strings.HasPrefix(string(sub.FullName()), "converge.") || slices.Contains(seen, sub.FullName()) {
				continue
			}
			out = append(out, stringFields(sub, path, append(slices.Clone(seen), sub.FullName()))...)
		}
	}
	return out
}

// requests answers the request message of every RPC of every converge service.
func requests(t *testing.T) []protoreflect.MessageDescriptor {
	t.Helper()
	var out []protoreflect.MessageDescriptor
	seen := map[protoreflect.FullName]bool{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "converge.") {
			return true
		}
		for i := range fd.Services().Len() {
			methods := fd.Services().Get(i).Methods()
			for j := range methods.Len() {
				in := methods.Get(j).Input()
				if !seen[in.FullName()] {
					seen[in.FullName()] = true
					out = append(out, in)
				}
			}
		}
		return true
	})
	require.NotEmpty(t, out)
	return out
}

// Finding 11: NUL and control characters. Every string field of every request of every service
// (nested messages, list items and map entries included) refuses NUL by its protovalidate rules,
// so no such value reaches a store: Postgres refused it with an Internal/Unknown error carrying
// SQL, SQLite stored it. The rule holds for the contract itself, before any backend.
func TestFinding11EveryRequestStringRefusesNUL(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	require.NoError(t, err)
	var missing []string
	checked := 0
	for _, md := range requests(t) {
		for _, f := range stringFields(md, nil, []protoreflect.FullName{md.FullName()}) {
			last := f.path[len(f.path)-1]
			keys := []bool{false}
			if last.IsMap() {
				keys = nil
				if last.MapKey().Kind() == protoreflect.StringKind {
					keys = append(keys, true)
				}
				if last.MapValue().Kind() == protoreflect.StringKind {
					keys = append(keys, false)
				}
			}
			for _, key := range keys {
				checked++
				msg, path := f.set(md, "a\x00b", key)
				if !violates(v, msg, path) {
					what := ""
					if last.IsMap() {
						what = map[bool]string{true: " (key)", false: " (value)"}[key]
					}
					missing = append(missing, fmt.Sprintf("%s.%s%s", md.FullName(), f, what))
				}
			}
		}
	}
	t.Logf("%d string fields of %d requests checked", checked, len(requests(t)))
	require.Empty(t, missing, "string fields that accept NUL:\n%s", strings.Join(missing, "\n"))
}

// violates reports whether validating msg names a violation at path (or below it).
func violates(v protovalidate.Validator, msg proto.Message, path string) bool {
	err := v.Validate(msg)
	verr, ok := err.(*protovalidate.ValidationError)
	if !ok {
		return false
	}
	for _, viol := range verr.Violations {
		got := protovalidate.FieldPathString(viol.Proto.GetField())
		// A rule on a whole list names the list.
		list, _ := strings.CutSuffix(path, "[0]")
		if got == path || got == list || strings.HasPrefix(got, path+".") || strings.HasPrefix(got, path+"[") {
			return true
		}
	}
	return false
}

// Finding 11 against the real binaries: NUL in a stored free-text field is InvalidArgument with
// a field violation on the Postgres-backed Knowledge and Scheduler binaries and on converge dev
// (SQLite) alike; never Internal or Unknown, never SQL in the message.
func TestFinding11NULIsInvalidArgumentOnBothBackends(t *testing.T) {
	t.Parallel()
	knowledgeAddr, _ := startService(t, "knowledge")
	cluster := startCluster(t, 0)
	devAddr, devToken := startDev(t)

	operator := tokenOf(principalOf(auth.RoleOperator))
	targets := []struct {
		name, addr, token string
	}{
		{"postgres", knowledgeAddr, operator},
		{"sqlite (converge dev)", devAddr, devToken},
	}
	schedTargets := []struct {
		name, addr, token string
	}{
		{"postgres", cluster.SchedulerAddr(0), operator},
		{"sqlite (converge dev)", devAddr, devToken},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	requireViolation := func(t *testing.T, err error, field string) {
		t.Helper()
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		var fields []string
		for _, v := range grpcerr.Violations(err) {
			fields = append(fields, v.Field)
		}
		require.Contains(t, fields, field, "%v", err)
		require.NotContains(t, strings.ToLower(status.Convert(err).Message()), "sqlstate")
	}
	for _, tg := range targets {
		t.Run("knowledge/"+tg.name, func(t *testing.T) {
			c := knowledgev1.NewKnowledgeServiceClient(dialToken(t, tg.addr, tg.token))
			_, err := c.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA,
				Content: "use\x00NUL", FilePattern: "**"})
			requireViolation(t, err, "content")
			_, err = c.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA,
				Content: "fine", FilePattern: "**", Evidence: "a\x00b"})
			requireViolation(t, err, "evidence")
		})
	}
	for _, tg := range schedTargets {
		t.Run("scheduler/"+tg.name, func(t *testing.T) {
			c := schedulerv1.NewSchedulerServiceClient(dialToken(t, tg.addr, tg.token))
			_, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: &schedulerv1.TaskListSpec{
				Name: "nul", Description: "a\x00b", Tasks: []*commonv1.Task{{Id: "1", Title: "t\x07", Command: "true"}}}})
			requireViolation(t, err, "spec.description")
			requireViolation(t, err, "spec.tasks[0].title")
		})
	}
}
