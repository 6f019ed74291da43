package storetest

import (
	"fmt"
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
// key) in that order, each a PENDING task assignment "<id>/<task>" at its index in the run (the
// claim rank: wave, then that order); the first wave
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
		for _, task := range tasks {
			r.as = append(r.as, &store.Assignment{
				Assignment: &schedulerv1.Assignment{Id: id + "/" + task, Kind: kindTask, WaveId: w.Id, WaveNumber: w.WaveNumber,
					TaskId: task, Status: asPending, Attempt: 1},
				Position: int32(len(r.as)),
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

func assignmentProtos(as []*store.Assignment) []*schedulerv1.Assignment {
	out := make([]*schedulerv1.Assignment, len(as))
	for i, a := range as {
		out[i] = a.Assignment
	}
	return out
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
