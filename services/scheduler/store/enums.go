package store

import (
	"fmt"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The enum names the store writes: a value's column name is its proto name without the type's
// prefix, in lower case; both backends write and read the same names.

// Enum prefixes: a value's column name is its proto name without the prefix, in lower case.
const (
	executionStatusPrefix  = "EXECUTION_STATUS_"
	executionTriggerPrefix = "EXECUTION_TRIGGER_"
	outcomePrefix          = "OUTCOME_"
	waveStatusPrefix       = "WAVE_STATUS_"
	assignmentKindPrefix   = "ASSIGNMENT_KIND_"
	assignmentStatusPrefix = "ASSIGNMENT_STATUS_"
	eventTypePrefix        = "EVENT_TYPE_"
)

// enumName is the column value of v: its name without prefix, in lower case. An UNSPECIFIED or
// undefined value is an error. Names are computed once per value (every transaction writes a
// handful: statuses, kinds, event types).
func enumName(v protoreflect.Enum, prefix string) (string, error) {
	ed := v.Descriptor()
	key := enumKey{ed.FullName(), v.Number()}
	enumCache.RLock()
	name, ok := enumCache.names[key]
	enumCache.RUnlock()
	if ok {
		return name, nil
	}
	d := ed.Values().ByNumber(v.Number())
	if d == nil || v.Number() == 0 {
		return "", fmt.Errorf("store: %s %d cannot be stored", ed.Name(), v.Number())
	}
	name = strings.ToLower(strings.TrimPrefix(string(d.Name()), prefix))
	enumCache.Lock()
	enumCache.names[key] = name
	enumCache.Unlock()
	return name, nil
}

// enumKey is a value of an enum type, for enumCache.
type enumKey struct {
	enum   protoreflect.FullName
	number protoreflect.EnumNumber
}

// enumCache holds enumName's and enumNumber's answers: a few dozen values (the prefix is fixed
// per enum type, and the names read are those the columns' CHECKs allow).
var enumCache = struct {
	sync.RWMutex
	names   map[enumKey]string
	numbers map[enumNumberKey]protoreflect.EnumNumber
}{names: map[enumKey]string{}, numbers: map[enumNumberKey]protoreflect.EnumNumber{}}

// enumNumberKey is a column value of an enum type, for enumCache.
type enumNumberKey struct {
	enum protoreflect.FullName
	name string
}

// enumNumber reads a column value written by enumName.
func enumNumber(ed protoreflect.EnumDescriptor, prefix, name string) (protoreflect.EnumNumber, error) {
	key := enumNumberKey{ed.FullName(), name}
	enumCache.RLock()
	n, ok := enumCache.numbers[key]
	enumCache.RUnlock()
	if ok {
		return n, nil
	}
	d := ed.Values().ByName(protoreflect.Name(prefix + strings.ToUpper(name)))
	if d == nil {
		return 0, fmt.Errorf("store: %q is not a %s", name, ed.Name())
	}
	enumCache.Lock()
	enumCache.numbers[key] = d.Number()
	enumCache.Unlock()
	return d.Number(), nil
}

// ExecutionStatusName is the task_list_execution_runs.status value of s.
func ExecutionStatusName(s schedulerv1.ExecutionStatus) (string, error) {
	return enumName(s, executionStatusPrefix)
}

// AssignmentStatusName is the wave_task_assignments.status value of s.
func AssignmentStatusName(s schedulerv1.AssignmentStatus) (string, error) {
	return enumName(s, assignmentStatusPrefix)
}

// AssignmentKindName is the wave_task_assignments.kind value of k.
func AssignmentKindName(k schedulerv1.AssignmentKind) (string, error) {
	return enumName(k, assignmentKindPrefix)
}

// EventTypeName is the task_execution_log.event_type value of t.
func EventTypeName(t commonv1.EventType) (string, error) {
	return enumName(t, eventTypePrefix)
}

// TaskStatusName is the tasks.status value of s; UNSPECIFIED is PENDING.
func TaskStatusName(s commonv1.TaskStatus) (string, error) {
	if s != commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED && s.Descriptor().Values().ByNumber(s.Number()) == nil {
		return "", fmt.Errorf("store: TaskStatus %d cannot be stored", s)
	}
	return statusName(s), nil
}

// names maps names over values, stopping at the first error.
func names[E any](values []E, name func(E) (string, error)) ([]string, error) {
	out := make([]string, len(values))
	for i, v := range values {
		n, err := name(v)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// ExecutionStatusNames, AssignmentStatusNames and EventTypeNames are the column values of query
// filters.
func ExecutionStatusNames(s []schedulerv1.ExecutionStatus) ([]string, error) {
	return names(s, ExecutionStatusName)
}

// AssignmentStatusNames: see ExecutionStatusNames.
func AssignmentStatusNames(s []schedulerv1.AssignmentStatus) ([]string, error) {
	return names(s, AssignmentStatusName)
}

// AssignmentKindNames: see ExecutionStatusNames.
func AssignmentKindNames(k []schedulerv1.AssignmentKind) ([]string, error) {
	return names(k, AssignmentKindName)
}

// EventTypeNames: see ExecutionStatusNames.
func EventTypeNames(t []commonv1.EventType) ([]string, error) {
	return names(t, EventTypeName)
}
