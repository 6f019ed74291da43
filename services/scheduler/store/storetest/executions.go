package storetest

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// Short names of the enum values the cases use.
const (
	exPending   = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING
	exRunning   = schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	exPaused    = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED
	exCompleted = schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
	exFailed    = schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED

	wvPending     = schedulerv1.WaveStatus_WAVE_STATUS_PENDING
	wvRunning     = schedulerv1.WaveStatus_WAVE_STATUS_RUNNING
	wvIntegrating = schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING

	kindTask        = schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK
	kindIntegration = schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION

	asPending   = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
	asAssigned  = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED
	asRunning   = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING
	asCompleted = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED
	asFailed    = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED

	evInfo        = commonv1.EventType_EVENT_TYPE_INFO
	evTaskStarted = commonv1.EventType_EVENT_TYPE_TASK_STARTED
	evTaskFailed  = commonv1.EventType_EVENT_TYPE_TASK_FAILED
	evError       = commonv1.EventType_EVENT_TYPE_ERROR
)

// at is a time the way stores keep them (milliseconds), minutes after a fixed instant.
func at(minutes int) *timestamppb.Timestamp {
	return timestamppb.New(time.Date(2026, 1, 16, 10, 0, 0, 123_000_000, time.UTC).Add(time.Duration(minutes) * time.Minute))
}

// newList stores a task list id with tasks t0, t1, ... (listOf).
func newList(t *testing.T, s store.Store, id string, tasks int) {
	t.Helper()
	_, err := s.CreateTaskList(t.Context(), id, listOf(id, tasks), nil)
	require.NoError(t, err)
}

// run is an execution to create: the execution, its waves, assignments and first entries.
type run struct {
	e       *schedulerv1.Execution
	waves   []*schedulerv1.Wave
	as      []*store.Assignment
	entries []*commonv1.LogEntry
}

// newRun is execution id of list with one wave per element of waves, holding those tasks (by
// key) in that order, each a PENDING task assignment "<id>/<task>" at its index; the first wave
// is RUNNING, the others PENDING; the execution is RUNNING with one "started" entry.
func newRun(id, list string, waves ...[]string) run {
	r := run{e: &schedulerv1.Execution{Id: id, TaskListId: list, Status: exRunning, WaveCount: int32(len(waves)), CurrentWave: 1}}
	for i, tasks := range waves {
		status := wvPending
		if i == 0 {
			status = wvRunning
		}
		w := &schedulerv1.Wave{Id: fmt.Sprintf("%s/w%d", id, i+1), WaveNumber: int32(i + 1), Status: status, TaskCount: int32(len(tasks))}
		r.waves = append(r.waves, w)
		for j, task := range tasks {
			r.as = append(r.as, &store.Assignment{
				Assignment: &schedulerv1.Assignment{Id: id + "/" + task, Kind: kindTask, WaveId: w.Id, WaveNumber: w.WaveNumber,
					TaskId: task, Status: asPending, Attempt: 1},
				Position: int32(j),
			})
		}
		r.e.TotalTasks += int32(len(tasks))
	}
	r.entries = []*commonv1.LogEntry{{EventType: commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED, Message: "started"}}
	return r
}

func (r run) create(t *testing.T, s store.Store) run {
	t.Helper()
	require.NoError(t, s.CreateExecution(t.Context(), r.e, r.waves, r.as, r.entries))
	return r
}

// update runs fn in UpdateExecution and fails the test on an error.
func update(t *testing.T, s store.Store, id string, fn func(tx store.ExecTx) error) {
	t.Helper()
	require.NoError(t, s.UpdateExecution(t.Context(), id, fn))
}

// readAll reads an execution's whole log.
func readAll(t *testing.T, s store.Store, id string) ([]*commonv1.LogEntry, int64) {
	t.Helper()
	entries, more, last, err := s.ReadLog(t.Context(), store.LogQuery{ExecutionID: id, Limit: 100_000})
	require.NoError(t, err)
	require.False(t, more)
	return entries, last
}

func seqs(entries []*commonv1.LogEntry) []int64 {
	var out []int64
	for _, e := range entries {
		out = append(out, e.GetSeq())
	}
	return out
}

func ids[M interface{ GetId() string }](ms []M) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetId()
	}
	return out
}

func requireProtos[M proto.Message](t *testing.T, want, got []M) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.True(t, proto.Equal(want[i], got[i]), "#%d:\n got %v\nwant %v", i, got[i], want[i])
	}
}

func requireAssignments(t *testing.T, want, got []*store.Assignment) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := *want[i], *got[i]
		require.True(t, proto.Equal(w.Assignment, g.Assignment), "#%d:\n got %v\nwant %v", i, g.Assignment, w.Assignment)
		requireProtos(t, w.PreviousErrors, g.PreviousErrors)
		requireProtos(t, w.Merges, g.Merges)
		w.Assignment, g.Assignment, w.PreviousErrors, g.PreviousErrors, w.Merges, g.Merges = nil, nil, nil, nil, nil, nil
		require.Equal(t, w, g)
	}
}

// richRun is an execution with every field set, a retry of previous (which must exist) in a
// feature build, with two waves, a task and an integration assignment with every field set, and
// two log entries, one with a context.
func richRun(id, list, previous string) run {
	e := &schedulerv1.Execution{
		Id: id, TaskListId: list, TriggeredBy: schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_RETRY,
		Status: exFailed, Outcome: commonv1.Outcome_OUTCOME_ESCALATED,
		Options: &schedulerv1.ExecutionOptions{
			MaxParallel: 2, MaxRetries: proto.Int32(0), TaskTimeout: durationpb.New(90 * time.Second),
			MaxTotalAttempts: 9, MaxWallTime: durationpb.New(2 * time.Hour), CriticalPhases: &schedulerv1.CriticalPhases{},
			MaxFailedTasks: proto.Int32(1), RequiredCapabilities: []string{"lang:go"}, KnowledgeMinConfidence: proto.Float64(0.75),
			Executor: &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{EnvPassthrough: []string{"GOFLAGS"}}}},
		},
		TotalTasks: 3, CompletedTasks: 1, FailedTasks: 1, SkippedTasks: 1, RunningTasks: 0,
		Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: "https://example.com/r.git"}, BaseRef: "main"},
		BaseCommit: "0123abcd", RunBranch: "converge/" + id, CurrentWave: 2, WaveCount: 2, TotalAttempts: 7,
		ValidationResults: []*schedulerv1.ValidationLevelResult{
			{Level: schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, Ran: true, Passed: true, Duration: durationpb.New(3 * time.Second), OutputTail: "ok"},
			{Level: schedulerv1.ValidationLevel_VALIDATION_LEVEL_API, Ran: true, ExitCode: -1, Message: "timed out"},
		},
		Verification: &schedulerv1.VerifySummary{ReportId: "vr1", Verdict: commonv1.Verdict_VERDICT_FAILED, PassCount: 2, FailCount: 1,
			FailedCriteria: []string{"F3"}, FailureSignature: "sig", VerifyTime: at(30)},
		StatusMessage: "stuck agent", EscalatedTaskId: "t1", EscalatedInstanceId: "agent-2",
		PreviousExecutionId: previous, FeatureBuildId: "fb-1", RequestId: "req-" + id,
		StartTime: at(1), EndTime: at(31),
	}
	waves := []*schedulerv1.Wave{
		{Id: id + "/w1", WaveNumber: 1, Status: schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED, TaskCount: 2, CompletedCount: 1, FailedCount: 1,
			BaseCommit: "0123abcd", IntegrationCommit: "4567ef", StartTime: at(1), EndTime: at(10),
			Placements: []*schedulerv1.WavePlacement{
				{TaskId: "t0", Reason: schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL, Message: "level 0"},
				{TaskId: "t1", Reason: schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, DependencyLevel: 1,
					ConflictingTaskIds: []string{"t0"}, ConflictingPaths: []string{"f0.go"}},
			}},
		{Id: id + "/w2", WaveNumber: 2, Status: wvIntegrating, TaskCount: 1, SkippedCount: 1, ActiveAgents: 1, BaseCommit: "4567ef", StartTime: at(11)},
	}
	as := []*store.Assignment{
		{
			Assignment: &schedulerv1.Assignment{Id: id + "/t1", Kind: kindTask, WaveId: id + "/w1", WaveNumber: 1, TaskId: "t1",
				Status: asFailed, InstanceId: "agent-2", Attempt: 3, FencingToken: 12, LeaseExpireTime: at(9), AssignTime: at(8),
				CompleteTime: at(9), ProgressPercent: 80, ProgressMessage: "testing", LastReportTime: at(9),
				Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, CommitSha: "89ab", TaskRef: "refs/converge/" + id + "/t1",
				Error: &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "2 tests failed", TaskId: "t1", StackTrace: "...", Timestamp: at(9)},
				Tries: 2, DiscoveriesCount: 1, FilesChanged: []string{"f1.go"}, ValidationOutputTail: "FAIL"},
			Position: 1, LastReportSeq: 4,
			PreviousErrors: []*commonv1.ErrorContext{{Code: "TIMEOUT", Message: "lease expired"}, {Code: "LOCK_LOST"}},
		},
		{
			Assignment: &schedulerv1.Assignment{Id: id + "/i2", Kind: kindIntegration, WaveId: id + "/w2", WaveNumber: 2,
				Status: asRunning, InstanceId: "agent-1", Attempt: 1, FencingToken: 13, LeaseExpireTime: at(40), AssignTime: at(12)},
			Position: -1, FinalIntegration: true,
			Merges: []*schedulerv1.IntegrationInput{{TaskId: "t0", Title: "task", CommitSha: "aa", TaskRef: "refs/converge/" + id + "/t0"}},
		},
	}
	ctx, _ := structpb.NewStruct(map[string]any{"attempt": 3.0, "error": map[string]any{"code": "TIMEOUT"}, "ok": false, "files": []any{"a", "b"}})
	entries := []*commonv1.LogEntry{
		{EventType: commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED, Message: "started"},
		{EventType: evTaskFailed, Message: "t1 failed", TaskId: "t1", InstanceId: "agent-2", WaveNumber: 1, Context: ctx},
		{EventType: evInfo, Message: "empty context", Context: &structpb.Struct{}},
	}
	return run{e: e, waves: waves, as: as, entries: entries}
}

// runExecutions is the execution part of the suite.
func runExecutions(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("CreateAndGet", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 3)
		first := newRun("ex-1", "tl", []string{"t0"}).create(t, s)
		r := richRun("ex-2", "tl", first.e.Id)
		before := time.Now()
		require.NoError(t, s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries))

		// What the store set.
		require.EqualValues(t, 2, r.e.RunNumber)
		require.EqualValues(t, 3, r.e.LastSeq)
		require.NotNil(t, r.e.CreateTime)
		require.True(t, proto.Equal(r.e.CreateTime, r.e.UpdateTime))
		require.WithinDuration(t, before, r.e.CreateTime.AsTime(), time.Minute)
		require.Equal(t, []int64{1, 2, 3}, seqs(r.entries))
		for _, e := range r.entries {
			require.Equal(t, "ex-2", e.ExecutionId)
			require.True(t, proto.Equal(r.e.CreateTime, e.Time), "entry time %v, create time %v", e.Time, r.e.CreateTime)
		}
		for _, w := range r.waves {
			require.Equal(t, "ex-2", w.ExecutionId)
		}
		for _, a := range r.as {
			require.Equal(t, "ex-2", a.ExecutionId)
		}

		// Everything reads back as given.
		e, waves, err := s.GetExecution(ctx, "ex-2")
		require.NoError(t, err)
		require.True(t, proto.Equal(r.e, e), "execution:\n got %v\nwant %v", e, r.e)
		requireProtos(t, r.waves, waves)
		as, next, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex-2", PageSize: 10})
		require.NoError(t, err)
		require.Zero(t, next)
		requireAssignments(t, r.as, as)
		entries, last := readAll(t, s, "ex-2")
		require.EqualValues(t, 3, last)
		requireProtos(t, r.entries, entries)

		// A run given without trigger or outcome reads back with the defaults.
		e, waves, err = s.GetExecution(ctx, "ex-1")
		require.NoError(t, err)
		require.EqualValues(t, 1, e.RunNumber)
		require.Equal(t, schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_USER, e.TriggeredBy)
		require.Equal(t, commonv1.Outcome_OUTCOME_UNSPECIFIED, e.Outcome)
		require.Len(t, waves, 1)

		id, err := s.AssignmentExecution(ctx, "ex-2/i2")
		require.NoError(t, err)
		require.Equal(t, "ex-2", id)

		// The list counts its runs.
		tl, err := s.GetTaskList(ctx, "tl", store.ViewBasic)
		require.NoError(t, err)
		require.EqualValues(t, 2, tl.RunCount)
		require.Equal(t, "ex-2", tl.LatestExecutionID)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 1)
		newRun("ex", "tl", []string{"t0"}).create(t, s)

		r := newRun("ex-x", "nope", []string{"t0"})
		require.ErrorIs(t, s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries), store.ErrNotFound)
		_, _, err := s.GetExecution(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.AssignmentExecution(ctx, "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.ExecutionIDByRequest(ctx, "tl", "nope")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, _, _, err = s.ReadLog(ctx, store.LogQuery{ExecutionID: "nope", Limit: 10})
		require.ErrorIs(t, err, store.ErrNotFound)
		called := false
		err = s.UpdateExecution(ctx, "nope", func(store.ExecTx) error { called = true; return nil })
		require.ErrorIs(t, err, store.ErrNotFound)
		require.False(t, called)

		// Inside a transaction, another execution's rows and unknown rows are not found.
		other := newRun("ex-2", "tl", []string{"t0"}).create(t, s)
		update(t, s, "ex", func(tx store.ExecTx) error {
			_, err := tx.Assignment(other.as[0].Id)
			require.ErrorIs(t, err, store.ErrNotFound)
			require.ErrorIs(t, tx.PutAssignment(other.as[0]), store.ErrNotFound)
			require.ErrorIs(t, tx.PutWave(other.waves[0]), store.ErrNotFound)
			require.ErrorIs(t, tx.SetTaskStatus("nope", commonv1.TaskStatus_TASK_STATUS_COMPLETED), store.ErrNotFound)
			require.ErrorIs(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, other.as[0].Id, 1), store.ErrNotFound)
			require.ErrorIs(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ai",
				Kind: kindIntegration, WaveId: other.waves[0].Id}, Position: -1}), store.ErrNotFound)
			// ErrNotFound leaves the transaction usable.
			return tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "still fine"})
		})
		_, last := readAll(t, s, "ex")
		require.EqualValues(t, 2, last)
	})

	t.Run("RunNumbers", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "a", 1)
		newList(t, s, "b", 1)
		for i := 1; i <= 3; i++ {
			r := newRun(fmt.Sprintf("a-%d", i), "a", []string{"t0"}).create(t, s)
			require.EqualValues(t, i, r.e.RunNumber)
		}
		r := newRun("b-1", "b", []string{"t0"}).create(t, s)
		require.EqualValues(t, 1, r.e.RunNumber)

		// Concurrent starts of one list take distinct numbers.
		newList(t, s, "c", 1)
		const n = 8
		numbers := make([]int32, n)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				r := newRun(fmt.Sprintf("c-%d", i), "c", []string{"t0"})
				errs[i] = s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries)
				numbers[i] = r.e.RunNumber
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		slices.Sort(numbers)
		require.Equal(t, []int32{1, 2, 3, 4, 5, 6, 7, 8}, numbers)
		tl, err := s.GetTaskList(ctx, "c", store.ViewBasic)
		require.NoError(t, err)
		require.EqualValues(t, n, tl.RunCount)
	})

	t.Run("RequestID", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "a", 1)
		newList(t, s, "b", 1)
		r := newRun("ex-1", "a", []string{"t0"})
		r.e.RequestId = "req"
		r.create(t, s)

		again := newRun("ex-2", "a", []string{"t0"})
		again.e.RequestId = "req"
		require.ErrorIs(t, s.CreateExecution(ctx, again.e, again.waves, again.as, again.entries), store.ErrAlreadyExists)
		_, _, err := s.GetExecution(ctx, "ex-2")
		require.ErrorIs(t, err, store.ErrNotFound, "nothing of the duplicate is stored")
		_, err = s.AssignmentExecution(ctx, "ex-2/t0")
		require.ErrorIs(t, err, store.ErrNotFound)
		id, err := s.ExecutionIDByRequest(ctx, "a", "req")
		require.NoError(t, err)
		require.Equal(t, "ex-1", id)

		// Another list may use the same request id; a duplicate execution id is refused.
		other := newRun("ex-3", "b", []string{"t0"})
		other.e.RequestId = "req"
		other.create(t, s)
		dup := newRun("ex-1", "b", []string{"t0"})
		require.ErrorIs(t, s.CreateExecution(ctx, dup.e, dup.waves, dup.as, dup.entries), store.ErrAlreadyExists)
		tl, err := s.GetTaskList(ctx, "a", store.ViewBasic)
		require.NoError(t, err)
		require.EqualValues(t, 1, tl.RunCount)
	})

	t.Run("UpdateCommits", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 2)
		r := newRun("ex", "tl", []string{"t0", "t1"}, []string{"t2"})
		r.e.RequestId = "req"
		r.create(t, s)

		var txNow time.Time
		var leaked store.ExecTx
		update(t, s, "ex", func(tx store.ExecTx) error {
			leaked = tx
			txNow = tx.Now()
			e := tx.Execution()
			require.EqualValues(t, 1, e.LastSeq)
			require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "one"}, &commonv1.LogEntry{EventType: evInfo, Message: "two"}))
			require.EqualValues(t, 3, tx.Execution().LastSeq, "Execution sees the appends")
			require.EqualValues(t, 1, e.LastSeq, "Execution returns a copy")

			// The store's fields are kept whatever the put says.
			e.Status, e.CompletedTasks, e.RunningTasks, e.StatusMessage = exPaused, 1, 1, "paused by test"
			e.LastSeq, e.RunNumber, e.RequestId, e.TaskListId, e.CreateTime = 99, 42, "other", "other", at(0)
			require.NoError(t, tx.PutExecution(e))
			got := tx.Execution()
			require.Equal(t, exPaused, got.Status)
			require.EqualValues(t, 3, got.LastSeq)
			require.EqualValues(t, 1, got.RunNumber)
			require.True(t, got.UpdateTime.AsTime().Equal(tx.Now()))

			waves, err := tx.Waves()
			require.NoError(t, err)
			require.Len(t, waves, 2)
			waves[1].Status, waves[1].BaseCommit, waves[1].ActiveAgents = wvRunning, "abc", 2
			require.NoError(t, tx.PutWave(waves[1]))

			a, err := tx.Assignment("ex/t1")
			require.NoError(t, err)
			a.Status, a.InstanceId, a.FencingToken, a.LeaseExpireTime = asRunning, "agent-1", 5, timestamppb.New(tx.Now().Add(time.Minute))
			a.ProgressPercent, a.LastReportSeq = 50, 2
			a.PreviousErrors = []*commonv1.ErrorContext{{Code: "X"}}
			require.NoError(t, tx.PutAssignment(a))
			require.NoError(t, tx.SetTaskStatus("t1", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))
			require.NoError(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck-1", TaskId: "t1", InstanceId: "agent-1", GitRef: "abc",
				Files: []*commonv1.FileHash{{Path: "a.go"}}, Metadata: map[string]string{"reason": "attempt"}}, "ex/t1", 1))
			require.ErrorIs(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck-1", GitRef: "abc"}, "", 1), store.ErrAlreadyExists)
			return nil
		})
		require.ErrorIs(t, leaked.PutExecution(leaked.Execution()), store.ErrTxDone)
		require.ErrorIs(t, leaked.Append(&commonv1.LogEntry{EventType: evInfo, Message: "late"}), store.ErrTxDone)
		_, err := leaked.Waves()
		require.ErrorIs(t, err, store.ErrTxDone)

		e, waves, err := s.GetExecution(ctx, "ex")
		require.NoError(t, err)
		require.Equal(t, exPaused, e.Status)
		require.Equal(t, "paused by test", e.StatusMessage)
		require.EqualValues(t, 1, e.RunningTasks)
		require.EqualValues(t, 3, e.LastSeq)
		require.EqualValues(t, 1, e.RunNumber)
		require.Equal(t, "req", e.RequestId)
		require.Equal(t, "tl", e.TaskListId)
		require.True(t, proto.Equal(r.e.CreateTime, e.CreateTime))
		require.True(t, e.UpdateTime.AsTime().Equal(txNow), "update time %v, tx now %v", e.UpdateTime.AsTime(), txNow)
		require.Equal(t, wvRunning, waves[1].Status)
		require.EqualValues(t, 2, waves[1].ActiveAgents)
		require.Equal(t, "abc", waves[1].BaseCommit)
		as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", TaskID: "t1", PageSize: 5})
		require.NoError(t, err)
		require.Len(t, as, 1)
		require.Equal(t, asRunning, as[0].Status)
		require.EqualValues(t, 50, as[0].ProgressPercent)
		require.EqualValues(t, 2, as[0].LastReportSeq)
		require.Len(t, as[0].PreviousErrors, 1)
		tl, err := s.GetTaskList(ctx, "tl", store.ViewFull)
		require.NoError(t, err)
		require.Equal(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tl.Spec.Tasks[1].Status)
		require.Equal(t, commonv1.TaskStatus_TASK_STATUS_PENDING, tl.Spec.Tasks[0].Status)
		entries, last := readAll(t, s, "ex")
		require.EqualValues(t, 3, last)
		require.Equal(t, []int64{1, 2, 3}, seqs(entries))
		require.True(t, entries[2].Time.AsTime().Equal(txNow))
		if sq, ok := s.(interface{ DB() *sql.DB }); ok {
			var n int
			require.NoError(t, sq.DB().QueryRowContext(ctx, `SELECT count(*) FROM checkpoints WHERE checkpoint_id = 'ck-1' AND assignment_id = 'ex/t1'`).Scan(&n))
			require.Equal(t, 1, n)
		}
	})

	t.Run("UpdateRollsBack", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 2)
		newRun("ex", "tl", []string{"t0", "t1"}).create(t, s)
		beforeE, beforeW, err := s.GetExecution(ctx, "ex")
		require.NoError(t, err)
		beforeA, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
		require.NoError(t, err)

		err = s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
			e := tx.Execution()
			e.Status = exPaused
			require.NoError(t, tx.PutExecution(e))
			require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "lost"}))
			waves, err := tx.Waves()
			require.NoError(t, err)
			waves[0].Status = wvIntegrating
			require.NoError(t, tx.PutWave(waves[0]))
			a, err := tx.Assignment("ex/t0")
			require.NoError(t, err)
			a.Status = asCompleted
			require.NoError(t, tx.PutAssignment(a))
			require.NoError(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i1",
				Kind: kindIntegration, WaveNumber: 1}, Position: -1}))
			require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_COMPLETED))
			require.NoError(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, "ex/t0", 1))
			return fmt.Errorf("wave moved on: %w", store.ErrConflict)
		})
		require.ErrorIs(t, err, store.ErrConflict)

		e, waves, err := s.GetExecution(ctx, "ex")
		require.NoError(t, err)
		require.True(t, proto.Equal(beforeE, e), "execution:\n got %v\nwant %v", e, beforeE)
		requireProtos(t, beforeW, waves)
		as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
		require.NoError(t, err)
		requireAssignments(t, beforeA, as)
		entries, last := readAll(t, s, "ex")
		require.EqualValues(t, 1, last)
		require.Len(t, entries, 1)
		tl, err := s.GetTaskList(ctx, "tl", store.ViewFull)
		require.NoError(t, err)
		require.Equal(t, commonv1.TaskStatus_TASK_STATUS_PENDING, tl.Spec.Tasks[0].Status)
		// The checkpoint id is free again.
		update(t, s, "ex", func(tx store.ExecTx) error {
			return tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, "", 1)
		})
	})

	t.Run("AppendIsDense", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 1)
		newRun("ex", "tl", []string{"t0"}).create(t, s)
		newRun("other", "tl", []string{"t0"}).create(t, s)
		want := 1
		for i := 1; i <= 3; i++ {
			update(t, s, "ex", func(tx store.ExecTx) error {
				var batch []*commonv1.LogEntry
				for j := range i {
					batch = append(batch, &commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("serial %d.%d", i, j)})
				}
				require.NoError(t, tx.Append(batch...))
				for j, e := range batch {
					require.EqualValues(t, want+j+1, e.Seq)
				}
				return nil
			})
			want += i
		}
		// Concurrent writers, of this execution and of another.
		const writers, rounds = 8, 4
		var wg sync.WaitGroup
		errs := make(chan error, writers*rounds*2)
		for w := range writers {
			wg.Go(func() {
				for r := range rounds {
					id := "ex"
					if w%4 == 3 {
						id = "other"
					}
					errs <- s.UpdateExecution(ctx, id, func(tx store.ExecTx) error {
						return tx.Append(
							&commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("w%d r%d a", w, r), InstanceId: fmt.Sprintf("agent-%d", w)},
							&commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("w%d r%d b", w, r), InstanceId: fmt.Sprintf("agent-%d", w)},
						)
					})
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for id, n := range map[string]int{"ex": want + 6*rounds*2, "other": 1 + 2*rounds*2} {
			entries, last := readAll(t, s, id)
			require.EqualValues(t, n, last, id)
			wantSeqs := make([]int64, n)
			for i := range wantSeqs {
				wantSeqs[i] = int64(i + 1)
			}
			require.Equal(t, wantSeqs, seqs(entries), id)
			// Each transaction's two entries are adjacent: a then b.
			for i, e := range entries {
				if m := e.Message; len(m) > 2 && m[len(m)-2:] == " a" {
					require.Equal(t, m[:len(m)-2]+" b", entries[i+1].Message)
				}
			}
			e, _, err := s.GetExecution(ctx, id)
			require.NoError(t, err)
			require.EqualValues(t, n, e.LastSeq)
		}
	})

	t.Run("NextPending", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		newList(t, s, "tl", 5)
		r := newRun("ex", "tl", []string{"t2", "t0", "t1"}, []string{"t3"})
		// Positions out of id order: t1 first, then t0, then t2.
		r.as[0].Position, r.as[1].Position, r.as[2].Position = 7, 3, 1
		r.create(t, s)
		update(t, s, "ex", func(tx store.ExecTx) error {
			a, err := tx.NextPending(1, nil)
			require.NoError(t, err)
			require.Equal(t, "ex/t1", a.Id)
			require.NoError(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i1",
				Kind: kindIntegration, WaveId: "ex/w1"}, Position: -1}))
			a, err = tx.NextPending(1, nil)
			require.NoError(t, err)
			require.Equal(t, "ex/i1", a.Id, "integration first")
			require.Equal(t, kindIntegration, a.Kind)
			require.EqualValues(t, 1, a.WaveNumber)
			a, err = tx.NextPending(1, []schedulerv1.AssignmentKind{kindTask})
			require.NoError(t, err)
			require.Equal(t, "ex/t1", a.Id)
			a.Status, a.InstanceId, a.LeaseExpireTime = asAssigned, "agent-1", timestamppb.New(tx.Now().Add(time.Minute))
			require.NoError(t, tx.PutAssignment(a))
			a, err = tx.NextPending(1, []schedulerv1.AssignmentKind{kindTask})
			require.NoError(t, err)
			require.Equal(t, "ex/t0", a.Id)
			a, err = tx.NextPending(2, []schedulerv1.AssignmentKind{kindTask, kindIntegration})
			require.NoError(t, err)
			require.Equal(t, "ex/t3", a.Id)
			a, err = tx.NextPending(2, []schedulerv1.AssignmentKind{kindIntegration})
			require.NoError(t, err)
			require.Nil(t, a)
			a, err = tx.NextPending(3, nil)
			require.NoError(t, err)
			require.Nil(t, a)
			return nil
		})
	})

	t.Run("InsertAssignment", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 2)
		newRun("ex", "tl", []string{"t0"}, []string{"t1"}).create(t, s)
		update(t, s, "ex", func(tx store.ExecTx) error {
			integration := &store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i2", Kind: kindIntegration, WaveNumber: 2},
				Position: -1, FinalIntegration: true, Merges: []*schedulerv1.IntegrationInput{{TaskId: "t1", CommitSha: "c1"}}}
			require.NoError(t, tx.InsertAssignment(integration))
			require.Equal(t, "ex", integration.ExecutionId)
			require.Equal(t, "ex/w2", integration.WaveId)
			require.EqualValues(t, 1, integration.Attempt)
			require.Equal(t, asPending, integration.Status)
			// A second integration of the wave, a task twice, an id twice: ErrAlreadyExists, and
			// the transaction goes on.
			err := tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i2b", Kind: kindIntegration, WaveNumber: 2}, Position: -1})
			require.ErrorIs(t, err, store.ErrAlreadyExists)
			err = tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/t1b", Kind: kindTask, TaskId: "t1", WaveId: "ex/w2"}})
			require.ErrorIs(t, err, store.ErrAlreadyExists)
			err = tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/t0", Kind: kindTask, TaskId: "t1", WaveId: "ex/w1"}})
			require.ErrorIs(t, err, store.ErrAlreadyExists)
			err = tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i9", Kind: kindIntegration, WaveNumber: 9}, Position: -1})
			require.ErrorIs(t, err, store.ErrNotFound)
			// The same task in another wave is another assignment.
			require.NoError(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/t1w1", Kind: kindTask, TaskId: "t1", WaveId: "ex/w1"}, Position: 1}))
			return tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "after the refusals"})
		})
		as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t0", "ex/t1w1", "ex/t1", "ex/i2"}, ids(assignmentProtos(as)))
		require.True(t, as[3].FinalIntegration)
		require.Len(t, as[3].Merges, 1)
		id, err := s.AssignmentExecution(ctx, "ex/i2")
		require.NoError(t, err)
		require.Equal(t, "ex", id)
	})

	t.Run("ClaimableExecutions", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 2)
		// Created in this order, so oldest first is a, d.
		newRun("a", "tl", []string{"t0"}).create(t, s) // running, pending task in a running wave
		paused := newRun("b", "tl", []string{"t0"})
		paused.e.Status = exPaused
		paused.create(t, s)
		waiting := newRun("c", "tl", []string{"t0"})
		waiting.waves[0].Status = wvPending
		waiting.create(t, s)
		integrating := newRun("d", "tl", []string{"t0"})
		integrating.waves[0].Status = wvIntegrating
		integrating.as[0].Status = asCompleted
		integrating.create(t, s)
		update(t, s, "d", func(tx store.ExecTx) error {
			return tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "d/i1", Kind: kindIntegration, WaveNumber: 1}, Position: -1})
		})
		busy := newRun("e", "tl", []string{"t0"})
		busy.as[0].Status, busy.as[0].InstanceId, busy.as[0].LeaseExpireTime = asRunning, "agent", at(60)
		busy.create(t, s)
		pendingRun := newRun("f", "tl", []string{"t0"})
		pendingRun.e.Status = exPending
		pendingRun.create(t, s)

		list, err := s.ClaimableExecutions(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "d"}, ids(list))
		list, err = s.ClaimableExecutions(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, ids(list))

		list, err = s.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{exPaused, exPending}, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"b", "f"}, ids(list))
		list, err = s.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{exRunning}, 2)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "c"}, ids(list))
	})

	t.Run("ExpiredLeases", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 5)
		newRun("ex", "tl", []string{"t0", "t1", "t2", "t3", "t4"}).create(t, s)
		update(t, s, "ex", func(tx store.ExecTx) error {
			now := tx.Now()
			for task, lease := range map[string]struct {
				status schedulerv1.AssignmentStatus
				expiry time.Duration
			}{
				"t0": {asAssigned, -time.Second}, // expired second
				"t1": {asRunning, -time.Minute},  // expired first
				"t2": {asRunning, time.Hour},     // live
				"t3": {asCompleted, -time.Hour},  // not held
				"t4": {asAssigned, -time.Second}, // expired, tied with t0 (id order)
			} {
				a, err := tx.Assignment("ex/" + task)
				require.NoError(t, err)
				a.Status, a.InstanceId, a.LeaseExpireTime = lease.status, "agent", timestamppb.New(now.Add(lease.expiry))
				require.NoError(t, tx.PutAssignment(a))
			}
			return nil
		})
		list, err := s.ExpiredLeases(ctx, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t1", "ex/t0", "ex/t4"}, ids(assignmentProtos(list)))
		list, err = s.ExpiredLeases(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t1"}, ids(assignmentProtos(list)))
	})

	// Issue 12: the session an assignment was leased to, the held assignments of agents, and an
	// entry's source time are stored and read back.
	t.Run("SessionsHeldAndSourceTime", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 4)
		newRun("ex", "tl", []string{"t0", "t1", "t2", "t3"}).create(t, s)
		newRun("ex2", "tl", []string{"t0"}).create(t, s)
		src := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
		for _, ex := range []string{"ex", "ex2"} {
			update(t, s, ex, func(tx store.ExecTx) error {
				now := tx.Now()
				holders := map[string]struct {
					status          schedulerv1.AssignmentStatus
					instance, sess  string
					assignedSeconds int
				}{
					"t0": {asAssigned, "agent-1", "boot-1", 2},
					"t1": {asRunning, "agent-2", "", 1},
					"t2": {asCompleted, "agent-1", "boot-1", 0}, // not held
					"t3": {asRunning, "agent-3", "boot-9", 3},
				}
				for task, h := range holders {
					a, err := tx.Assignment(ex + "/" + task)
					if errors.Is(err, store.ErrNotFound) {
						continue
					}
					require.NoError(t, err)
					a.Status, a.InstanceId, a.SessionID = h.status, h.instance, h.sess
					a.LeaseExpireTime = timestamppb.New(now.Add(time.Hour))
					a.AssignTime = timestamppb.New(now.Add(time.Duration(h.assignedSeconds) * time.Second))
					if ex == "ex2" {
						a.AssignTime = timestamppb.New(now.Add(time.Minute))
					}
					require.NoError(t, tx.PutAssignment(a))
				}
				return tx.Append(&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t0", InstanceId: "agent-1", WaveNumber: 1,
					Message: "started at the source", SourceTime: timestamppb.New(src)})
			})
		}
		list, err := s.HeldAssignments(ctx, []string{"agent-1", "agent-2"}, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t1", "ex/t0", "ex2/t0"}, ids(assignmentProtos(list)), "held only, oldest lease first")
		require.Equal(t, "", list[0].SessionID)
		require.Equal(t, "boot-1", list[1].SessionID)
		list, err = s.HeldAssignments(ctx, []string{"agent-1", "agent-2"}, 1)
		require.NoError(t, err)
		require.Len(t, list, 1)
		list, err = s.HeldAssignments(ctx, nil, 10)
		require.NoError(t, err)
		require.Empty(t, list)

		update(t, s, "ex", func(tx store.ExecTx) error {
			a, err := tx.Assignment("ex/t3")
			require.NoError(t, err)
			require.Equal(t, "boot-9", a.SessionID)
			a.SessionID = ""
			return tx.PutAssignment(a)
		})
		all, err := s.HeldAssignments(ctx, []string{"agent-3"}, 10)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Empty(t, all[0].SessionID, "a session is cleared")

		entries, _, _, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex", EventTypes: []commonv1.EventType{evTaskStarted}, Limit: 10})
		require.NoError(t, err)
		require.Len(t, entries, 1)
		require.True(t, entries[0].GetSourceTime().AsTime().Equal(src), "source time %v", entries[0].GetSourceTime().AsTime())
		require.False(t, entries[0].GetTime().AsTime().Equal(src), "the entry's time is the store's")
		first, _, _, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex", Limit: 1})
		require.NoError(t, err)
		require.Nil(t, first[0].GetSourceTime(), "no source time: unset")
	})

	t.Run("ReadLog", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 2)
		newRun("ex", "tl", []string{"t0", "t1"}).create(t, s) // seq 1: execution started
		newRun("empty", "tl", []string{"t0"}).create(t, s)
		update(t, s, "ex", func(tx store.ExecTx) error {
			return tx.Append(
				&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t0", InstanceId: "agent-1", WaveNumber: 1, Message: "2"},
				&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t1", InstanceId: "agent-2", WaveNumber: 1, Message: "3"},
				&commonv1.LogEntry{EventType: evTaskFailed, TaskId: "t0", InstanceId: "agent-1", WaveNumber: 1, Message: "4"},
				&commonv1.LogEntry{EventType: evError, Message: "5"},
				&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t0", InstanceId: "agent-2", WaveNumber: 1, Message: "6"},
				&commonv1.LogEntry{EventType: evInfo, TaskId: "t1", Message: "7"},
			)
		})
		read := func(q store.LogQuery) ([]int64, bool, int64) {
			t.Helper()
			q.ExecutionID = "ex"
			entries, more, last, err := s.ReadLog(ctx, q)
			require.NoError(t, err)
			return seqs(entries), more, last
		}
		check := func(q store.LogQuery, want []int64, wantMore bool) {
			t.Helper()
			got, more, last := read(q)
			require.Equal(t, want, got, "%+v", q)
			require.Equal(t, wantMore, more, "hasMore of %+v", q)
			require.EqualValues(t, 7, last, "lastSeq is the whole log's")
		}
		check(store.LogQuery{Limit: 100}, []int64{1, 2, 3, 4, 5, 6, 7}, false)
		check(store.LogQuery{Limit: 3}, []int64{1, 2, 3}, true)
		check(store.LogQuery{Limit: 3, AfterSeq: 3}, []int64{4, 5, 6}, true)
		check(store.LogQuery{Limit: 3, AfterSeq: 4}, []int64{5, 6, 7}, false)
		check(store.LogQuery{Limit: 3, AfterSeq: 7}, nil, false)
		check(store.LogQuery{Limit: 3, Tail: true}, []int64{5, 6, 7}, true)
		check(store.LogQuery{Limit: 7, Tail: true}, []int64{1, 2, 3, 4, 5, 6, 7}, false)
		check(store.LogQuery{Limit: 2, Tail: true, AfterSeq: 4}, []int64{6, 7}, true)
		check(store.LogQuery{Limit: 100, TaskID: "t0"}, []int64{2, 4, 6}, false)
		check(store.LogQuery{Limit: 100, InstanceID: "agent-2"}, []int64{3, 6}, false)
		check(store.LogQuery{Limit: 100, TaskID: "t0", InstanceID: "agent-1"}, []int64{2, 4}, false)
		check(store.LogQuery{Limit: 100, EventTypes: []commonv1.EventType{evTaskFailed, evError}}, []int64{4, 5}, false)
		check(store.LogQuery{Limit: 1, Tail: true, EventTypes: []commonv1.EventType{evTaskStarted}}, []int64{6}, true)
		check(store.LogQuery{Limit: 100, TaskID: "t9"}, nil, false)

		entries, more, last, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "empty", Limit: 5, AfterSeq: 1})
		require.NoError(t, err)
		require.Empty(t, entries)
		require.False(t, more)
		require.EqualValues(t, 1, last)
	})

	t.Run("ListExecutions", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "a", 1)
		newList(t, s, "b", 1)
		var all []*schedulerv1.Execution
		for i, list := range []string{"a", "b", "a", "a", "b"} {
			r := newRun(fmt.Sprintf("ex-%d", i), list, []string{"t0"})
			if i == 2 {
				r.e.Status = exPaused
			}
			if i == 3 {
				r.e.Status, r.e.Outcome = exCompleted, commonv1.Outcome_OUTCOME_CONVERGED
				r.e.FeatureBuildId = "fb-1"
			}
			all = append(all, r.create(t, s).e)
		}
		newest := slices.Clone(all)
		sort.Slice(newest, func(i, j int) bool {
			ti, tj := newest[i].CreateTime.AsTime(), newest[j].CreateTime.AsTime()
			if !ti.Equal(tj) {
				return ti.After(tj)
			}
			return newest[i].Id > newest[j].Id
		})
		pages := func(q store.ListExecutionsQuery) []string {
			t.Helper()
			var got []string
			for range 10 {
				page, next, err := s.ListExecutions(ctx, q)
				require.NoError(t, err)
				require.LessOrEqual(t, len(page), q.PageSize)
				got = append(got, ids(page)...)
				if next == nil {
					return got
				}
				q.After = next
			}
			t.Fatal("too many pages")
			return nil
		}
		require.Equal(t, ids(newest), pages(store.ListExecutionsQuery{PageSize: 2}))
		require.Equal(t, ids(newest), pages(store.ListExecutionsQuery{PageSize: 5}))
		var ofA []string
		for _, e := range newest {
			if e.TaskListId == "a" {
				ofA = append(ofA, e.Id)
			}
		}
		require.Equal(t, ofA, pages(store.ListExecutionsQuery{PageSize: 1, TaskListID: "a"}))
		require.ElementsMatch(t, []string{"ex-2", "ex-3"}, pages(store.ListExecutionsQuery{PageSize: 10,
			Statuses: []schedulerv1.ExecutionStatus{exPaused, exCompleted}}))
		require.Equal(t, []string{"ex-3"}, pages(store.ListExecutionsQuery{PageSize: 10, FeatureBuildID: "fb-1"}))
		require.Empty(t, pages(store.ListExecutionsQuery{PageSize: 10, TaskListID: "b", FeatureBuildID: "fb-1"}))

		// A page read back is what GetExecution reads.
		page, _, err := s.ListExecutions(ctx, store.ListExecutionsQuery{PageSize: 1, TaskListID: "b"})
		require.NoError(t, err)
		e, _, err := s.GetExecution(ctx, page[0].Id)
		require.NoError(t, err)
		require.True(t, proto.Equal(e, page[0]))
	})

	t.Run("ListAssignments", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 5)
		r := newRun("ex", "tl", []string{"t0", "t1", "t2"}, []string{"t3", "t4"})
		r.as[0].Position, r.as[2].Position = 5, 0 // wave 1 order: t2, t1, t0
		r.as[3].Status, r.as[3].InstanceId, r.as[3].LeaseExpireTime = asRunning, "agent-1", at(5)
		r.as[1].Status, r.as[1].InstanceId = asCompleted, "agent-1"
		r.create(t, s)
		update(t, s, "ex", func(tx store.ExecTx) error {
			return tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i1", Kind: kindIntegration, WaveNumber: 1}, Position: -1})
		})
		all := []string{"ex/t2", "ex/t1", "ex/t0", "ex/i1", "ex/t3", "ex/t4"}
		list := func(q store.ListAssignmentsQuery) []string {
			t.Helper()
			q.ExecutionID = "ex"
			var got []string
			for range 10 {
				page, next, err := s.ListAssignments(ctx, q)
				require.NoError(t, err)
				got = append(got, ids(assignmentProtos(page))...)
				if next == 0 {
					return got
				}
				require.Equal(t, q.Offset+q.PageSize, next)
				q.Offset = next
			}
			t.Fatal("too many pages")
			return nil
		}
		require.Equal(t, all, list(store.ListAssignmentsQuery{PageSize: 100}))
		require.Equal(t, all, list(store.ListAssignmentsQuery{PageSize: 4}))
		require.Equal(t, all, list(store.ListAssignmentsQuery{PageSize: 1}))
		require.Equal(t, all[:4], list(store.ListAssignmentsQuery{PageSize: 2, WaveNumber: 1}))
		require.Equal(t, []string{"ex/t3"}, list(store.ListAssignmentsQuery{PageSize: 2, TaskID: "t3"}))
		require.Equal(t, []string{"ex/t1", "ex/t3"}, list(store.ListAssignmentsQuery{PageSize: 2, InstanceID: "agent-1"}))
		require.Equal(t, []string{"ex/t1", "ex/t3"}, list(store.ListAssignmentsQuery{PageSize: 5,
			Statuses: []schedulerv1.AssignmentStatus{asRunning, asCompleted}}))
		require.Empty(t, list(store.ListAssignmentsQuery{PageSize: 5, WaveNumber: 2, InstanceID: "agent-2"}))
		page, next, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 2, Offset: 6})
		require.NoError(t, err)
		require.Empty(t, page)
		require.Zero(t, next)

		// Inside a transaction, the same filters without paging.
		update(t, s, "ex", func(tx store.ExecTx) error {
			got, err := tx.Assignments(store.ListAssignmentsQuery{PageSize: 1, Statuses: []schedulerv1.AssignmentStatus{asPending}})
			require.NoError(t, err)
			require.Equal(t, []string{"ex/t2", "ex/t0", "ex/i1", "ex/t4"}, ids(assignmentProtos(got)))
			got, err = tx.Assignments(store.ListAssignmentsQuery{WaveNumber: 2})
			require.NoError(t, err)
			require.Equal(t, []string{"ex/t3", "ex/t4"}, ids(assignmentProtos(got)))
			return nil
		})
	})

	t.Run("TryLead", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		held, release, err := s.TryLead(ctx, "reaper")
		require.NoError(t, err)
		require.True(t, held)
		again, _, err := s.TryLead(ctx, "reaper")
		require.NoError(t, err)
		require.False(t, again, "held already")
		other, releaseOther, err := s.TryLead(ctx, "driver")
		require.NoError(t, err)
		require.True(t, other, "another name is another leadership")
		releaseOther()

		// Another process: on Postgres a second store on the same database.
		var second store.Store
		if pg, ok := s.(*postgres.Store); ok {
			second, err = postgres.New(ctx, pg.Pool().Config().ConnString())
			require.NoError(t, err)
			t.Cleanup(func() { _ = second.Close() })
			held2, _, err := second.TryLead(ctx, "reaper")
			require.NoError(t, err)
			require.False(t, held2, "held by the first store")
		}

		release()
		release() // twice is fine
		held, release, err = s.TryLead(ctx, "reaper")
		require.NoError(t, err)
		require.True(t, held)
		release()
		if second != nil {
			held2, release2, err := second.TryLead(ctx, "reaper")
			require.NoError(t, err)
			require.True(t, held2)
			held, _, err = s.TryLead(ctx, "reaper")
			require.NoError(t, err)
			require.False(t, held, "held by the second store")
			release2()
		}
	})

	t.Run("DeleteTaskList", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		newList(t, s, "tl", 1)
		r := newRun("ex", "tl", []string{"t0"}).create(t, s)
		require.ErrorIs(t, s.DeleteTaskList(ctx, "tl"), store.ErrActive)
		update(t, s, "ex", func(tx store.ExecTx) error {
			e := tx.Execution()
			e.Status, e.Outcome, e.EndTime = exFailed, commonv1.Outcome_OUTCOME_FAILED, timestamppb.New(tx.Now())
			require.NoError(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, r.as[0].Id, 1))
			require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, Message: "failed"}))
			return tx.PutExecution(e)
		})
		require.NoError(t, s.DeleteTaskList(ctx, "tl"))
		_, _, err := s.GetExecution(ctx, "ex")
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = s.AssignmentExecution(ctx, r.as[0].Id)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, _, _, err = s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex", Limit: 1})
		require.ErrorIs(t, err, store.ErrNotFound)
		list, _, err := s.ListExecutions(ctx, store.ListExecutionsQuery{PageSize: 10})
		require.NoError(t, err)
		require.Empty(t, list)
	})
}

func assignmentProtos(as []*store.Assignment) []*schedulerv1.Assignment {
	out := make([]*schedulerv1.Assignment, len(as))
	for i, a := range as {
		out[i] = a.Assignment
	}
	return out
}
