package repopath_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"cel.dev/cel-go/cel"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/platform/repopath/repopathtest"
)

// The CEL rules the protos' path fields carry, next to the standard rules
// `string = {min_len: 1, max_bytes: 1024}` (max_bytes: 1024 alone where empty means unset).
// Each states one reading of package repopath; TestProposedCEL checks it on every row of the table
// with cel-go, TestProtoRules checks the generated protos. Raw CEL strings (r'...') keep the
// regular expressions readable; the guard (empty, too long) leaves those to the standard rules so
// that a bad value gets one violation.
const (
	guardCEL   = `this == '' || bytes(this).size() > 1024 || `
	commonCEL  = `!this.matches(r'[\\\p{Cc}]') && !this.startsWith('/') && !this.matches('^[A-Za-z]:')`
	pathCEL    = guardCEL + `(` + commonCEL + ` && !this.matches(r'(^|/)(|\.|\.\.|(?i:\.git))(/|$)'))`
	dirCEL     = guardCEL + `(` + commonCEL + ` && !this.contains('//') && !this.matches(r'(^|/)(\.|\.\.|(?i:\.git))(/|$)'))`
	globCEL    = guardCEL + `(` + commonCEL + ` && !this.contains('//') && !this.endsWith('/') && !this.matches(r'(^|[/{,}])(\.|\.\.|(?i:\.git))([/{,}]|$)') && this.matches(r'` + repopath.GlobSyntaxRegexp + `'))`
	protoIDRel = "path.relative"
)

// The messages of the proposed rules: what a client reads in the field violation.
const (
	pathMessage = "must be a clean repository-relative path: no leading '/', drive letter, '\\' or control character, no empty, '.', '..' or '.git' segment, at most 1024 bytes"
	dirMessage  = "must be a clean repository-relative path, a directory may end with '/': no leading '/', drive letter, '\\' or control character, no empty, '.', '..' or '.git' segment, at most 1024 bytes"
	globMessage = "must be a clean repository-relative doublestar glob: no leading or trailing '/', drive letter, '\\' or control character, no empty, '.', '..' or '.git' segment or alternative, classes closed and not empty, braces balanced and not nested, at most 1024 bytes"
)

// reading is one way a service reads a path field.
type reading struct {
	name    string
	valid   func(repopathtest.Case) bool
	cel     string
	message string
}

var (
	asPath = reading{"path", func(c repopathtest.Case) bool { return c.Path }, pathCEL, pathMessage}
	asDir  = reading{"directory or glob", func(c repopathtest.Case) bool { return c.Dir }, dirCEL, dirMessage}
	asGlob = reading{"glob", func(c repopathtest.Case) bool { return c.Glob }, globCEL, globMessage}
)

// protoField is one path field of a request and the repopath reading its service applies.
type protoField struct {
	msg   func() proto.Message
	field protoreflect.Name
	read  reading
	// optional: the empty string means unset and is accepted.
	optional bool
	// todo is set while the generated protos still carry the old rule: rows where they disagree
	// with repopath are skipped, naming the field. The coordinator clears it with the proto change.
	todo bool
}

var protoFields = []protoField{
	{msg: func() proto.Message { return &registryv1.AcquireLockRequest{} }, field: "resource", read: asPath},
	{msg: func() proto.Message { return &registryv1.RenewLockRequest{} }, field: "resource", read: asPath},
	{msg: func() proto.Message { return &registryv1.ReleaseLockRequest{} }, field: "resource", read: asPath},
	{msg: func() proto.Message { return &registryv1.GetLockRequest{} }, field: "resource", read: asPath},
	{msg: func() proto.Message { return &registryv1.GetOwnerRequest{} }, field: "path", read: asPath},
	{msg: func() proto.Message { return &registryv1.SetOwnerRequest{} }, field: "pattern", read: asGlob},
	{msg: func() proto.Message { return &registryv1.ReleaseOwnerRequest{} }, field: "pattern", read: asGlob},
	{msg: func() proto.Message { return &knowledgev1.RecordItemRequest{} }, field: "file_pattern", read: asGlob},
	{msg: func() proto.Message { return &knowledgev1.QueryItemsRequest{} }, field: "file_path", read: asPath},
	{msg: func() proto.Message { return &knowledgev1.QueryItemsRequest{} }, field: "file_pattern", read: asGlob},
	{msg: func() proto.Message { return &knowledgev1.ListItemsRequest{} }, field: "file_pattern", read: asGlob, optional: true},
	{msg: func() proto.Message { return &commonv1.Task{} }, field: "file", read: asPath, optional: true},
	// A FileImpact's kind may be inferred from its path, so the field takes what any kind
	// takes (a directory with its "/", which covers paths and globs); the Scheduler then checks
	// the path against its kind (tasklist.CheckPath).
	{msg: func() proto.Message { return &commonv1.FileImpact{} }, field: "path", read: asDir},
	// The Scheduler's list-level paths (tasklist.CheckPath).
	{msg: func() proto.Message { return &schedulerv1.ProjectContext{} }, field: "spec_file", read: asPath, optional: true},
	{msg: func() proto.Message { return &schedulerv1.ProjectContext{} }, field: "tasks_file", read: asPath, optional: true},
	{msg: func() proto.Message { return &schedulerv1.ProjectContext{} }, field: "context_files", read: asPath},
	{msg: func() proto.Message { return &schedulerv1.ConventionsSource{} }, field: "path", read: asPath},
	{msg: func() proto.Message { return &schedulerv1.ValidationLevels{} }, field: "api_trigger_globs", read: asGlob},
	{msg: func() proto.Message { return &schedulerv1.ValidationLevels{} }, field: "ui_trigger_globs", read: asGlob},
}

func (f protoField) name() string {
	return string(f.msg().ProtoReflect().Descriptor().FullName()) + "." + string(f.field)
}

// set sets the field of msg to in (a repeated field to the one item in) and answers the field
// path a violation of it names.
func (f protoField) set(t *testing.T, msg proto.Message, in string) string {
	t.Helper()
	m := msg.ProtoReflect()
	fd := m.Descriptor().Fields().ByName(f.field)
	require.NotNil(t, fd, "no field %s", f.field)
	if fd.IsList() {
		list := m.Mutable(fd).List()
		list.Append(protoreflect.ValueOfString(in))
		return string(f.field) + "[0]"
	}
	m.Set(fd, protoreflect.ValueOfString(in))
	return string(f.field)
}

func (f protoField) want(c repopathtest.Case) bool {
	if f.optional && c.In == "" {
		return true
	}
	return f.read.valid(c)
}

// TestProtoRules feeds the table to the protovalidate rules of every path field: a value is
// accepted by protovalidate exactly when repopath accepts it in the field's reading.
func TestProtoRules(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	require.NoError(t, err)
	for _, f := range protoFields {
		t.Run(f.name(), func(t *testing.T) {
			t.Parallel()
			for _, c := range repopathtest.Cases {
				t.Run(name(c), func(t *testing.T) {
					msg := f.msg()
					field := f.set(t, msg, c.In)
					if !utf8.ValidString(c.In) {
						// proto3 strings are UTF-8: such a value never leaves a client.
						_, err := proto.Marshal(msg)
						require.Error(t, err, "invalid UTF-8 must not marshal")
						require.False(t, f.want(c))
						return
					}
					accepted := fieldAccepted(t, v, msg, field)
					if accepted != f.want(c) && f.todo {
						t.Skipf("TODO(proto %s): repopath says valid=%v, protovalidate accepted=%v: "+
							"apply the %s rule of platform/repopath/proto_test.go to the field and clear its todo",
							f.name(), f.want(c), accepted, f.read.name)
					}
					require.Equal(t, f.want(c), accepted, "%s: protovalidate must agree with repopath (%s)", f.name(), f.read.name)
				})
			}
		})
	}
}

// fieldAccepted reports whether v finds no violation on field (other fields may be unset).
func fieldAccepted(t *testing.T, v protovalidate.Validator, msg proto.Message, field string) bool {
	err := v.Validate(msg)
	if err == nil {
		return true
	}
	var verr *protovalidate.ValidationError
	require.ErrorAs(t, err, &verr)
	for _, viol := range verr.Violations {
		if protovalidate.FieldPathString(viol.Proto.GetField()) == field {
			return false
		}
	}
	return true
}

// TestProposedCEL checks the CEL rules above (what the protos are to carry) on every row, with
// the standard rules min_len: 1 (unless optional) and max_bytes: 1024 evaluated beside them.
func TestProposedCEL(t *testing.T) {
	t.Parallel()
	env, err := cel.NewEnv(cel.Variable("this", cel.StringType))
	require.NoError(t, err)
	for _, f := range protoFields {
		ast, iss := env.Compile(f.read.cel)
		require.NoError(t, iss.Err(), f.read.cel)
		prg, err := env.Program(ast)
		require.NoError(t, err)
		for _, c := range repopathtest.Cases {
			if !utf8.ValidString(c.In) {
				continue // refused on the wire, see TestProtoRules
			}
			accepted := (f.optional || c.In != "") && len(c.In) <= repopath.MaxBytes
			if accepted {
				out, _, err := prg.Eval(map[string]any{"this": c.In})
				require.NoError(t, err)
				accepted = out.Value() == true
			}
			require.Equal(t, f.want(c), accepted, "%s: %q (%s)", f.name(), c.In, c.Why)
		}
	}
	require.NotEmpty(t, protoIDRel)
	require.False(t, strings.Contains(globCEL, "\n"))
}

// TestProposedRulesInProtovalidate gives every path field the proposed rules (standard string
// rules and the CEL rule, as the .proto is to state them: see proposedRules) on a copy of its
// descriptor, and checks with protovalidate itself that the table's rows are accepted exactly when
// repopath accepts them. Once the protos carry these rules, TestProtoRules skips nothing.
func TestProposedRulesInProtovalidate(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	require.NoError(t, err)
	for _, f := range protoFields {
		t.Run(f.name(), func(t *testing.T) {
			t.Parallel()
			md := withProposedRules(t, f)
			for _, c := range repopathtest.Cases {
				if !utf8.ValidString(c.In) {
					continue // refused on the wire, see TestProtoRules
				}
				msg := dynamicpb.NewMessage(md)
				field := f.set(t, msg, c.In)
				require.Equal(t, f.want(c), fieldAccepted(t, v, msg, field), "%s: %q (%s)", f.name(), c.In, c.Why)
			}
		})
	}
}

// proposedRules answers the field rules the .proto is to carry for f.
func proposedRules(f protoField, repeated bool) *validate.FieldRules {
	str := &validate.StringRules{MaxBytes: proto.Uint64(repopath.MaxBytes)}
	if !f.optional {
		str.MinLen = proto.Uint64(1)
	}
	rule := &validate.Rule{Id: proto.String(protoIDRel), Message: proto.String(f.read.message), Expression: proto.String(f.read.cel)}
	item := &validate.FieldRules{Type: &validate.FieldRules_String_{String_: str}, Cel: []*validate.Rule{rule}}
	if !repeated {
		return item
	}
	return &validate.FieldRules{Type: &validate.FieldRules_Repeated{Repeated: &validate.RepeatedRules{Items: item}}}
}

// withProposedRules answers f's message descriptor, rebuilt with f's field carrying proposedRules.
func withProposedRules(t *testing.T, f protoField) protoreflect.MessageDescriptor {
	t.Helper()
	md := f.msg().ProtoReflect().Descriptor()
	fdp := protodesc.ToFileDescriptorProto(md.ParentFile())
	var target *descriptorpb.FieldDescriptorProto
	for _, m := range fdp.GetMessageType() {
		if m.GetName() != string(md.Name()) {
			continue
		}
		for _, fld := range m.GetField() {
			if fld.GetName() == string(f.field) {
				target = fld
			}
		}
	}
	require.NotNil(t, target, "%s not found as a top-level message field", f.name())
	opts := &descriptorpb.FieldOptions{}
	proto.SetExtension(opts, validate.E_Field, proposedRules(f, target.GetLabel() == descriptorpb.FieldDescriptorProto_LABEL_REPEATED))
	target.Options = opts
	file, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	require.NoError(t, err)
	out := file.Messages().ByName(md.Name())
	require.NotNil(t, out)
	return out
}

// TestPrintProposedRules prints, with -v, the field options each path field is to carry, in .proto
// syntax: what the coordinator pastes into proto/.
func TestPrintProposedRules(t *testing.T) {
	t.Parallel()
	for _, r := range []reading{asPath, asDir, asGlob} {
		t.Logf("%s:\n  (buf.validate.field).cel = {\n    id: %s\n    message: %s\n    expression: %s\n  }",
			r.name, strconv.Quote(protoIDRel), strconv.Quote(r.message), strconv.Quote(r.cel))
	}
	for _, f := range protoFields {
		t.Logf("%s: %s%s", f.name(), f.read.name, map[bool]string{true: " (empty = unset: max_bytes only)", false: fmt.Sprintf(" (min_len: 1, max_bytes: %d)", repopath.MaxBytes)}[f.optional])
	}
}
