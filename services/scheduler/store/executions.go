package store

import (
	"context"
	"errors"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Executions, waves, assignments, the execution log and checkpoints.
//
// The Scheduler's engine (package scheduler) decides every transition in Go; the store keeps the
// rows and gives it one primitive to change them safely: [Executions.UpdateExecution] runs a
// function in a transaction that holds the execution's write lock, so two Scheduler replicas (or
// two goroutines of one) never interleave their changes to one execution, and the execution log's
// seq, which the store assigns inside that lock, is dense (1, 2, 3, ...) and in commit order: a
// reader that has seen seq n has seen every entry up to n. Reads outside UpdateExecution see
// committed state only.
//
// Protos are the row types: the backends store the fields that queries and constraints need as
// columns and the rest as JSON (protojson), and read both back into the same proto.

// Errors of executions and assignments, beside ErrNotFound and ErrAlreadyExists.
var (
	// ErrConflict: an UpdateExecution function gave up because the state it found does not allow
	// the change (the engine wraps it with why). The transaction is rolled back.
	ErrConflict = errors.New("conflict")
)

// Executions is the part of [Store] that keeps execution runs.
type Executions interface {
	// CreateExecution stores a new execution with its waves, its assignments (every task
	// assignment of every wave; integration assignments are added later) and its first log entries,
	// in one transaction. It assigns e.RunNumber (the list's highest + 1), and sets the store times
	// (create/update times, entries' times) and the entries' seqs (1, 2, ...); e.LastSeq ends as the
	// last seq. When e.RequestId is set and the list already has an execution with that request id,
	// nothing is stored and the error wraps ErrAlreadyExists (ExecutionIDByRequest tells which).
	// ErrNotFound when the task list does not exist.
	CreateExecution(ctx context.Context, e *schedulerv1.Execution, waves []*schedulerv1.Wave, assignments []*Assignment, entries []*commonv1.LogEntry) error
	// AssignmentExecution returns the id of the execution assignment id belongs to; ErrNotFound
	// (naming the assignment) when there is no such assignment.
	AssignmentExecution(ctx context.Context, assignmentID string) (string, error)
	// ExecutionIDByRequest returns the id of the list's execution started with requestID, or
	// ErrNotFound.
	ExecutionIDByRequest(ctx context.Context, taskListID, requestID string) (string, error)
	// GetExecution returns an execution (LastSeq as committed) and its waves in wave order.
	// ErrNotFound when it does not exist.
	GetExecution(ctx context.Context, id string) (*schedulerv1.Execution, []*schedulerv1.Wave, error)
	// ListExecutions returns a page of executions, newest first (create time, then id, both
	// descending), and the cursor of the next page, nil on the last page.
	ListExecutions(ctx context.Context, q ListExecutionsQuery) ([]*schedulerv1.Execution, *Cursor, error)
	// ListAssignments returns a page of one execution's assignments ordered by wave number, then
	// kind (tasks before the integration), then position, and the offset of the next page (0 on
	// the last page).
	ListAssignments(ctx context.Context, q ListAssignmentsQuery) ([]*Assignment, int, error)
	// UpdateExecution runs fn in one transaction holding the execution's write lock (Postgres:
	// SELECT ... FOR UPDATE on its row; SQLite: BEGIN IMMEDIATE). fn changes rows through tx; when
	// fn returns an error the transaction rolls back and UpdateExecution returns that error.
	// ErrNotFound when the execution does not exist (fn is not called). fn may be called again
	// when the backend retries a serialization failure, so it must not have effects outside tx.
	UpdateExecution(ctx context.Context, id string, fn func(tx ExecTx) error) error
	// ClaimableExecutions returns the executions whose status is RUNNING (not paused, not
	// validating, not ended) and which have at least one PENDING assignment in a RUNNING or
	// INTEGRATING wave, oldest first, at most limit. Claims then happen in UpdateExecution.
	ClaimableExecutions(ctx context.Context, limit int) ([]*schedulerv1.Execution, error)
	// ExpiredLeases returns assignments whose status is ASSIGNED or RUNNING and whose lease
	// deadline is at or before the store's now, at most limit, oldest deadline first.
	ExpiredLeases(ctx context.Context, limit int) ([]*Assignment, error)
	// ExecutionsInStatus returns the ids of executions in one of the statuses, oldest first, at
	// most limit (the leader's driver uses it to find VALIDATING runs and runs past their wall
	// time).
	ExecutionsInStatus(ctx context.Context, statuses []schedulerv1.ExecutionStatus, limit int) ([]*schedulerv1.Execution, error)
	// ReadLog returns an execution's log entries matching q in seq order, whether more match
	// beyond the page, and the execution's last seq (any entry) at read time. ErrNotFound when the
	// execution does not exist.
	ReadLog(ctx context.Context, q LogQuery) (entries []*commonv1.LogEntry, hasMore bool, lastSeq int64, err error)
	// TryLead tries to become the one holder of the named leadership (the lease reaper and the
	// verification driver run only on the holder). It returns held=false at once when another
	// process holds it. A held leadership lasts until release is called or the process (its
	// database session) ends. SQLite is one process: held is true unless this store already holds it.
	TryLead(ctx context.Context, name string) (held bool, release func(), err error)
}

// ExecTx changes one execution inside [Executions.UpdateExecution]'s transaction. Every method
// concerns that execution only: an assignment, wave or checkpoint of another execution is
// ErrNotFound.
type ExecTx interface {
	// Now is the store's clock at the start of the transaction (Postgres now()); lease deadlines
	// and times come from it, never from an agent's clock.
	Now() time.Time
	// Execution is the execution as read under the lock (LastSeq included). Changes to it are
	// stored by PutExecution.
	Execution() *schedulerv1.Execution
	// PutExecution stores e (same id), update time = Now. LastSeq is the store's: it is ignored.
	PutExecution(e *schedulerv1.Execution) error
	// Waves returns the execution's waves in wave order.
	Waves() ([]*schedulerv1.Wave, error)
	// PutWave stores w, an existing wave of the execution.
	PutWave(w *schedulerv1.Wave) error
	// Assignment returns one assignment of the execution; ErrNotFound otherwise.
	Assignment(id string) (*Assignment, error)
	// Assignments returns the execution's assignments matching q (Page fields ignored: all of
	// them), ordered as ListAssignments.
	Assignments(q ListAssignmentsQuery) ([]*Assignment, error)
	// NextPending returns the PENDING assignment of wave waveNumber to lease next (integration
	// first, then the lowest position), or nil when there is none; kinds empty = any kind.
	NextPending(waveNumber int32, kinds []schedulerv1.AssignmentKind) (*Assignment, error)
	// InsertAssignment stores a new assignment of the execution (e.g. a wave's integration).
	// ErrAlreadyExists when the wave already has an assignment for that task (or an integration).
	InsertAssignment(a *Assignment) error
	// PutAssignment stores a, an existing assignment of the execution.
	PutAssignment(a *Assignment) error
	// Append adds entries to the execution's log: it sets each entry's Seq (last seq + 1, ...),
	// ExecutionId and Time (Now), and advances the execution's last seq.
	Append(entries ...*commonv1.LogEntry) error
	// PutCheckpoint stores a checkpoint of the execution (Id set by the caller; CreateTime = Now).
	PutCheckpoint(c *commonv1.Checkpoint, assignmentID string, attempt int32) error
	// SetTaskStatus sets the status of the task taskID of the execution's task list (the list's
	// record of what is done, read by GetTaskList and by later executions).
	SetTaskStatus(taskID string, status commonv1.TaskStatus) error
}

// Assignment is a stored assignment: the proto plus what the engine keeps beside it.
type Assignment struct {
	// Assignment is the assignment as the RPCs show it.
	*schedulerv1.Assignment
	// Position orders the task assignments of a wave for claiming (the task's position in its
	// list); integrations have -1.
	Position int32
	// LastReportSeq is the highest ReportProgress report_seq accepted for the current lease (0
	// after a new lease).
	LastReportSeq int64
	// PreviousErrors are the errors of earlier attempts, oldest first, at most 5 (hints for the
	// next attempt).
	PreviousErrors []*commonv1.ErrorContext
	// Merges are an integration's inputs in merge order (INTEGRATION only).
	Merges []*schedulerv1.IntegrationInput
	// FinalIntegration is true for the last wave's integration.
	FinalIntegration bool
}

// ListExecutionsQuery selects a page of executions.
type ListExecutionsQuery struct {
	// PageSize is the most executions to return (at least 1).
	PageSize int
	// After is the cursor the previous page returned; nil for the first page.
	After *Cursor
	// TaskListID keeps only executions of this list; "" keeps all.
	TaskListID string
	// Statuses keeps only executions in one of these statuses; empty keeps all.
	Statuses []schedulerv1.ExecutionStatus
	// FeatureBuildID keeps only iterations of this feature build; "" keeps all.
	FeatureBuildID string
}

// ListAssignmentsQuery selects an execution's assignments.
type ListAssignmentsQuery struct {
	// ExecutionID is required.
	ExecutionID string
	// WaveNumber keeps only one wave; 0 keeps all.
	WaveNumber int32
	// TaskID keeps only that task's assignments; "" keeps all.
	TaskID string
	// Statuses keeps only assignments in one of these statuses; empty keeps all.
	Statuses []schedulerv1.AssignmentStatus
	// InstanceID keeps only assignments held (or last held) by this agent instance.
	InstanceID string
	// PageSize and Offset page the result (ListAssignments only); PageSize at least 1.
	PageSize, Offset int
}

// LogQuery selects entries of one execution's log.
type LogQuery struct {
	// ExecutionID is required.
	ExecutionID string
	// AfterSeq keeps entries with seq > AfterSeq.
	AfterSeq int64
	// TaskID keeps only that task's entries; "" keeps all.
	TaskID string
	// InstanceID keeps only that agent instance's entries; "" keeps all.
	InstanceID string
	// EventTypes keeps only these types; empty keeps all.
	EventTypes []commonv1.EventType
	// Limit is the most entries to return (at least 1).
	Limit int
	// Tail returns the newest Limit matching entries (still in seq order) instead of the oldest.
	Tail bool
}
