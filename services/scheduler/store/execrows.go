package store

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// This file turns executions, waves, assignments, log entries and checkpoints into rows and
// back, the same way for every SQL backend (see migrations/postgres/0003_executions.sql). A proto
// is one row: the fields queries and constraints need are columns, every other field is the
// proto's JSON in the detail column, so a field added to a proto is kept without a migration.
// Enum values are stored as their names in lower case without the enum's prefix. Nullable
// columns are pointers; times are time.Time, which each backend writes in its own form.

// ExecutionRow is the task_list_execution_runs row of an execution.
type ExecutionRow struct {
	ID, TaskListID                                 string
	RunNumber                                      int32
	Status                                         string
	Outcome                                        *string
	TriggeredBy                                    string
	RequestID, PreviousExecutionID, FeatureBuildID *string
	TotalTasks, CompletedTasks, FailedTasks        int32
	SkippedTasks, RunningTasks                     int32
	CurrentWave, WaveCount, TotalAttempts          int32
	LastSeq                                        int64
	Detail                                         string // JSON object
	CreateTime, UpdateTime                         time.Time
	StartTime, EndTime                             *time.Time
}

// WaveRow is the parallel_execution_waves row of a wave.
type WaveRow struct {
	ID, ExecutionID                                      string
	WaveNumber                                           int32
	Status                                               string
	TaskCount, CompletedCount, FailedCount, SkippedCount int32
	ActiveAgents                                         int32
	BaseCommit, IntegrationCommit                        *string
	Detail                                               string // JSON object
	StartTime, EndTime                                   *time.Time
}

// AssignmentRow is the wave_task_assignments row of an assignment (without its create and update
// times, which the store sets).
type AssignmentRow struct {
	ID, ExecutionID, WaveID     string
	WaveNumber                  int32
	Kind                        string
	TaskKey                     *string
	Status                      string
	InstanceID                  *string
	Attempt                     int32
	FencingToken                int64
	LeaseExpireTime, AssignTime *time.Time
	CompleteTime                *time.Time
	LastReportSeq               int64
	Position                    int32
	FinalIntegration            bool
	PreviousErrors, Merges      string // JSON arrays
	Detail                      string // JSON object
	SessionID                   *string
	ReadyWave                   *int32
	UnmetDeps                   int32
}

// LogRow is the task_execution_log row of a log entry.
type LogRow struct {
	ExecutionID         string
	Seq                 int64
	TaskKey, InstanceID *string
	WaveNumber          *int32
	EventType           string
	Message             string
	Context             *string // JSON object
	Time                time.Time
	SourceTime          *time.Time
}

// CheckpointRow is the checkpoints row of a checkpoint.
type CheckpointRow struct {
	ID, ExecutionID string
	TaskKey         *string
	AssignmentID    *string
	Attempt         int32
	InstanceID      *string
	GitRef          string
	Files, Metadata string // JSON array, JSON object
	CreateTime      time.Time
}

var (
	unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// detailOf is the JSON of m without the fields clear removes (those kept in columns).
func detailOf[M proto.Message](m M, clear func(M)) (string, error) {
	c := proto.CloneOf(m)
	clear(c)
	b, err := protojson.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("store: encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	if len(b) == 0 {
		return "{}", nil
	}
	return string(b), nil
}

// protoList is the JSON array of ms, each in protojson.
func protoList[M proto.Message](ms []M) (string, error) {
	if len(ms) == 0 {
		return "[]", nil
	}
	raw := make([]json.RawMessage, len(ms))
	for i, m := range ms {
		b, err := protojson.Marshal(m)
		if err != nil {
			return "", fmt.Errorf("store: encode %s: %w", m.ProtoReflect().Descriptor().Name(), err)
		}
		if len(b) == 0 {
			b = []byte("{}")
		}
		raw[i] = b
	}
	return jsonText(raw)
}

// listOf reads a JSON array written by protoList.
func listOf[M proto.Message](text string, newM func() M) ([]M, error) {
	if text == "[]" {
		return nil, nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(text), &raw); err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]M, len(raw))
	for i, r := range raw {
		m := newM()
		if err := unmarshal.Unmarshal(r, m); err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

func timeOf(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}

func stamp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// EncodeExecution returns the row of e. An UNSPECIFIED status is PENDING and an UNSPECIFIED
// trigger USER; the outcome is NULL while UNSPECIFIED. The times are e's (unset: zero).
func EncodeExecution(e *schedulerv1.Execution) (ExecutionRow, error) {
	r := ExecutionRow{
		ID: e.GetId(), TaskListID: e.GetTaskListId(), RunNumber: e.GetRunNumber(),
		RequestID: nullable(e.GetRequestId()), PreviousExecutionID: nullable(e.GetPreviousExecutionId()),
		FeatureBuildID: nullable(e.GetFeatureBuildId()),
		TotalTasks:     e.GetTotalTasks(), CompletedTasks: e.GetCompletedTasks(), FailedTasks: e.GetFailedTasks(),
		SkippedTasks: e.GetSkippedTasks(), RunningTasks: e.GetRunningTasks(),
		CurrentWave: e.GetCurrentWave(), WaveCount: e.GetWaveCount(), TotalAttempts: e.GetTotalAttempts(),
		LastSeq: e.GetLastSeq(), StartTime: timeOf(e.GetStartTime()), EndTime: timeOf(e.GetEndTime()),
	}
	if t := timeOf(e.GetCreateTime()); t != nil {
		r.CreateTime = *t
	}
	if t := timeOf(e.GetUpdateTime()); t != nil {
		r.UpdateTime = *t
	}
	var err error
	status := e.GetStatus()
	if status == schedulerv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
		status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING
	}
	if r.Status, err = ExecutionStatusName(status); err != nil {
		return r, fmt.Errorf("execution %q: %w", e.GetId(), err)
	}
	trigger := e.GetTriggeredBy()
	if trigger == schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_UNSPECIFIED {
		trigger = schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_USER
	}
	if r.TriggeredBy, err = enumName(trigger, executionTriggerPrefix); err != nil {
		return r, fmt.Errorf("execution %q: %w", e.GetId(), err)
	}
	if o := e.GetOutcome(); o != commonv1.Outcome_OUTCOME_UNSPECIFIED {
		name, err := enumName(o, outcomePrefix)
		if err != nil {
			return r, fmt.Errorf("execution %q: %w", e.GetId(), err)
		}
		r.Outcome = &name
	}
	r.Detail, err = execDetails.encodeOf(r.ID, e, executionColumns, stripExecutionColumns)
	return r, err
}

// executionColumns are the fields of an Execution that are columns of its row; the rest is its
// detail. stripExecutionColumns clears the same fields.
var executionColumns = newDetailColumns(&schedulerv1.Execution{}, "id", "task_list_id", "run_number", "triggered_by",
	"status", "outcome", "total_tasks", "completed_tasks", "failed_tasks", "skipped_tasks", "running_tasks",
	"current_wave", "wave_count", "total_attempts", "previous_execution_id", "feature_build_id", "request_id",
	"last_seq", "create_time", "start_time", "end_time", "update_time")

func stripExecutionColumns(c *schedulerv1.Execution) {
	c.Id, c.TaskListId, c.RunNumber, c.TriggeredBy, c.Status, c.Outcome = "", "", 0, 0, 0, 0
	c.TotalTasks, c.CompletedTasks, c.FailedTasks, c.SkippedTasks, c.RunningTasks = 0, 0, 0, 0, 0
	c.CurrentWave, c.WaveCount, c.TotalAttempts = 0, 0, 0
	c.PreviousExecutionId, c.FeatureBuildId, c.RequestId, c.LastSeq = "", "", "", 0
	c.CreateTime, c.StartTime, c.EndTime, c.UpdateTime = nil, nil, nil, nil
}

// DecodeExecution builds an execution from its row: detail first, then the columns over it.
func DecodeExecution(r ExecutionRow) (*schedulerv1.Execution, error) {
	e, err := execDetails.decode(r.ID, r.Detail)
	if err != nil {
		return nil, fmt.Errorf("store: execution %q: detail: %w", r.ID, err)
	}
	if err := SetExecutionColumns(e, r); err != nil {
		return nil, err
	}
	return e, nil
}

// SetExecutionColumns sets every field of e that is a column of its row to r's value, leaving
// its detail fields: on a message decoded from a row with r's detail text, it makes the message
// DecodeExecution(r) answers, without decoding the detail again.
func SetExecutionColumns(e *schedulerv1.Execution, r ExecutionRow) error {
	e.Id, e.TaskListId, e.RunNumber = r.ID, r.TaskListID, r.RunNumber
	status, err := enumNumber(schedulerv1.ExecutionStatus(0).Descriptor(), executionStatusPrefix, r.Status)
	if err != nil {
		return fmt.Errorf("execution %q: %w", r.ID, err)
	}
	e.Status = schedulerv1.ExecutionStatus(status)
	trigger, err := enumNumber(schedulerv1.ExecutionTrigger(0).Descriptor(), executionTriggerPrefix, r.TriggeredBy)
	if err != nil {
		return fmt.Errorf("execution %q: %w", r.ID, err)
	}
	e.TriggeredBy = schedulerv1.ExecutionTrigger(trigger)
	e.Outcome = commonv1.Outcome_OUTCOME_UNSPECIFIED
	if r.Outcome != nil {
		o, err := enumNumber(commonv1.Outcome(0).Descriptor(), outcomePrefix, *r.Outcome)
		if err != nil {
			return fmt.Errorf("execution %q: %w", r.ID, err)
		}
		e.Outcome = commonv1.Outcome(o)
	}
	e.RequestId, e.PreviousExecutionId, e.FeatureBuildId = deref(r.RequestID), deref(r.PreviousExecutionID), deref(r.FeatureBuildID)
	e.TotalTasks, e.CompletedTasks, e.FailedTasks = r.TotalTasks, r.CompletedTasks, r.FailedTasks
	e.SkippedTasks, e.RunningTasks = r.SkippedTasks, r.RunningTasks
	e.CurrentWave, e.WaveCount, e.TotalAttempts, e.LastSeq = r.CurrentWave, r.WaveCount, r.TotalAttempts, r.LastSeq
	e.CreateTime, e.UpdateTime = timestamppb.New(r.CreateTime), timestamppb.New(r.UpdateTime)
	e.StartTime, e.EndTime = stamp(r.StartTime), stamp(r.EndTime)
	return nil
}

// EncodeWave returns the row of w. An UNSPECIFIED status is PENDING.
func EncodeWave(w *schedulerv1.Wave) (WaveRow, error) {
	r := WaveRow{
		ID: w.GetId(), ExecutionID: w.GetExecutionId(), WaveNumber: w.GetWaveNumber(),
		TaskCount: w.GetTaskCount(), CompletedCount: w.GetCompletedCount(), FailedCount: w.GetFailedCount(),
		SkippedCount: w.GetSkippedCount(), ActiveAgents: w.GetActiveAgents(),
		BaseCommit: nullable(w.GetBaseCommit()), IntegrationCommit: nullable(w.GetIntegrationCommit()),
		StartTime: timeOf(w.GetStartTime()), EndTime: timeOf(w.GetEndTime()),
	}
	status := w.GetStatus()
	if status == schedulerv1.WaveStatus_WAVE_STATUS_UNSPECIFIED {
		status = schedulerv1.WaveStatus_WAVE_STATUS_PENDING
	}
	var err error
	if r.Status, err = enumName(status, waveStatusPrefix); err != nil {
		return r, fmt.Errorf("wave %q: %w", w.GetId(), err)
	}
	if len(w.GetPlacements()) == 0 && len(w.ProtoReflect().GetUnknown()) == 0 {
		// Every other field is a column: the detail is protojson's "{}" (ExecTx's waves, read
		// without their placements, on every claim and completion).
		r.Detail = "{}"
		return r, nil
	}
	r.Detail, err = detailOf(w, func(c *schedulerv1.Wave) {
		c.Id, c.ExecutionId, c.WaveNumber, c.Status = "", "", 0, 0
		c.TaskCount, c.CompletedCount, c.FailedCount, c.SkippedCount, c.ActiveAgents = 0, 0, 0, 0, 0
		c.BaseCommit, c.IntegrationCommit, c.StartTime, c.EndTime = "", "", nil, nil
	})
	return r, err
}

// DecodeWave builds a wave from its row.
func DecodeWave(r WaveRow) (*schedulerv1.Wave, error) {
	w := &schedulerv1.Wave{}
	if r.Detail == "{}" {
		// No placements (ExecTx reads none): nothing to decode.
	} else if err := unmarshal.Unmarshal([]byte(r.Detail), w); err != nil {
		return nil, fmt.Errorf("store: wave %q: detail: %w", r.ID, err)
	}
	status, err := enumNumber(schedulerv1.WaveStatus(0).Descriptor(), waveStatusPrefix, r.Status)
	if err != nil {
		return nil, fmt.Errorf("wave %q: %w", r.ID, err)
	}
	w.Id, w.ExecutionId, w.WaveNumber, w.Status = r.ID, r.ExecutionID, r.WaveNumber, schedulerv1.WaveStatus(status)
	w.TaskCount, w.CompletedCount, w.FailedCount = r.TaskCount, r.CompletedCount, r.FailedCount
	w.SkippedCount, w.ActiveAgents = r.SkippedCount, r.ActiveAgents
	w.BaseCommit, w.IntegrationCommit = deref(r.BaseCommit), deref(r.IntegrationCommit)
	w.StartTime, w.EndTime = stamp(r.StartTime), stamp(r.EndTime)
	return w, nil
}

// EncodeAssignment returns the row of a. The kind must be set; an UNSPECIFIED status is PENDING
// and attempt 0 is 1.
func EncodeAssignment(a *Assignment) (AssignmentRow, error) {
	if a == nil || a.Assignment == nil {
		return AssignmentRow{}, fmt.Errorf("store: assignment without its proto")
	}
	p := a.Assignment
	r := AssignmentRow{
		ID: p.GetId(), ExecutionID: p.GetExecutionId(), WaveID: p.GetWaveId(), WaveNumber: p.GetWaveNumber(),
		TaskKey: nullable(p.GetTaskId()), InstanceID: nullable(p.GetInstanceId()), Attempt: max(p.GetAttempt(), 1),
		FencingToken: p.GetFencingToken(), LeaseExpireTime: timeOf(p.GetLeaseExpireTime()),
		AssignTime: timeOf(p.GetAssignTime()), CompleteTime: timeOf(p.GetCompleteTime()),
		LastReportSeq: a.LastReportSeq, Position: a.Position, FinalIntegration: a.FinalIntegration,
		SessionID: nullable(a.SessionID),
	}
	if a.ReadyWave > 0 {
		r.ReadyWave = &a.ReadyWave
	}
	r.UnmetDeps = max(a.UnmetDeps, 0)
	var err error
	if r.Kind, err = AssignmentKindName(p.GetKind()); err != nil {
		return r, fmt.Errorf("assignment %q: %w", p.GetId(), err)
	}
	status := p.GetStatus()
	if status == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_UNSPECIFIED {
		status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
	}
	if r.Status, err = AssignmentStatusName(status); err != nil {
		return r, fmt.Errorf("assignment %q: %w", p.GetId(), err)
	}
	if r.PreviousErrors, err = protoList(a.PreviousErrors); err != nil {
		return r, fmt.Errorf("assignment %q: %w", p.GetId(), err)
	}
	if r.Merges, err = protoList(a.Merges); err != nil {
		return r, fmt.Errorf("assignment %q: %w", p.GetId(), err)
	}
	r.Detail, err = assignmentDetails.encodeOf(r.ID, p, assignmentColumns, stripAssignmentColumns)
	return r, err
}

// assignmentColumns are the fields of an Assignment that are columns of its row; the rest is its
// detail. stripAssignmentColumns clears the same fields.
var assignmentColumns = newDetailColumns(&schedulerv1.Assignment{}, "id", "kind", "execution_id", "wave_id",
	"wave_number", "task_id", "status", "instance_id", "attempt", "fencing_token", "lease_expire_time",
	"assign_time", "complete_time")

func stripAssignmentColumns(c *schedulerv1.Assignment) {
	c.Id, c.Kind, c.ExecutionId, c.WaveId, c.WaveNumber, c.TaskId, c.Status = "", 0, "", "", 0, "", 0
	c.InstanceId, c.Attempt, c.FencingToken = "", 0, 0
	c.LeaseExpireTime, c.AssignTime, c.CompleteTime = nil, nil, nil
}

// DecodeAssignment builds an assignment from its row.
func DecodeAssignment(r AssignmentRow) (*Assignment, error) {
	p, err := assignmentDetails.decode(r.ID, r.Detail)
	if err != nil {
		return nil, fmt.Errorf("store: assignment %q: detail: %w", r.ID, err)
	}
	kind, err := enumNumber(schedulerv1.AssignmentKind(0).Descriptor(), assignmentKindPrefix, r.Kind)
	if err != nil {
		return nil, fmt.Errorf("assignment %q: %w", r.ID, err)
	}
	status, err := enumNumber(schedulerv1.AssignmentStatus(0).Descriptor(), assignmentStatusPrefix, r.Status)
	if err != nil {
		return nil, fmt.Errorf("assignment %q: %w", r.ID, err)
	}
	p.Id, p.Kind, p.ExecutionId, p.WaveId, p.WaveNumber = r.ID, schedulerv1.AssignmentKind(kind), r.ExecutionID, r.WaveID, r.WaveNumber
	p.TaskId, p.Status, p.InstanceId = deref(r.TaskKey), schedulerv1.AssignmentStatus(status), deref(r.InstanceID)
	p.Attempt, p.FencingToken = r.Attempt, r.FencingToken
	p.LeaseExpireTime, p.AssignTime, p.CompleteTime = stamp(r.LeaseExpireTime), stamp(r.AssignTime), stamp(r.CompleteTime)
	a := &Assignment{Assignment: p, Position: r.Position, LastReportSeq: r.LastReportSeq, FinalIntegration: r.FinalIntegration,
		SessionID: deref(r.SessionID)}
	if r.ReadyWave != nil {
		a.ReadyWave = *r.ReadyWave
	}
	a.UnmetDeps = r.UnmetDeps
	if a.PreviousErrors, err = listOf(r.PreviousErrors, func() *commonv1.ErrorContext { return &commonv1.ErrorContext{} }); err != nil {
		return nil, fmt.Errorf("store: assignment %q: previous_errors: %w", r.ID, err)
	}
	if a.Merges, err = listOf(r.Merges, func() *schedulerv1.IntegrationInput { return &schedulerv1.IntegrationInput{} }); err != nil {
		return nil, fmt.Errorf("store: assignment %q: merges: %w", r.ID, err)
	}
	return a, nil
}

// EncodeLogEntry returns the row of e. Its event type must be set; its seq, execution and time
// are e's.
func EncodeLogEntry(e *commonv1.LogEntry) (LogRow, error) {
	r := LogRow{
		ExecutionID: e.GetExecutionId(), Seq: e.GetSeq(), TaskKey: nullable(e.GetTaskId()),
		InstanceID: nullable(e.GetInstanceId()), Message: e.GetMessage(),
	}
	if t := timeOf(e.GetTime()); t != nil {
		r.Time = *t
	}
	r.SourceTime = timeOf(e.GetSourceTime())
	if n := e.GetWaveNumber(); n != 0 {
		r.WaveNumber = &n
	}
	var err error
	if r.EventType, err = EventTypeName(e.GetEventType()); err != nil {
		return r, fmt.Errorf("log entry: %w", err)
	}
	if e.GetContext() != nil {
		text, err := structJSON(e.GetContext())
		if err != nil {
			return r, fmt.Errorf("store: log entry: context: %w", err)
		}
		r.Context = &text
	}
	return r, nil
}

// DecodeLogEntry builds a log entry from its row.
func DecodeLogEntry(r LogRow) (*commonv1.LogEntry, error) {
	et, err := enumNumber(commonv1.EventType(0).Descriptor(), eventTypePrefix, r.EventType)
	if err != nil {
		return nil, fmt.Errorf("log entry %d: %w", r.Seq, err)
	}
	e := &commonv1.LogEntry{
		Seq: r.Seq, ExecutionId: r.ExecutionID, TaskId: deref(r.TaskKey), InstanceId: deref(r.InstanceID),
		Time: timestamppb.New(r.Time), EventType: commonv1.EventType(et), Message: r.Message,
		SourceTime: stamp(r.SourceTime),
	}
	if r.WaveNumber != nil {
		e.WaveNumber = *r.WaveNumber
	}
	if r.Context != nil {
		e.Context = &structpb.Struct{}
		if err := unmarshal.Unmarshal([]byte(*r.Context), e.Context); err != nil {
			return nil, fmt.Errorf("store: log entry %d: context: %w", r.Seq, err)
		}
	}
	return e, nil
}

// EncodeCheckpoint returns the row of c, taken for attempt of assignmentID ("" for none).
func EncodeCheckpoint(c *commonv1.Checkpoint, assignmentID string, attempt int32) (CheckpointRow, error) {
	r := CheckpointRow{
		ID: c.GetId(), ExecutionID: c.GetExecutionId(), TaskKey: nullable(c.GetTaskId()),
		AssignmentID: nullable(assignmentID), Attempt: max(attempt, 1), InstanceID: nullable(c.GetInstanceId()),
		GitRef: c.GetGitRef(),
	}
	if t := timeOf(c.GetCreateTime()); t != nil {
		r.CreateTime = *t
	}
	var err error
	if r.Files, err = protoList(c.GetFiles()); err != nil {
		return r, fmt.Errorf("checkpoint %q: %w", c.GetId(), err)
	}
	md := c.GetMetadata()
	if md == nil {
		md = map[string]string{}
	}
	if r.Metadata, err = jsonText(md); err != nil {
		return r, fmt.Errorf("checkpoint %q: %w", c.GetId(), err)
	}
	return r, nil
}

// CreateRows returns the rows of a new execution's waves and assignments (see NewAssignmentRow).
func CreateRows(executionID string, waves []*schedulerv1.Wave, assignments []*Assignment) ([]WaveRow, []AssignmentRow, error) {
	wrows := make([]WaveRow, len(waves))
	for i, w := range waves {
		r, err := EncodeWave(w)
		if err != nil {
			return nil, nil, err
		}
		r.ExecutionID = executionID
		wrows[i] = r
	}
	arows := make([]AssignmentRow, len(assignments))
	for i, a := range assignments {
		r, err := NewAssignmentRow(executionID, a, waves)
		if err != nil {
			return nil, nil, err
		}
		arows[i] = r
	}
	return wrows, arows, nil
}

// NewAssignmentRow returns the row of a new assignment of execution executionID, whose waves
// are waves: the wave is found by a.WaveId, or by a.WaveNumber when the id is not set.
// ErrNotFound when the execution has no such wave.
func NewAssignmentRow(executionID string, a *Assignment, waves []*schedulerv1.Wave) (AssignmentRow, error) {
	r, err := EncodeAssignment(a)
	if err != nil {
		return r, err
	}
	r.ExecutionID = executionID
	for _, w := range waves {
		if (r.WaveID != "" && w.GetId() == r.WaveID) || (r.WaveID == "" && w.GetWaveNumber() == r.WaveNumber) {
			if r.WaveNumber != 0 && r.WaveNumber != w.GetWaveNumber() {
				return r, fmt.Errorf("store: assignment %q: wave %q is wave %d, not %d", r.ID, w.GetId(), w.GetWaveNumber(), r.WaveNumber)
			}
			r.WaveID, r.WaveNumber = w.GetId(), w.GetWaveNumber()
			return r, nil
		}
	}
	if r.WaveID != "" {
		return r, fmt.Errorf("assignment %q: wave %q of execution %q: %w", r.ID, r.WaveID, executionID, ErrNotFound)
	}
	return r, fmt.Errorf("assignment %q: wave %d of execution %q: %w", r.ID, r.WaveNumber, executionID, ErrNotFound)
}

// DuplicateAssignment is the error of an assignment insert that conflicted.
func DuplicateAssignment(r AssignmentRow) error {
	if r.TaskKey == nil {
		return fmt.Errorf("assignment %q: wave %q has an integration or an assignment with that id: %w", r.ID, r.WaveID, ErrAlreadyExists)
	}
	return fmt.Errorf("assignment %q: wave %q has an assignment of task %q or one with that id: %w", r.ID, r.WaveID, *r.TaskKey, ErrAlreadyExists)
}

// Inserted sets on a what its stored row r says: execution, wave, status and attempt.
func Inserted(a *Assignment, r AssignmentRow) {
	a.ExecutionId, a.WaveId, a.WaveNumber, a.Attempt = r.ExecutionID, r.WaveID, r.WaveNumber, r.Attempt
	if a.Status == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_UNSPECIFIED {
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
	}
}

// Created sets on a new execution's waves and assignments what CreateExecution stored: their
// execution, and the assignments' waves.
func Created(e *schedulerv1.Execution, waves []*schedulerv1.Wave, assignments []*Assignment) {
	if e.Status == schedulerv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED {
		e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING
	}
	if e.TriggeredBy == schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_UNSPECIFIED {
		e.TriggeredBy = schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_USER
	}
	for _, w := range waves {
		w.ExecutionId = e.GetId()
		if w.Status == schedulerv1.WaveStatus_WAVE_STATUS_UNSPECIFIED {
			w.Status = schedulerv1.WaveStatus_WAVE_STATUS_PENDING
		}
	}
	for _, a := range assignments {
		r, err := NewAssignmentRow(e.GetId(), a, waves)
		if err == nil {
			Inserted(a, r)
		}
	}
}

// keepStored sets in r, the row of an execution PutExecution writes over stored (the execution as
// it is in the transaction), the columns that are the store's: the id, task list, run number,
// request id, create time and last seq as stored, and the update time now. (The detail holds none
// of them.)
func keepStored(r *ExecutionRow, stored *schedulerv1.Execution, now time.Time) {
	r.ID, r.TaskListID, r.RunNumber = stored.GetId(), stored.GetTaskListId(), stored.GetRunNumber()
	r.RequestID, r.LastSeq = nullable(stored.GetRequestId()), stored.GetLastSeq()
	r.CreateTime = time.Time{}
	if t := timeOf(stored.GetCreateTime()); t != nil {
		r.CreateTime = *t
	}
	r.UpdateTime = timestamppb.New(now).AsTime()
}

// LogPage turns the rows a log read found into ReadLog's page. rows are in seq order and hold at
// most q.Limit + 1 entries: the oldest matching ones, or the newest for q.Tail. The one past the
// page, if any, says that more match (for a tail read: older ones).
func LogPage(rows []LogRow, q LogQuery) ([]*commonv1.LogEntry, bool, error) {
	hasMore := len(rows) > q.Limit
	if hasMore {
		if q.Tail {
			rows = rows[len(rows)-q.Limit:]
		} else {
			rows = rows[:q.Limit]
		}
	}
	out := make([]*commonv1.LogEntry, len(rows))
	for i, r := range rows {
		e, err := DecodeLogEntry(r)
		if err != nil {
			return nil, false, err
		}
		out[i] = e
	}
	return out, hasMore, nil
}

// LogRows numbers entries after lastSeq, for execution id at now, and returns their rows. The
// entries themselves are not changed (see SetEntries).
func LogRows(id string, lastSeq int64, now time.Time, entries []*commonv1.LogEntry) ([]LogRow, error) {
	rows := make([]LogRow, len(entries))
	for i, e := range entries {
		r, err := EncodeLogEntry(e)
		if err != nil {
			return nil, err
		}
		r.ExecutionID, r.Seq, r.Time = id, lastSeq+int64(i)+1, now
		rows[i] = r
	}
	return rows, nil
}

// SetEntries gives entries the seqs, execution and time of their stored rows.
func SetEntries(entries []*commonv1.LogEntry, rows []LogRow) {
	for i, e := range entries {
		e.Seq, e.ExecutionId, e.Time = rows[i].Seq, rows[i].ExecutionID, timestamppb.New(rows[i].Time)
	}
}

// DependencyCounts folds SatisfyDependencies' task ids into distinct tasks (in first-seen order)
// and how often each was named.
func DependencyCounts(taskIDs []string) (tasks []string, counts []int32) {
	at := make(map[string]int, len(taskIDs))
	for _, id := range taskIDs {
		if i, ok := at[id]; ok {
			counts[i]++
			continue
		}
		at[id] = len(tasks)
		tasks, counts = append(tasks, id), append(counts, 1)
	}
	return tasks, counts
}
