package server

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/converge-dev/converge/gen"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/repopath/repopathtest"
)

// TestPathFastPathFields: the lock paths take the fast path (a proto change that alters their
// rules, or pathRuleCEL, turns it off silently: this says so), and a glob field does not.
func TestPathFastPathFields(t *testing.T) {
	t.Parallel()
	requireFastKinds(t, []fastKindCase{
		{&registryv1.AcquireLockRequest{}, "resource", fastPath},
		{&registryv1.RenewLockRequest{}, "resource", fastPath},
		{&registryv1.ReleaseLockRequest{}, "resource", fastPath},
		{&registryv1.AcquireLocksRequest{}, "resources", fastList},
		{&registryv1.AcquireLockRequest{}, "holder", fastString}, // fastrule.go
		{&registryv1.SetOwnerRequest{}, "pattern", fastNone},
		{&knowledgev1.QueryItemsRequest{}, "file_path", fastPath},    // a oneof member: an agent's gotcha query per task
		{&knowledgev1.QueryItemsRequest{}, "file_pattern", fastNone}, // a glob
	})
	list := fastOf((&registryv1.AcquireLocksRequest{}).ProtoReflect().Descriptor().Fields().ByName("resources"))
	require.Equal(t, fastField{kind: fastList, minItems: 1, maxItems: 1000, hasMax: true, unique: true}, list)
}

// TestPathFastPathAgreesWithCEL sets every fast-path field of every converge message to every
// row of repopathtest's table (and lists of them: empty, duplicated, too many) and checks that
// validation with the fast path answers exactly what protovalidate answers without it: the
// same status, message and field violations.
func TestPathFastPathAgreesWithCEL(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	require.NoError(t, err)
	files, err := gen.Files() // every service's protos, not only those this test links
	require.NoError(t, err)
	var fields []protoreflect.FieldDescriptor
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(string(fd.Package()), "converge.") {
			fields = append(fields, fastFieldsOf(fd.Messages())...)
		}
		return true
	})
	require.GreaterOrEqual(t, len(fields), 8, "the fast path found too few path fields: %v", fields)
	taken := 0
	for _, fd := range fields {
		var values [][]string
		for _, c := range repopathtest.Cases {
			if utf8.ValidString(c.In) { // proto3 strings are UTF-8 on the wire
				values = append(values, []string{c.In})
			}
		}
		if fd.IsList() {
			many := make([]string, 1001)
			for i := range many {
				many[i] = fmt.Sprintf("src/f%d.go", i)
			}
			values = append(values, nil, []string{"a.go", "b.go", "a.go"}, []string{"a.go", "b/../c"},
				many[:1000], many, append(many[:40:40], "src/f3.go"))
		}
		taken += agreesWithProtovalidate(t, v, fd, values)
	}
	require.Positive(t, taken, "no value took the fast path")
}

// agreesWithProtovalidate sets fd (of a fresh message of its own type) to each of values (a
// single field takes only one-value rows) and requires validation with the fast paths to answer
// exactly what protovalidate answers without them: the same status, message and violations. It
// answers how many of the messages the fast path decided alone.
func agreesWithProtovalidate(t *testing.T, v protovalidate.Validator, fd protoreflect.FieldDescriptor, values [][]string) (taken int) {
	t.Helper()
	for _, in := range values {
		if !fd.IsList() && len(in) != 1 {
			continue
		}
		msg := dynamicpb.NewMessage(fd.ContainingMessage())
		if fd.IsList() {
			l := msg.Mutable(fd).List()
			for _, s := range in {
				l.Append(protoreflect.ValueOfString(s))
			}
		} else {
			msg.Set(fd, protoreflect.ValueOfString(in[0]))
		}
		want := validateWith(v, msg)
		got := validateWith(v, msg, pathOptions...)
		require.Equal(t, status.Convert(want).Proto().String(), status.Convert(got).Proto().String(), "%s = %.80q", fd.FullName(), in)
		if !shouldValidate(msg, fd) {
			taken++
		}
	}
	return taken
}

// fastKindCase names a field of msg and the fast path it must take.
type fastKindCase struct {
	msg   proto.Message
	field protoreflect.Name
	want  fastKind
}

// requireFastKinds requires each case's field to exist and take the fast path it names.
func requireFastKinds(t *testing.T, cases []fastKindCase) {
	t.Helper()
	for _, c := range cases {
		fd := c.msg.ProtoReflect().Descriptor().Fields().ByName(c.field)
		require.NotNil(t, fd, c.field)
		require.Equal(t, c.want, fastOf(fd).kind, "%s", fd.FullName())
	}
}

// fastFieldsOf answers the fields of msgs (and their nested messages) that take the fast path.
func fastFieldsOf(msgs protoreflect.MessageDescriptors) []protoreflect.FieldDescriptor {
	var out []protoreflect.FieldDescriptor
	for i := range msgs.Len() {
		md := msgs.Get(i)
		for j := range md.Fields().Len() {
			if fd := md.Fields().Get(j); fastOf(fd).kind != fastNone && fastOf(fd).kind != fastMsgList { // msglist_internal_test.go
				out = append(out, fd)
			}
		}
		out = append(out, fastFieldsOf(md.Messages())...)
	}
	return out
}

// BenchmarkValidateGotchaQuery validates the request a local agent sends Knowledge for each
// task's file (worker.gotchas).
func BenchmarkValidateGotchaQuery(b *testing.B) {
	v, err := protovalidate.New()
	require.NoError(b, err)
	req := &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "src/out/t1234.txt"}, Project: "github.com/example/repo",
		Types: []knowledgev1.ItemType{knowledgev1.ItemType_ITEM_TYPE_GOTCHA, knowledgev1.ItemType_ITEM_TYPE_PATTERN}, MinConfidence: 0.6}
	require.NoError(b, validateWith(v, req, pathOptions...))
	b.ReportAllocs()
	for b.Loop() {
		if err := validateWith(v, req, pathOptions...); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzPathFastPath: for any resource, AcquireLockRequest validates the same with and without
// the fast path.
func FuzzPathFastPath(f *testing.F) {
	for _, c := range repopathtest.Cases {
		f.Add(c.In)
	}
	v, err := protovalidate.New()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, in string) {
		if !utf8.ValidString(in) {
			return // refused on the wire
		}
		msg := &registryv1.AcquireLockRequest{Resource: in, Holder: "h", Ttl: durationpb.New(1e9)}
		want := validateWith(v, msg)
		got := validateWith(v, msg, pathOptions...)
		require.Equal(t, status.Convert(want).Proto().String(), status.Convert(got).Proto().String(), "%q", in)
	})
}

// BenchmarkValidatePath validates the requests of a lock cycle and of a batch of 8 with the
// CEL path rule (protovalidate alone) and with the fast path, side by side:
//
//	cd platform/server && go test -run '^$' -bench ValidatePath -benchmem .
func BenchmarkValidatePath(b *testing.B) {
	v, err := protovalidate.New()
	require.NoError(b, err)
	ttl := durationpb.New(30e9)
	resources := make([]string, 8)
	for i := range resources {
		resources[i] = fmt.Sprintf("src/pkg/file-%d.go", i)
	}
	cycle := []proto.Message{
		&registryv1.AcquireLockRequest{Resource: "src/pkg/file.go", Holder: "agent-1", Ttl: ttl},
		&registryv1.ReleaseLockRequest{Resource: "src/pkg/file.go", Holder: "agent-1", Token: 42},
	}
	batch := []proto.Message{&registryv1.AcquireLocksRequest{Resources: resources, Holder: "agent-1", Ttl: ttl}}
	for _, c := range []struct {
		name string
		msgs []proto.Message
	}{{"cycle", cycle}, {"batch8", batch}} {
		for _, mode := range []struct {
			name string
			opts []protovalidate.ValidationOption
		}{{"cel", nil}, {"fast", pathOptions}} {
			b.Run(c.name+"/"+mode.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					for _, m := range c.msgs {
						if err := validateWith(v, m, mode.opts...); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
