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
	// ErrTxDone: an ExecTx was used after its UpdateExecution function returned.
	ErrTxDone = errors.New("the execution's transaction has ended: ExecTx used after UpdateExecution's function returned")
)

// Executions is the part of [Store] that keeps execution runs.
// CreateOptions changes how CreateExecution checks a new run; the zero value is the default.
type CreateOptions struct {
	// AllowConcurrent: the run may start while the list has another open execution
	// (StartExecutionRequest.allow_concurrent).
	AllowConcurrent bool
}

// ConcurrentAllowed reports whether opts (CreateExecution's) allow a run next to an open one.
func ConcurrentAllowed(opts []CreateOptions) bool {
	for _, o := range opts {
		if o.AllowConcurrent {
			return true
		}
	}
	return false
}

type Executions interface {
	// CreateExecution stores a new execution with its waves, its assignments (every task
	// assignment of every wave; integration assignments are added later) and its first log entries,
	// in one transaction. It assigns e.RunNumber (the list's highest + 1), and sets the store times
	// (create/update times, entries' times: one instant) and the entries' seqs (1, 2, ...);
	// e.LastSeq ends as the last seq. It also sets the waves' and assignments' ExecutionId; an
	// assignment names its wave by WaveId, or by WaveNumber when WaveId is empty, and gets both.
	// An UNSPECIFIED status is stored as PENDING and an UNSPECIFIED trigger as USER (and read back
	// so); attempt 0 as 1. When e.RequestId is set and the list already has an execution with that
	// request id, nothing is stored and the error wraps ErrAlreadyExists (ExecutionIDByRequest tells
	// which); a taken execution, wave or assignment id is ErrAlreadyExists too. ErrNotFound when
	// the task list does not exist. A new run, e stored PENDING (as the engine starts every run),
	// gets OpenExecutionError (ErrActive) when the list has an execution that has not ended
	// (PENDING, RUNNING or PAUSED), checked under the list's lock so that two concurrent starts
	// cannot both pass; an execution stored in another status (a test's fixture) is not checked,
	// nor is a run created with CreateOptions.AllowConcurrent.
	CreateExecution(ctx context.Context, e *schedulerv1.Execution, waves []*schedulerv1.Wave, assignments []*Assignment, entries []*commonv1.LogEntry, opts ...CreateOptions) error
	// AssignmentExecution returns the id of the execution assignment id belongs to; ErrNotFound
	// (naming the assignment) when there is no such assignment.
	AssignmentExecution(ctx context.Context, assignmentID string) (string, error)
	// ExecutionIDByRequest returns the id of the list's execution started with requestID, or
	// ErrNotFound.
	ExecutionIDByRequest(ctx context.Context, taskListID, requestID string) (string, error)
	// GetExecution returns an execution (LastSeq as committed) and its waves in wave order.
	// ErrNotFound when it does not exist.
	GetExecution(ctx context.Context, id string) (*schedulerv1.Execution, []*schedulerv1.Wave, error)
	// Execution returns an execution (LastSeq as committed) without its waves: one row, whatever
	// the run's size (a watcher's snapshot, a status check). ErrNotFound when it does not exist.
	Execution(ctx context.Context, id string) (*schedulerv1.Execution, error)
	// ListExecutions returns a page of executions, newest first (create time, then id, both
	// descending), and the cursor of the next page, nil on the last page.
	ListExecutions(ctx context.Context, q ListExecutionsQuery) ([]*schedulerv1.Execution, *Cursor, error)
	// ListAssignments returns a page of one execution's assignments ordered by wave number, then
	// kind (tasks before the integration), then position, and the offset of the next page (0 on
	// the last page).
	ListAssignments(ctx context.Context, q ListAssignmentsQuery) ([]*Assignment, int, error)
	// UpdateExecution runs fn in one transaction holding the execution's write lock (Postgres:
	// SELECT ... FOR NO KEY UPDATE on its row; SQLite: BEGIN IMMEDIATE, the database's write
	// lock). fn changes rows through tx; when fn returns an error the transaction rolls back and
	// UpdateExecution returns that error unchanged. ErrNotFound when the execution does not exist
	// (fn is not called). fn may be called again (with a new tx) when Postgres aborts the
	// transaction for a deadlock or a serialization failure, so it must not have effects outside
	// tx. tx is for fn's goroutine only and fails with ErrTxDone once fn has returned.
	//
	// An ExecTx method that fails with ErrNotFound or ErrAlreadyExists leaves the transaction
	// usable; after any other error (a broken constraint, a lost connection) Postgres refuses the
	// rest of the transaction, so fn should return it.
	//
	// On SQLite, fn must not write through the store outside tx (that would wait for the lock tx
	// holds); reads outside tx see the state before the transaction.
	UpdateExecution(ctx context.Context, id string, fn func(tx ExecTx) error) error
	// ClaimableExecutions returns the executions whose status is RUNNING (not pending, paused or
	// ended) and which have at least one PENDING assignment in a RUNNING or INTEGRATING wave (or
	// a PENDING task assignment of a later wave whose ReadyWave is set and at most the current
	// wave and whose UnmetDeps is 0: eager dispatch),
	// oldest first (create time, then id), at most limit. Claims then happen in UpdateExecution.
	ClaimableExecutions(ctx context.Context, limit int) ([]*schedulerv1.Execution, error)
	// ExpiredLeases returns assignments whose status is ASSIGNED or RUNNING and whose lease
	// deadline is at or before the store's now (the clock of ExecTx.Now), at most limit, oldest
	// deadline first (then by id).
	ExpiredLeases(ctx context.Context, limit int) ([]*Assignment, error)
	// HeldAssignments returns the assignments held (ASSIGNED or RUNNING) by one of the agent
	// instances, of any execution, oldest lease first (assign time, then id), at most limit; none
	// for no instance (the stale-agent reaper and a new agent session use it).
	HeldAssignments(ctx context.Context, instances []string, limit int) ([]*Assignment, error)
	// ExecutionsInStatus returns the executions in one of the statuses, oldest first (create
	// time, then id), at most limit; none for no status (the leader's driver uses it to find runs
	// left PENDING, runs waiting for verification and runs past their wall time).
	ExecutionsInStatus(ctx context.Context, statuses []schedulerv1.ExecutionStatus, limit int) ([]*schedulerv1.Execution, error)
	// AwaitingSignOff returns the executions that ended COMPLETED with outcome
	// CONVERGED_PENDING_HUMAN (HUMAN_VERIFY criteria wait for a person), oldest first (create time,
	// then id), at most limit; the leader's driver moves them on once the person decided.
	AwaitingSignOff(ctx context.Context, limit int) ([]*schedulerv1.Execution, error)
	// ReadLog returns an execution's log entries matching q in seq order, whether more match
	// beyond the page (for a Tail read: before it), and the execution's last seq (any entry). The
	// entries and lastSeq come from one snapshot: when hasMore is false, every matching entry with
	// a seq up to lastSeq was returned, so a filtered reader may resume after lastSeq.
	// ErrNotFound when the execution does not exist.
	ReadLog(ctx context.Context, q LogQuery) (entries []*commonv1.LogEntry, hasMore bool, lastSeq int64, err error)
	// TryLead tries to become the one holder of the named leadership (the lease reaper and the
	// verification driver run only on the holder). It returns held=false at once when another
	// process holds it. A held leadership lasts until release is called (at most once takes
	// effect) or the process (its database session) ends. Postgres: a session-level advisory lock
	// on a connection taken out of the pool for as long as it is held. SQLite is one process: held
	// is true unless a store of the same database file in this process already holds it.
	TryLead(ctx context.Context, name string) (held bool, release func(), err error)
}

// ExecTx changes one execution inside [Executions.UpdateExecution]'s transaction. Every method
// concerns that execution only: an assignment, wave or checkpoint of another execution is
// ErrNotFound.
type ExecTx interface {
	// Now is the store's clock at the start of the transaction (Postgres now(); SQLite the
	// process's clock, to the millisecond); lease deadlines and times come from it, never from an
	// agent's clock.
	Now() time.Time
	// Execution returns a copy of the execution as read under the lock, with what PutExecution
	// and Append changed since (LastSeq included). Changes to the copy are stored by PutExecution.
	Execution() *schedulerv1.Execution
	// PutExecution stores e (same id), update time = Now. The id, task list, run number, request
	// id, create time and LastSeq are the store's: e's are ignored. Counters (RunningTasks, ...)
	// are stored as given.
	PutExecution(e *schedulerv1.Execution) error
	// Waves returns the execution's waves in wave order, without their placements (fixed when
	// the execution is created; GetExecution has them): a claim or a completion must not decode
	// every task of a wave.
	Waves() ([]*schedulerv1.Wave, error)
	// Wave returns wave n of the execution, without its placements; ErrNotFound when there is no
	// such wave.
	Wave(n int32) (*schedulerv1.Wave, error)
	// PutWave stores w, an existing wave of the execution (found by w.Id; its number is fixed):
	// its status, counters, commits and times. Its placements are fixed at creation and kept.
	PutWave(w *schedulerv1.Wave) error
	// Assignment returns one assignment of the execution; ErrNotFound otherwise.
	Assignment(id string) (*Assignment, error)
	// Assignments returns the execution's assignments matching q (Page fields ignored: all of
	// them), ordered as ListAssignments.
	Assignments(q ListAssignmentsQuery) ([]*Assignment, error)
	// NextPending returns the PENDING assignment of wave waveNumber to lease next (integration
	// first, then the lowest position), or nil when there is none; kinds empty = any kind.
	NextPending(waveNumber int32, kinds []schedulerv1.AssignmentKind) (*Assignment, error)
	// NextEager returns up to limit PENDING task assignments of waves after currentWave whose
	// ReadyWave is set and at most currentWave and whose UnmetDeps is 0, in claim order
	// (position, then wave), for an eager claim to choose from; none when there are none.
	NextEager(currentWave int32, limit int) ([]*Assignment, error)
	// SatisfyDependencies lowers the UnmetDeps of the execution's task assignments of the tasks
	// taskIDs by one per occurrence (a task named twice: by two), never below 0; a task with no
	// assignment (or none with unmet dependencies) is ignored. O(len(taskIDs)) indexed updates.
	SatisfyDependencies(taskIDs []string) error
	// InsertAssignment stores a new assignment of the execution (e.g. a wave's integration). Its
	// wave is a.WaveId, or a.WaveNumber when WaveId is empty (ErrNotFound when the execution has
	// no such wave); it sets a's ExecutionId, WaveId and WaveNumber. ErrAlreadyExists when the
	// wave already has an assignment for that task (or an integration), or the id is taken.
	InsertAssignment(a *Assignment) error
	// PutAssignment stores a, an existing assignment of the execution (found by a.Id; its kind,
	// wave and task are fixed).
	PutAssignment(a *Assignment) error
	// Append adds entries to the execution's log: it sets each entry's Seq (last seq + 1, ...),
	// ExecutionId and Time (Now), and advances the execution's last seq.
	Append(entries ...*commonv1.LogEntry) error
	// PutCheckpoint stores a checkpoint of the execution (Id set by the caller; it sets c's
	// ExecutionId and CreateTime = Now), taken for attempt of assignment assignmentID ("" for
	// none). ErrNotFound when the assignment is not the execution's; ErrAlreadyExists when the id
	// is taken.
	PutCheckpoint(c *commonv1.Checkpoint, assignmentID string, attempt int32) error
	// SetTaskStatus sets the status of the task taskID of the execution's task list (the list's
	// record of what is done, read by GetTaskList and by later executions). ErrNotFound when the
	// list has no such task.
	SetTaskStatus(taskID string, status commonv1.TaskStatus) error
	// CommitAsync lets the transaction's commit return before it is durable: a crash of the
	// store's server may then lose the whole transaction (as if it never ran), and any later
	// durable commit makes it durable too (it comes after it in the store's log). Only for an
	// event the run may lose: never for a grant, a completion, a lock, a fence or a lease that
	// would otherwise run out (the Scheduler calls it for ReportProgress's TASK_STARTED report
	// only). Postgres: SET LOCAL synchronous_commit = off; SQLite: ignored (every commit is
	// durable).
	CommitAsync()
	// Savepoint runs fn as a part of the transaction that can fail on its own: when fn returns
	// an error, every change fn made through this ExecTx (rows, log entries, the execution as
	// Execution returns it) is undone, the transaction goes on as it was before fn, and
	// Savepoint returns fn's error unchanged. When fn succeeds its changes stay, to be committed
	// with the rest. The Scheduler's group commit runs several requests of one execution in one
	// transaction this way (Postgres: SAVEPOINT, ROLLBACK TO SAVEPOINT; SQLite: the same). A
	// failure that leaves the transaction unusable (a lost connection) fails the commit. Not
	// nested; fn uses this ExecTx.
	Savepoint(fn func() error) error
	// EnqueueConfirmation stores c (of this execution: its ExecutionID is set) in the
	// confirmation outbox, due at once (NextAttempt = CreateTime = Now, Attempts 0); committed
	// with the transaction or not at all. A second confirmation of the same assignment is
	// ignored.
	EnqueueConfirmation(c *Confirmation) error
}

// Assignment is a stored assignment: the proto plus what the engine keeps beside it.
type Assignment struct {
	// Assignment is the assignment as the RPCs show it.
	*schedulerv1.Assignment
	// Position orders the task assignments for claiming, lowest first: within a wave
	// (NextPending) and among the later waves' ready tasks (NextEager). Since issue 17 it is the
	// task's rank in the run's claim order (plan.ClaimPositions: priority, then the critical path);
	// runs created before are ranked within each wave by list order. Integrations have -1.
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
	// SessionID is the session (boot id) of the agent process the assignment was leased to
	// (ClaimTaskRequest.session_id); "" when it sent none.
	SessionID string
	// ReadyWave (eager dispatch, task assignments only): once the execution's current wave is at
	// least ReadyWave, the task may be leased before its own wave opens (NextEager); 0 = it waits
	// for its wave. Fixed when the assignment is stored; it must be below the assignment's wave.
	// With UnmetDeps (set when the assignment is stored) it is the file-conflict part only.
	ReadyWave int32
	// UnmetDeps (eager dispatch, task assignments only): how many of the tasks it depends on are
	// not yet satisfied (completed without a commit, or integrated with their wave); an eager
	// lease needs 0. Written by InsertAssignment/CreateExecution and SatisfyDependencies only
	// (PutAssignment keeps it).
	UnmetDeps int32
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
