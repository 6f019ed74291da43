package server

import (
	"strings"
	"testing"
	"unicode/utf8"

	"buf.build/go/protovalidate"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/converge-dev/converge/gen"
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// TestStringFastPathFields: the id, capability and text fields of an agent's per-task requests
// take the string fast path (a proto change that gives them a rule it does not know turns it off
// silently: this says so).
func TestStringFastPathFields(t *testing.T) {
	t.Parallel()
	requireFastKinds(t, []fastKindCase{
		{&schedulerv1.ClaimTaskRequest{}, "instance_id", fastString},
		{&schedulerv1.ClaimTaskRequest{}, "execution_id", fastString},
		{&schedulerv1.ClaimTaskRequest{}, "session_id", fastString},
		{&schedulerv1.ClaimTaskRequest{}, "capabilities", fastList},
		{&schedulerv1.ReportProgressRequest{}, "assignment_id", fastString},
		{&schedulerv1.ReportProgressRequest{}, "message", fastString},
		{&schedulerv1.AgentEvent{}, "message", fastString},
		{&schedulerv1.CompleteTaskRequest{}, "assignment_id", fastString},
		{&schedulerv1.CompleteTaskRequest{}, "instance_id", fastString},
		{&schedulerv1.CompleteTaskRequest{}, "commit_sha", fastNone}, // an alternation: protovalidate
		{&schedulerv1.CompleteTaskRequest{}, "validation_output_tail", fastString},
		{&commonv1.ErrorContext{}, "message", fastString},
	})
	caps := fastOf((&schedulerv1.ClaimTaskRequest{}).ProtoReflect().Descriptor().Fields().ByName("capabilities"))
	require.NotNil(t, caps.str)
	require.True(t, caps.unique)
}

// stringCases are values for every string fast-path field: ids, classes' edges, lengths at and
// past the usual bounds, control characters and non-ASCII.
func stringCases() []string {
	out := []string{"", "a", "A", "0", "a-b", "a.b:c-d", "A.B_c", "_a", "-a", ".a", ":a", "a b", "a/b", "a\\b",
		"abc\x00", "\x00", "\t", "a\tb", "a\nb", "a\rb", "\x01", "\x1f", "\x7f", "\x7e", "é", "aé", "日本語",
		"executor:command", "integration", "go", "Executor", "refs/converge/x", "0123456789abcdef0123456789abcdef01234567",
		"ag-1/i2", "as_01HZ", "x\u2028y", "\u00a0"}
	for _, n := range []int{63, 64, 65, 127, 128, 129, 255, 256, 1024, 1025, 4096, 4097, 65536, 65537} {
		out = append(out, strings.Repeat("a", n), strings.Repeat("é", n), "a"+strings.Repeat("-", n-1))
	}
	return out
}

// TestStringFastPathAgreesWithProtovalidate sets every string fast-path field of every converge
// message to every value of stringCases (and lists of them: empty, duplicated, too many) and
// checks that validation with the fast path answers exactly what protovalidate answers without
// it: the same status, message and field violations.
func TestStringFastPathAgreesWithProtovalidate(t *testing.T) {
	t.Parallel()
	v, err := protovalidate.New()
	require.NoError(t, err)
	files, err := gen.Files()
	require.NoError(t, err)
	var fields []protoreflect.FieldDescriptor
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(string(fd.Package()), "converge.") {
			for _, f := range fastFieldsOf(fd.Messages()) {
				if fastOf(f).str != nil {
					fields = append(fields, f)
				}
			}
		}
		return true
	})
	require.GreaterOrEqual(t, len(fields), 40, "the string fast path found too few fields: %v", fields)
	cases := stringCases()
	taken := 0
	for _, fd := range fields {
		var values [][]string
		for _, c := range cases {
			values = append(values, []string{c})
		}
		if fd.IsList() {
			many := make([]string, 0, 10001)
			for i := range 10001 {
				many = append(many, "v"+strings.Repeat("x", i%50)+string(rune('a'+i%26)))
			}
			values = append(values, nil, []string{"a", "b", "a"}, []string{"a", "b\x00"}, []string{"a", "é"},
				many[:33], append(many[:40:40], many[3]), many[:64], many[:65], many[:1000], many[:1001], many)
		}
		taken += agreesWithProtovalidate(t, v, fd, values)
	}
	require.Greater(t, taken, len(fields), "too few values took the fast path")
}

// TestCompilePattern: the shapes the fast path compiles, and those it leaves to protovalidate.
func TestCompilePattern(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern string
		ok      bool
	}{
		{"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", true},
		{"^([A-Za-z0-9][A-Za-z0-9._:-]{0,127})?$", true},
		{"^[a-z0-9][a-z0-9._:/-]{0,63}$", true},
		{"^refs/[A-Za-z0-9._/-]{1,250}$", true},
		{"^[a-z]*[a-z]$", false},                 // a variable count before the last: would need backtracking
		{"^([0-9a-f]{40}|[0-9a-f]{64})$", false}, // an alternation
		{"[a-z]+", false},                        // not anchored
		{"^(?i)abc$", false},                     // case folding
		{"^(?m)[a-z]$", false},                   // multi-line anchors
	} {
		_, ok := compilePattern(c.pattern)
		require.Equal(t, c.ok, ok, c.pattern)
	}
}

// FuzzStringFastPath: for any value, the per-task requests validate the same with and without
// the fast path.
func FuzzStringFastPath(f *testing.F) {
	for _, c := range stringCases() {
		if len(c) < 300 {
			f.Add(c)
		}
	}
	v, err := protovalidate.New()
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, in string) {
		if !utf8.ValidString(in) {
			return // refused on the wire
		}
		for _, msg := range []proto.Message{
			&schedulerv1.ClaimTaskRequest{InstanceId: in, Capabilities: []string{in, "go"}, SessionId: in, ExecutionId: in},
			&schedulerv1.ReportProgressRequest{AssignmentId: in, InstanceId: "i", FencingToken: 1, ReportSeq: 1, Message: in,
				Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: in}}},
			&schedulerv1.CompleteTaskRequest{AssignmentId: "a", InstanceId: in, FencingToken: 1, TaskRef: in,
				Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, Error: &commonv1.ErrorContext{Message: in},
				ValidationOutputTail: in},
		} {
			want := validateWith(v, msg)
			got := validateWith(v, msg, pathOptions...)
			require.Equal(t, status.Convert(want).Proto().String(), status.Convert(got).Proto().String(), "%T %q", msg, in)
		}
	})
}

// BenchmarkValidateTask validates the requests an agent sends per task (ClaimTask,
// ReportProgress with TASK_STARTED, CompleteTask with the next claim fused) with protovalidate
// alone and with the fast paths, side by side:
//
//	cd platform/server && go test -run '^$' -bench ValidateTask -benchmem .
func BenchmarkValidateTask(b *testing.B) {
	v, err := protovalidate.New()
	require.NoError(b, err)
	claim := &schedulerv1.ClaimTaskRequest{InstanceId: "agent-1", Capabilities: []string{"executor:command", "integration"},
		ExecutionId: "ex-01JD8XK2M3N4P5Q6R7S8T9V0W1", Wait: durationpb.New(2e8)}
	msgs := []proto.Message{
		claim,
		&schedulerv1.ReportProgressRequest{AssignmentId: "as-01JD8XK2M3N4P5Q6R7S8T9V0W1", InstanceId: "agent-1", FencingToken: 7,
			ReportSeq: 1, Message: "started", Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "started"}}},
		&schedulerv1.CompleteTaskRequest{AssignmentId: "as-01JD8XK2M3N4P5Q6R7S8T9V0W1", InstanceId: "agent-1", FencingToken: 7,
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, ClaimNext: claim},
	}
	for _, mode := range []struct {
		name string
		opts []protovalidate.ValidationOption
	}{{"protovalidate", nil}, {"fast", pathOptions}} {
		b.Run(mode.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range msgs {
					if err := validateWith(v, m, mode.opts...); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
