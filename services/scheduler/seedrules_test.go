package scheduler

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The Scheduler's rules as the seeds (000, 001, 003, 004) state them (issue 15, parts 10 and 11).

// Part 10: a task list has at most one open execution; a second start is FailedPrecondition naming
// the open one, also when the starts race.
func TestOneOpenExecutionPerTaskList(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		list := b.createList(t, diamond("once"))
		first := b.start(t, list, nil)
		_, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list})
		requireCode(t, err, codes.FailedPrecondition)
		require.Contains(t, status.Convert(err).Message(), first.GetId())

		_, err = b.client.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: first.GetId()})
		require.NoError(t, err)
		// Ended: the list may run again, and of eight racing starts exactly one wins.
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			won  []string
			lost int
		)
		for range 8 {
			wg.Go(func() {
				res, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if status.Code(err) == codes.FailedPrecondition {
						lost++
					}
					return
				}
				won = append(won, res.GetExecution().GetId())
			})
		}
		wg.Wait()
		require.Len(t, won, 1)
		require.Equal(t, 7, lost)

		// The request may opt out: allow_concurrent starts a second open run of the list.
		second, err := b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list, AllowConcurrent: true})
		require.NoError(t, err)
		require.NotEqual(t, won[0], second.GetExecution().GetId())
		_, err = b.client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list})
		requireCode(t, err, codes.FailedPrecondition)
	})
}

// Part 11, the seed's numbers: an agent is stale after 60 s without a heartbeat, WatchExecution
// keeps a quiet stream alive every 30 s, Verify Done retries an infrastructure error once.
func TestSeedNumbers(t *testing.T) {
	t.Parallel()
	s := New(nil, WithRegistry(registryClient(t), 0))
	require.Equal(t, 60*time.Second, s.staleAfter)
	require.Equal(t, 30*time.Second, watchKeepAliveInterval)
	require.Equal(t, 2, s.tries(), "the first call and one retry")
}

// Part 11: a dependency skipped on purpose counts as satisfied (seed 001); one that failed does
// not.
func TestSkippedDependencyIsSatisfied(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, diamond("skip-a")), nil)
		_, err := b.client.SkipTask(t.Context(), &schedulerv1.SkipTaskRequest{ExecutionId: e.GetId(), TaskId: "A", Reason: "done by hand"})
		require.NoError(t, err)
		order := b.work(t, "agent-1", e.GetId(), succeed)
		require.ElementsMatch(t, []string{"B", "C", "D"}, order, "A's dependents run")
		got := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(1), got.GetSkippedTasks())
		require.Equal(t, int32(3), got.GetCompletedTasks())
	})
}

// Part 11: SkipTask takes a FAILED task (its dependents then run); RetryTask a SKIPPED one.
func TestSkipTaskOfAFailedTask(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := diamond("skip-failed")
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: "E", Title: "e", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "e"})
		e := b.start(t, b.createList(t, spec), nil)
		held := map[string]*schedulerv1.ClaimedAssignment{}
		for range 2 { // wave 1: A and E
			c := b.claim(t, "agent-1", time.Second)
			held[c.GetTask().GetId()] = c
		}
		_, err := b.complete(t.Context(), held["A"], schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED)
		require.NoError(t, err)
		sk, err := b.client.SkipTask(t.Context(), &schedulerv1.SkipTaskRequest{ExecutionId: e.GetId(), TaskId: "A", Reason: "not needed after all"})
		require.NoError(t, err)
		require.Equal(t, []string{"A"}, sk.GetSkippedTaskIds())
		require.Equal(t, int32(0), sk.GetExecution().GetFailedTasks())
		require.Equal(t, int32(1), sk.GetExecution().GetSkippedTasks())
		_, err = b.complete(t.Context(), held["E"], schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"B", "C", "D"}, b.work(t, "agent-1", e.GetId(), succeed))
		got := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(0), got.GetFailedTasks())
		tl, err := b.client.GetTaskList(t.Context(), &schedulerv1.GetTaskListRequest{TaskListId: got.GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL})
		require.NoError(t, err)
		require.Equal(t, commonv1.TaskStatus_TASK_STATUS_SKIPPED, tl.GetTaskList().GetSpec().GetTasks()[0].GetStatus())
	})
}

// Part 11: a merge conflict during a wave's integration blocks the conflicting task (BLOCKED_DCR,
// MERGE_CONFLICT naming the paths) instead of failing the run, and the wave integrates without it.
func TestMergeConflictBlocksTheTask(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := &schedulerv1.TaskListSpec{Name: "conflict", Tasks: []*commonv1.Task{
			{Id: "X", Title: "x", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "x.txt"},
			{Id: "Y", Title: "y", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "y.txt"},
			{Id: "Z", Title: "z", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "z.txt", DependsOn: []string{"X"}},
		}}
		e := b.start(t, b.createList(t, spec), nil)
		commits := map[string]string{"X": strings.Repeat("a", 40), "Y": strings.Repeat("b", 40)}
		for range 2 {
			c := b.claim(t, "agent-1", time.Second)
			_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
				InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), Tries: 1,
				Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, CommitSha: commits[c.GetTask().GetId()]})
			require.NoError(t, err)
		}
		integ := b.claim(t, "agent-1", time.Second)
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, integ.GetAssignment().GetKind())
		require.Len(t, integ.GetMerges(), 2)
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: integ.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: integ.GetAssignment().GetFencingToken(),
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED,
			Error:  &commonv1.ErrorContext{Code: "MERGE_CONFLICT", Message: "task commit bbbbbbbbbbbb conflicts on shared.txt, README.md", TaskId: "Y"}})
		require.NoError(t, err)

		got, _ := b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, got.GetStatus(), "the run goes on")
		as, err := b.client.ListAssignments(t.Context(), &schedulerv1.ListAssignmentsRequest{ExecutionId: e.GetId(), TaskId: "Y"})
		require.NoError(t, err)
		y := as.GetAssignments()[0]
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, y.GetStatus())
		require.Equal(t, "MERGE_CONFLICT", y.GetError().GetCode())
		require.Contains(t, y.GetError().GetMessage(), "shared.txt, README.md")
		tl, err := b.client.GetTaskList(t.Context(), &schedulerv1.GetTaskListRequest{TaskListId: got.GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL})
		require.NoError(t, err)
		require.Equal(t, commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR, tl.GetTaskList().GetSpec().GetTasks()[1].GetStatus())

		// The integration goes again with X alone; then Z (X's dependent) runs.
		again := b.claim(t, "agent-1", time.Second)
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, again.GetAssignment().GetKind())
		require.Len(t, again.GetMerges(), 1)
		require.Equal(t, "X", again.GetMerges()[0].GetTaskId())
		_, err = b.complete(t.Context(), again, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
		require.Equal(t, []string{"Z"}, b.work(t, "agent-1", e.GetId(), succeed))
		end := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(1), end.GetFailedTasks())
	})
}

// Part 8: a new execution does not run SKIPPED or BLOCKED_DCR tasks (nor what waits for a blocked
// one); a skipped task's dependents run.
func TestRerunDoesNotRunSkippedOrBlockedTasks(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		task := func(id string, s commonv1.TaskStatus, deps ...string) *commonv1.Task {
			return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true",
				File: id + ".txt", DependsOn: deps, Status: s}
		}
		spec := &schedulerv1.TaskListSpec{Name: "rerun", Tasks: []*commonv1.Task{
			task("A", commonv1.TaskStatus_TASK_STATUS_COMPLETED), task("B", commonv1.TaskStatus_TASK_STATUS_SKIPPED),
			task("C", commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR), task("D", commonv1.TaskStatus_TASK_STATUS_PENDING, "C"),
			task("E", commonv1.TaskStatus_TASK_STATUS_PENDING, "B"), task("F", commonv1.TaskStatus_TASK_STATUS_PENDING, "A")}}
		e := b.start(t, b.createList(t, spec), nil)
		require.Equal(t, int32(2), e.GetTotalTasks())
		require.ElementsMatch(t, []string{"E", "F"}, b.work(t, "agent-1", e.GetId(), succeed))
		log := logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED)
		require.Contains(t, log[0].GetMessage(), "2 held back by a design change request (BLOCKED_DCR): C, D")
	})
}

// Part 11: with a Registry, ClaimTask admits registered, live agents only.
func TestClaimAsksTheRegistry(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		reg := registryClient(t)
		b := bundleWith(t, st, WithRegistry(reg, time.Hour))
		b.start(t, b.createList(t, oneTask("admit")), nil)
		_, err := b.client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "ghost", Capabilities: agentCaps,
			Wait: durationpb.New(100 * time.Millisecond)})
		requireCode(t, err, codes.FailedPrecondition)
		require.Contains(t, status.Convert(err).Message(), "agent ghost is not registered")
		liveInRegistry(t, reg, "ghost")
		require.NotNil(t, b.claim(t, "ghost", time.Second))
	})
}

// Part 11: RetryTask of a task whose wave is no longer running (here blocked by a merge conflict
// while its wave integrates) runs it again in the earliest wave that has not started integrating.
func TestRetryTaskInALaterWave(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := &schedulerv1.TaskListSpec{Name: "retry-later", Tasks: []*commonv1.Task{
			{Id: "X", Title: "x", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "x.txt"},
			{Id: "Y", Title: "y", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "y.txt"},
			{Id: "Z", Title: "z", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "z.txt", DependsOn: []string{"X"}},
		}}
		e := b.start(t, b.createList(t, spec), nil)
		commits := map[string]string{"X": strings.Repeat("a", 40), "Y": strings.Repeat("b", 40)}
		for range 2 {
			c := b.claim(t, "agent-1", time.Second)
			_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
				InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), Tries: 1,
				Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, CommitSha: commits[c.GetTask().GetId()]})
			require.NoError(t, err)
		}
		integ := b.claim(t, "agent-1", time.Second)
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: integ.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: integ.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED,
			Error: &commonv1.ErrorContext{Code: "MERGE_CONFLICT", Message: "task commit bbbbbbbbbbbb conflicts on y.txt", TaskId: "Y"}})
		require.NoError(t, err)

		res, err := b.client.RetryTask(t.Context(), &schedulerv1.RetryTaskRequest{ExecutionId: e.GetId(), TaskId: "Y", Reason: "rebased on X"})
		require.NoError(t, err)
		require.Equal(t, int32(2), res.GetAssignment().GetWaveNumber())
		require.Equal(t, int32(2), res.GetAssignment().GetAttempt())
		require.Equal(t, int32(0), res.GetExecution().GetFailedTasks())

		order := b.work(t, "agent-1", e.GetId(), func(c *schedulerv1.ClaimedAssignment) schedulerv1.CompletionResult {
			if c.GetTask().GetId() == "Y" {
				require.Equal(t, "MERGE_CONFLICT", c.GetPreviousErrors()[0].GetCode())
				require.Equal(t, "rebased on X", c.GetPreviousErrors()[len(c.GetPreviousErrors())-1].GetMessage())
			}
			return schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED
		})
		require.Contains(t, order, "Y")
		require.Contains(t, order, "Z")
		end := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(0), end.GetFailedTasks())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, end.GetStatus())
	})
}
