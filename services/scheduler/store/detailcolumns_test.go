package store

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// setOne sets field fd of m to a value other than its default: a scalar to a non-zero value, a
// message to an empty one, a list to one element, a map to one entry.
func setOne(t *testing.T, m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	t.Helper()
	scalar := func() protoreflect.Value {
		switch fd.Kind() {
		case protoreflect.BoolKind:
			return protoreflect.ValueOfBool(true)
		case protoreflect.EnumKind:
			return protoreflect.ValueOfEnum(1)
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			return protoreflect.ValueOfInt32(7)
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			return protoreflect.ValueOfInt64(7)
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			return protoreflect.ValueOfUint32(7)
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			return protoreflect.ValueOfUint64(7)
		case protoreflect.FloatKind:
			return protoreflect.ValueOfFloat32(7)
		case protoreflect.DoubleKind:
			return protoreflect.ValueOfFloat64(7)
		case protoreflect.StringKind:
			return protoreflect.ValueOfString("x")
		case protoreflect.BytesKind:
			return protoreflect.ValueOfBytes([]byte("x"))
		}
		t.Fatalf("field %s: kind %s", fd.FullName(), fd.Kind())
		return protoreflect.Value{}
	}
	switch {
	case fd.IsMap():
		mv := m.Mutable(fd).Map()
		var k protoreflect.MapKey
		switch fd.MapKey().Kind() {
		case protoreflect.StringKind:
			k = protoreflect.ValueOfString("k").MapKey()
		default:
			t.Fatalf("field %s: map key kind %s", fd.FullName(), fd.MapKey().Kind())
		}
		if fd.MapValue().Message() != nil {
			mv.Mutable(k)
		} else {
			fd = fd.MapValue()
			mv.Set(k, scalar())
		}
	case fd.IsList():
		l := m.Mutable(fd).List()
		if fd.Message() != nil {
			l.Append(l.NewElement())
		} else {
			l.Append(scalar())
		}
	case fd.Message() != nil:
		m.Mutable(fd)
	default:
		m.Set(fd, scalar())
	}
}

// TestDetailColumnsAreWhatStripClears: for every field of an execution and of an assignment, set
// alone, the strip function clears it exactly when the column list names it. A field listed but
// not cleared would let encodeOf answer a stale text when only that field changed.
func TestDetailColumnsAreWhatStripClears(t *testing.T) {
	check := func(t *testing.T, m proto.Message, columns *detailColumns, strip func(proto.Message)) {
		fields := m.ProtoReflect().Descriptor().Fields()
		listed := 0
		for i := range fields.Len() {
			fd := fields.Get(i)
			c := m.ProtoReflect().New()
			setOne(t, c, fd)
			if !c.Has(fd) {
				t.Fatalf("%s: not set", fd.FullName())
			}
			strip(c.Interface())
			if cleared := !c.Has(fd); cleared != columns.isColumn(fd) {
				t.Errorf("%s: cleared by strip %v, a column %v", fd.FullName(), cleared, columns.isColumn(fd))
			}
			if columns.isColumn(fd) {
				listed++
			}
		}
		if listed != columns.count {
			t.Fatalf("%d columns listed, %d fields found", columns.count, listed)
		}
	}
	t.Run("execution", func(t *testing.T) {
		check(t, &schedulerv1.Execution{}, executionColumns, func(m proto.Message) { stripExecutionColumns(m.(*schedulerv1.Execution)) })
	})
	t.Run("assignment", func(t *testing.T) {
		check(t, &schedulerv1.Assignment{}, assignmentColumns, func(m proto.Message) { stripAssignmentColumns(m.(*schedulerv1.Assignment)) })
	})
}

// TestEncodeOfAnswersWhatEncodeWould: encodeOf's text is always protojson's text of the message
// without its columns: when only columns changed since the memo's encoding (the memo's text,
// without a copy), and when a detail field changed, was set, was cleared or differs only in
// unknown fields (encoded again).
func TestEncodeOfAnswersWhatEncodeWould(t *testing.T) {
	m := newDetailMemo[*schedulerv1.Execution]()
	want := func(t *testing.T, e *schedulerv1.Execution) string {
		t.Helper()
		c := proto.CloneOf(e)
		stripExecutionColumns(c)
		b, err := protojson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			return "{}"
		}
		return string(b)
	}
	e := &schedulerv1.Execution{Id: "e1", CompletedTasks: 1, BaseCommit: "abc",
		Options: &schedulerv1.ExecutionOptions{MaxParallel: 4, AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10e9)}}}
	steps := []struct {
		name    string
		change  func(e *schedulerv1.Execution)
		encoded bool // a new encoding, not the memo's text
	}{
		{"first", func(*schedulerv1.Execution) {}, true},
		{"the same", func(*schedulerv1.Execution) {}, false},
		{"columns only", func(e *schedulerv1.Execution) {
			e.CompletedTasks, e.LastSeq, e.UpdateTime, e.Status = 2, 9, timestamppb.Now(), schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
		}, false},
		{"a nested detail field", func(e *schedulerv1.Execution) { e.Options.AgentConfig.HeartbeatInterval = durationpb.New(20e9) }, true},
		{"a detail field set", func(e *schedulerv1.Execution) { e.RunBranch = "run/1" }, true},
		{"a detail field cleared", func(e *schedulerv1.Execution) { e.BaseCommit = "" }, true},
		{"unknown fields", func(e *schedulerv1.Execution) { e.ProtoReflect().SetUnknown([]byte{0xf8, 0xff, 0x3f, 0x01}) }, true},
		{"columns only again", func(e *schedulerv1.Execution) { e.CompletedTasks = 3 }, false},
	}
	last := ""
	for _, s := range steps {
		s.change(e)
		before := m.m["e1"].detail
		got, err := m.encodeOf("e1", e, executionColumns, stripExecutionColumns)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if w := want(t, e); got != w {
			t.Fatalf("%s: encodeOf = %s, want %s", s.name, got, w)
		}
		if reused := before != nil && m.m["e1"].detail == before && got == last; reused == s.encoded {
			t.Fatalf("%s: the memo's text reused %v, want %v", s.name, reused, !s.encoded)
		}
		if m.m["e1"].detail == e {
			t.Fatalf("%s: the memo keeps the caller's message", s.name)
		}
		last = got
	}
}

// TestSetExecutionColumnsSetsEveryColumn: on a message decoded from a row, with any one column
// field set to something else, SetExecutionColumns makes exactly what DecodeExecution answers:
// it sets every column and no detail field.
func TestSetExecutionColumnsSetsEveryColumn(t *testing.T) {
	start := timestamppb.Now().AsTime()
	outcome := "converged"
	r := ExecutionRow{ID: "e1", TaskListID: "tl", RunNumber: 2, Status: "running", Outcome: &outcome, TriggeredBy: "user",
		TotalTasks: 3, CompletedTasks: 1, LastSeq: 4, Detail: `{"baseCommit":"abc","options":{"maxParallel":2}}`,
		CreateTime: start, UpdateTime: start, StartTime: &start}
	want, err := DecodeExecution(r)
	if err != nil {
		t.Fatal(err)
	}
	fields := want.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !executionColumns.isColumn(fd) {
			continue
		}
		e, err := DecodeExecution(r)
		if err != nil {
			t.Fatal(err)
		}
		e.ProtoReflect().Clear(fd)
		if proto.Equal(e, want) {
			setOne(t, e.ProtoReflect(), fd)
		}
		if proto.Equal(e, want) {
			t.Fatalf("%s: cannot make the message differ", fd.FullName())
		}
		if err := SetExecutionColumns(e, r); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(e, want) {
			t.Errorf("%s changed: after SetExecutionColumns %v, want %v", fd.FullName(), e, want)
		}
	}
}
