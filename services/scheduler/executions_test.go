package scheduler

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// runBundle is a Scheduler with its driver running (short intervals), for execution tests.
func runBundle(t *testing.T, st store.Store) *testBundle {
	t.Helper()
	_, b := runServer(t, st)
	return b
}

// runServer is runBundle with the Server itself, for tests that look inside it; opts come after
// the test defaults, so they override them.
func runServer(t *testing.T, st store.Store, opts ...Option) (*Server, *testBundle) {
	t.Helper()
	s := New(st, append([]Option{WithDriverInterval(20 * time.Millisecond), WithWorkDir(t.TempDir())}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.Start(ctx)
	conn := servertest.Serve(t, server.Config{
		Name:     "scheduler-test",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}},
	})
	return s, &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}
}

// diamond is A → (B, C) → D: three waves, no repository, no done-criteria.
func diamond(name string) *schedulerv1.TaskListSpec {
	task := func(id string, deps ...string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true",
			File: "out/" + id + ".txt", DependsOn: deps}
	}
	return &schedulerv1.TaskListSpec{Name: name, Tasks: []*commonv1.Task{task("A"), task("B", "A"), task("C", "A"), task("D", "B", "C")}}
}

func (b *testBundle) createList(t *testing.T, spec *schedulerv1.TaskListSpec) string {
	t.Helper()
	res, err := b.client.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	return res.GetTaskList().GetId()
}

// fastOptions make leases short so expiry tests run quickly.
func fastOptions() *schedulerv1.ExecutionOptions {
	return &schedulerv1.ExecutionOptions{AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(100 * time.Millisecond)}}
}

func (b *testBundle) start(t *testing.T, list string, opts *schedulerv1.ExecutionOptions) *schedulerv1.Execution {
	t.Helper()
	res, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list, Options: opts})
	require.NoError(t, err)
	return res.GetExecution()
}

var agentCaps = []string{"executor:command", "integration"}

func (b *testBundle) claim(t *testing.T, instance string, wait time.Duration) *schedulerv1.ClaimedAssignment {
	t.Helper()
	res, err := b.client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: agentCaps, Wait: durationpb.New(wait)})
	require.NoError(t, err)
	return res.GetAssignment()
}

func (b *testBundle) complete(ctx context.Context, c *schedulerv1.ClaimedAssignment, result schedulerv1.CompletionResult) (*schedulerv1.CompleteTaskResponse, error) {
	req := &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: c.GetAssignment().GetInstanceId(),
		FencingToken: c.GetAssignment().GetFencingToken(), Result: result, Tries: 1}
	if result == schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED {
		req.Error = &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "exit status 1"}
	}
	return b.client.CompleteTask(ctx, req)
}

func (b *testBundle) execution(t *testing.T, id string) (*schedulerv1.Execution, []*schedulerv1.Wave) {
	t.Helper()
	res, err := b.client.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	return res.GetExecution(), res.GetWaves()
}

// waitEnded polls until the execution has ended.
func (b *testBundle) waitEnded(t *testing.T, id string) *schedulerv1.Execution {
	t.Helper()
	var e *schedulerv1.Execution
	require.Eventually(t, func() bool {
		e, _ = b.execution(t, id)
		return ended(e)
	}, 20*time.Second, 10*time.Millisecond)
	return e
}

// work claims and completes assignments as one agent until the execution ends.
func (b *testBundle) work(t *testing.T, instance, execution string, result func(*schedulerv1.ClaimedAssignment) schedulerv1.CompletionResult) []string {
	t.Helper()
	var order []string
	for {
		e, _ := b.execution(t, execution)
		if ended(e) {
			return order
		}
		c := b.claim(t, instance, 200*time.Millisecond)
		if c == nil {
			continue
		}
		order = append(order, c.GetAssignment().GetTaskId())
		_, err := b.complete(t.Context(), c, result(c))
		require.NoError(t, err)
	}
}

func succeed(*schedulerv1.ClaimedAssignment) schedulerv1.CompletionResult {
	return schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED
}

func TestExecutionRunsWavesInOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		list := b.createList(t, diamond("diamond"))
		e := b.start(t, list, nil)
		require.Equal(t, int32(1), e.GetRunNumber())
		require.Equal(t, int32(3), e.GetWaveCount())
		require.Equal(t, int32(4), e.GetTotalTasks())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, e.GetStatus())
		require.Equal(t, int32(4), e.GetOptions().GetMaxParallel(), "options come back resolved")

		order := b.work(t, "agent-1", e.GetId(), succeed)
		require.Len(t, order, 4)
		require.Equal(t, "A", order[0])
		require.ElementsMatch(t, []string{"B", "C"}, order[1:3])
		require.Equal(t, "D", order[3])

		e, waves := b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, e.GetStatus())
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, e.GetOutcome(), e.GetStatusMessage())
		require.Equal(t, int32(4), e.GetCompletedTasks())
		require.Zero(t, e.GetRunningTasks())
		require.Equal(t, int32(4), e.GetTotalAttempts())
		for _, w := range waves {
			require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED, w.GetStatus())
		}

		// The list records what is done; a second run has nothing left.
		tl, err := b.client.GetTaskList(t.Context(), &schedulerv1.GetTaskListRequest{TaskListId: list})
		require.NoError(t, err)
		require.Equal(t, int32(4), tl.GetTaskList().GetCompletedTaskCount())
		_, err = b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list})
		requireCode(t, err, codes.FailedPrecondition)

		// The log is dense and ordered, and tells the story.
		log, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(), Limit: 500})
		require.NoError(t, err)
		require.False(t, log.GetHasMore())
		count := map[commonv1.EventType]int{}
		for i, en := range log.GetEntries() {
			require.Equal(t, int64(i+1), en.GetSeq())
			count[en.GetEventType()]++
		}
		require.Equal(t, log.GetLastSeq(), int64(len(log.GetEntries())))
		require.Equal(t, 3, count[commonv1.EventType_EVENT_TYPE_WAVE_STARTED])
		require.Equal(t, 3, count[commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED])
		require.Equal(t, 4, count[commonv1.EventType_EVENT_TYPE_TASK_COMPLETED])
		require.Equal(t, 4, count[commonv1.EventType_EVENT_TYPE_LEASE_GRANTED])
		require.Equal(t, 1, count[commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED])
	})
}

func TestStartExecutionRequests(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := setup(t, st)
		list := b.createList(t, diamond("starts"))
		_, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: "tl_missing"})
		requireCode(t, err, codes.NotFound)

		dry, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list,
			Options: &schedulerv1.ExecutionOptions{DryRun: true, MaxParallel: 1}})
		require.NoError(t, err)
		require.Empty(t, dry.GetExecution().GetId())
		require.Len(t, dry.GetWaves(), 4, "max_parallel 1 splits B and C")
		list2, err := b.client.ListExecutions(t.Context(), &schedulerv1.ListExecutionsRequest{TaskListId: list})
		require.NoError(t, err)
		require.Empty(t, list2.GetExecutions(), "a dry run stores nothing")

		first, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list, RequestId: "req-1"})
		require.NoError(t, err)
		again, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list, RequestId: "req-1"})
		require.NoError(t, err)
		require.Equal(t, first.GetExecution().GetId(), again.GetExecution().GetId(), "same request id, same execution")

		_, err = b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list,
			TriggeredBy: schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_RETRY, PreviousExecutionId: first.GetExecution().GetId()})
		requireCode(t, err, codes.FailedPrecondition) // it has not ended
		_, err = b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list,
			TriggeredBy: schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_RETRY, PreviousExecutionId: "ex_unknown"})
		requireCode(t, err, codes.NotFound)
		other := b.createList(t, diamond("other"))
		_, err = b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: other,
			TriggeredBy: schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_RETRY, PreviousExecutionId: first.GetExecution().GetId()})
		requireCode(t, err, codes.FailedPrecondition) // another list's execution

		_, err = b.client.DeleteTaskList(t.Context(), &schedulerv1.DeleteTaskListRequest{TaskListId: list})
		requireCode(t, err, codes.FailedPrecondition) // an execution is running
	})
}

func TestExpiredLeaseIsRequeuedAndTheOldHolderFenced(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		list := b.createList(t, &schedulerv1.TaskListSpec{Name: "one", Tasks: []*commonv1.Task{{Id: "A", Title: "a", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN}}})
		// A 3 s lease (three heartbeats of 1 s): long enough that a loaded machine's stalls (1.2 s
		// ones were seen under load 30) do not expire the live holder below, short enough to
		// watch the silent one expire.
		opts := fastOptions()
		opts.AgentConfig.HeartbeatInterval = durationpb.New(time.Second)
		e := b.start(t, list, opts)
		old := b.claim(t, "agent-dies", time.Second)
		require.NotNil(t, old)
		require.Equal(t, int64(1), old.GetAssignment().GetFencingToken())
		require.Equal(t, 3*time.Second, old.GetLeaseDuration().AsDuration())

		// The holder goes silent; the reaper requeues the task with attempt 2.
		next := b.claim(t, "agent-2", 10*time.Second)
		require.NotNil(t, next, "the expired lease is handed out again")
		require.Equal(t, old.GetAssignment().GetId(), next.GetAssignment().GetId())
		require.Equal(t, int32(2), next.GetAssignment().GetAttempt())
		require.Equal(t, int64(2), next.GetAssignment().GetFencingToken())
		require.NotEmpty(t, next.GetPreviousErrors())
		require.Equal(t, "LEASE_EXPIRED", next.GetPreviousErrors()[0].GetCode())

		// The old holder wakes up: its report and completion are refused.
		_, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: old.GetAssignment().GetId(),
			InstanceId: "agent-dies", FencingToken: 1, ReportSeq: 1})
		requireCode(t, err, codes.Aborted)
		_, err = b.complete(t.Context(), old, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		requireCode(t, err, codes.Aborted)

		// The new holder's reports keep its lease past several lease lengths.
		for i := int64(1); i <= 40; i++ { // 40 × 200 ms: over two and a half lease lengths
			res, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: next.GetAssignment().GetId(),
				InstanceId: "agent-2", FencingToken: 2, ReportSeq: i, ProgressPercent: int32(i * 2), Message: "working",
				Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_INFO, Message: fmt.Sprintf("step %d", i)}}})
			require.NoError(t, err)
			require.Equal(t, schedulerv1.Directive_DIRECTIVE_CONTINUE, res.GetDirective())
			time.Sleep(200 * time.Millisecond) //nolint:forbidigo // reports spread over several lease lengths are the behaviour
		}
		res, err := b.complete(t.Context(), next, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, res.GetAssignment().GetStatus())
		// A retried completion answers the same.
		_, err = b.complete(t.Context(), next, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)

		e = b.waitEnded(t, e.GetId())
		require.Equal(t, int32(1), e.GetCompletedTasks())
		log, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(),
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, commonv1.EventType_EVENT_TYPE_TASK_REQUEUED}})
		require.NoError(t, err)
		require.Len(t, log.GetEntries(), 2)
	})
}

func TestLeaseExpiriesUseUpRetries(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		list := b.createList(t, &schedulerv1.TaskListSpec{Name: "one", Tasks: []*commonv1.Task{{Id: "A", Title: "a", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN}}})
		opts := fastOptions()
		opts.MaxRetries = new(int32) // no retry: the first expiry fails the task
		e := b.start(t, list, opts)
		require.NotNil(t, b.claim(t, "agent-dies", time.Second))
		e = b.waitEnded(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, e.GetStatus())
		require.Equal(t, int32(1), e.GetFailedTasks())
	})
}

func TestPauseResumeCancel(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		list := b.createList(t, diamond("control"))
		e := b.start(t, list, nil)
		_, err := b.client.PauseExecution(t.Context(), &schedulerv1.PauseExecutionRequest{ExecutionId: e.GetId(), Reason: "lunch"})
		require.NoError(t, err)
		require.Nil(t, b.claim(t, "agent-1", 300*time.Millisecond), "a paused run hands out nothing")
		got, _ := b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED, got.GetStatus())
		require.Equal(t, "paused: lunch", got.GetStatusMessage())

		_, err = b.client.ResumeExecution(t.Context(), &schedulerv1.ResumeExecutionRequest{ExecutionId: e.GetId()})
		require.NoError(t, err)
		c := b.claim(t, "agent-1", time.Second)
		require.NotNil(t, c)

		_, err = b.client.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: e.GetId(), Reason: "wrong list"})
		require.NoError(t, err)
		res, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: c.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), ReportSeq: 1})
		require.NoError(t, err)
		require.Equal(t, schedulerv1.Directive_DIRECTIVE_CANCEL, res.GetDirective())
		require.Contains(t, res.GetReason(), "wrong list")
		_, err = b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED)
		require.NoError(t, err)
		require.Nil(t, b.claim(t, "agent-1", 100*time.Millisecond))

		got, waves := b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, got.GetStatus())
		require.Equal(t, commonv1.Outcome_OUTCOME_CANCELLED, got.GetOutcome())
		for _, w := range waves {
			require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_CANCELLED, w.GetStatus())
		}
		_, err = b.client.ResumeExecution(t.Context(), &schedulerv1.ResumeExecutionRequest{ExecutionId: e.GetId()})
		requireCode(t, err, codes.FailedPrecondition)
	})
}

func TestStopRules(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		// More than max_failed_tasks failures stop the run.
		spec := &schedulerv1.TaskListSpec{Name: "flaky"}
		for i := range 4 {
			spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprintf("T%d", i), Title: "t", Command: "false", Action: commonv1.TaskAction_TASK_ACTION_RUN,
				File: fmt.Sprintf("f%d", i)})
		}
		e := b.start(t, b.createList(t, spec), &schedulerv1.ExecutionOptions{MaxFailedTasks: new(int32), MaxParallel: 4})
		c := b.claim(t, "agent-1", time.Second)
		_, err := b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED)
		require.NoError(t, err)
		e, _ = b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, e.GetStatus())
		require.Equal(t, "1 failed tasks (more than 0)", e.GetStatusMessage())

		// A failed task of a critical phase stops the run at once.
		crit := diamond("critical")
		crit.Tasks[1].Phase = "database"
		e = b.start(t, b.createList(t, crit), nil)
		order := b.work(t, "agent-2", e.GetId(), func(c *schedulerv1.ClaimedAssignment) schedulerv1.CompletionResult {
			if c.GetTask().GetId() == "B" {
				return schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED
			}
			return schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED
		})
		require.NotContains(t, order, "D")
		e, _ = b.execution(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, e.GetOutcome())
		require.Equal(t, "critical phase database failed: task B", e.GetStatusMessage())

		// A failed task's dependents are skipped; three consecutive failures escalate.
		e = b.start(t, b.createList(t, diamond("stuck")), nil)
		c = b.claim(t, "agent-3", time.Second)
		_, err = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
			InstanceId: "agent-3", FencingToken: 1, Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, Tries: 4,
			ConsecutiveFailures: 3, Error: &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "tests fail"}})
		require.NoError(t, err)
		e, _ = b.execution(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_ESCALATED, e.GetOutcome())
		require.Equal(t, "A", e.GetEscalatedTaskId())
		require.Equal(t, "agent-3", e.GetEscalatedInstanceId())
		h, err := b.client.GetHandoffContext(t.Context(), &schedulerv1.GetHandoffContextRequest{ExecutionId: e.GetId()})
		require.NoError(t, err)
		require.Equal(t, "A", h.GetContext().GetTask().GetId())
		require.Equal(t, int32(1), h.GetContext().GetConsecutiveFailures())
		require.NotEmpty(t, h.GetContext().GetErrorHistory())
		require.Contains(t, h.GetContext().GetReason(), "3 consecutive failures")
		require.Contains(t, h.GetContext().GetLogTail(), "task_failed: task A - Task A: task A failed after 4 tries: tests fail")
	})
}

func TestFailedDependencySkipsDependents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, diamond("skips")), nil)
		b.work(t, "agent-1", e.GetId(), func(c *schedulerv1.ClaimedAssignment) schedulerv1.CompletionResult {
			if c.GetTask().GetId() == "B" {
				return schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED
			}
			return schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED
		})
		e, _ = b.execution(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, e.GetOutcome())
		require.Equal(t, int32(2), e.GetCompletedTasks())
		require.Equal(t, int32(1), e.GetFailedTasks())
		require.Equal(t, int32(1), e.GetSkippedTasks())
		as, err := b.client.ListAssignments(t.Context(), &schedulerv1.ListAssignmentsRequest{ExecutionId: e.GetId(), TaskId: "D"})
		require.NoError(t, err)
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED, as.GetAssignments()[0].GetStatus())
		require.Equal(t, "dependency B did not complete", as.GetAssignments()[0].GetError().GetMessage())
	})
}

func TestRetryAndSkipTask(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := diamond("retry")
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: "E", Title: "e", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "e"})
		e := b.start(t, b.createList(t, spec), nil)
		first := map[string]*schedulerv1.ClaimedAssignment{}
		for range 2 { // wave 1 holds A and E
			c := b.claim(t, "agent-1", time.Second)
			first[c.GetTask().GetId()] = c
		}
		_, err := b.complete(t.Context(), first["A"], schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED)
		require.NoError(t, err)
		res, err := b.client.RetryTask(t.Context(), &schedulerv1.RetryTaskRequest{ExecutionId: e.GetId(), TaskId: "A", Reason: "flaky network"})
		require.NoError(t, err)
		require.Equal(t, int32(2), res.GetAssignment().GetAttempt())
		require.Equal(t, int32(0), res.GetExecution().GetFailedTasks())
		again := b.claim(t, "agent-1", time.Second)
		require.Equal(t, "A", again.GetTask().GetId())
		require.Len(t, again.GetPreviousErrors(), 2)
		require.Equal(t, "flaky network", again.GetPreviousErrors()[1].GetMessage())
		_, err = b.complete(t.Context(), again, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)

		_, err = b.client.SkipTask(t.Context(), &schedulerv1.SkipTaskRequest{ExecutionId: e.GetId(), TaskId: "E"})
		requireCode(t, err, codes.FailedPrecondition) // E is leased
		_, err = b.complete(t.Context(), first["E"], schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)

		// Wave 2 (B, C) is open: skip B with its dependents.
		require.Eventually(t, func() bool { got, _ := b.execution(t, e.GetId()); return got.GetCurrentWave() == 2 }, 5*time.Second, 10*time.Millisecond)
		sk, err := b.client.SkipTask(t.Context(), &schedulerv1.SkipTaskRequest{ExecutionId: e.GetId(), TaskId: "B", SkipDependents: true, Reason: "not needed"})
		require.NoError(t, err)
		require.Equal(t, []string{"B", "D"}, sk.GetSkippedTaskIds())
		order := b.work(t, "agent-1", e.GetId(), succeed)
		require.Equal(t, []string{"C"}, order)
		got := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(2), got.GetSkippedTasks())
		require.Equal(t, int32(3), got.GetCompletedTasks())
	})
}

func TestWatchExecutionResumesWithoutGapsOrDuplicates(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, diamond("watch")), nil)
		var (
			wg       sync.WaitGroup
			received []int64
		)
		read := func(after int64, stopAt int) error {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			stream, err := b.client.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(), AfterSeq: after})
			if err != nil {
				return err
			}
			for n := 0; stopAt == 0 || n < stopAt; n++ {
				msg, err := stream.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if msg.GetEntry() != nil {
					received = append(received, msg.GetEntry().GetSeq())
				}
			}
			return nil
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.work(t, "agent-1", e.GetId(), succeed)
		}()
		require.NoError(t, read(0, 5)) // disconnect after 5 entries
		require.NoError(t, read(received[len(received)-1], 0))
		wg.Wait()
		got, _ := b.execution(t, e.GetId())
		require.True(t, ended(got))
		require.Len(t, received, int(got.GetLastSeq()))
		for i, seq := range received {
			require.Equal(t, int64(i+1), seq)
		}
	})
}

func TestLeaseRPCsRefuseStrangers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, diamond("strangers")), nil)
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: "as_missing", InstanceId: "x", FencingToken: 1,
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED})
		requireCode(t, err, codes.NotFound)
		c := b.claim(t, "agent-1", time.Second)
		_, err = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-2",
			FencingToken: 1, Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED})
		requireCode(t, err, codes.Aborted)
		_, err = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-1",
			FencingToken: 7, Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED})
		requireCode(t, err, codes.Aborted)
		// An agent without the executor's capability gets nothing.
		res, err := b.client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "agent-3", Capabilities: []string{"executor:openai"}})
		require.NoError(t, err)
		require.Nil(t, res.GetAssignment())
		_, err = b.client.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: "ex_missing"})
		requireCode(t, err, codes.NotFound)
		_ = e
	})
}

func TestDoneCriteriaWithoutVerifierBlocks(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := diamond("criteria")
		spec.DoneCriteria = "## F1: builds\nTag: AUTO_VERIFY\n```check\ncommand:\n  shell: true\n```\n"
		e := b.start(t, b.createList(t, spec), nil)
		b.work(t, "agent-1", e.GetId(), succeed)
		e = b.waitEnded(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_BLOCKED, e.GetOutcome())
		require.Equal(t, "no Verifier configured for this Scheduler", e.GetVerification().GetBlockReason())
	})
}
