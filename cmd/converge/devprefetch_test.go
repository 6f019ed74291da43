package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// `converge dev --agents 2 --agent-prefetch` runs a fan-out with each agent holding one
// assignment ahead: every task completes once, nothing is requeued, and an agent starts its next
// task before the completion of the one before is in the store (without prefetch the next comes
// with that completion's answer, so it always starts after).
func TestDevLocalAgentsPrefetch(t *testing.T) {
	t.Parallel()
	opts := devOptions{InMemory: true, Agents: 2, AgentPrefetch: true, AgentDrainTimeout: 5 * time.Second, DevToken: "tok-prefetch"}
	opts.LogFormat, opts.LogLevel = "text", "warn"
	conn := serveDev(t, opts, &lockedBuffer{})
	sched := schedulerv1.NewSchedulerServiceClient(conn)
	cctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer tok-prefetch")
	const tasks = 40
	spec := &schedulerv1.TaskListSpec{Name: "prefetch fan-out"}
	for i := range tasks {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprint(i + 1), Title: "true", Command: "true",
			Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%d", i)})
	}
	tl, err := sched.CreateTaskList(cctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(cctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId()})
	require.NoError(t, err)
	id := ex.GetExecution().GetId()
	var last *schedulerv1.Execution
	require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
		res, err := sched.GetExecution(cctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		last = res.GetExecution()
		return err == nil && last.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
	}), "the fan-out did not complete: %v", last)
	require.EqualValues(t, tasks, last.GetCompletedTasks(), "%v", last)

	log, err := sched.GetExecutionLog(cctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: id, Limit: 500})
	require.NoError(t, err)
	completed := map[string]int{}
	// Per agent, in log order: each task's start (the agent's clock) and completion (the store's).
	type run struct {
		task           string
		start, stopped time.Time
	}
	runs := map[string][]*run{}
	byTask := map[string]*run{}
	for _, en := range log.GetEntries() {
		require.NotEqual(t, commonv1.EventType_EVENT_TYPE_TASK_REQUEUED, en.GetEventType(), "nothing is requeued: %s", en.GetMessage())
		switch en.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_TASK_STARTED:
			r := &run{task: en.GetTaskId(), start: en.GetSourceTime().AsTime()}
			byTask[en.GetTaskId()] = r
			runs[en.GetInstanceId()] = append(runs[en.GetInstanceId()], r)
		case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
			completed[en.GetTaskId()]++
			if r := byTask[en.GetTaskId()]; r != nil {
				r.stopped = en.GetTime().AsTime()
			}
		}
	}
	require.Len(t, completed, tasks)
	for task, n := range completed {
		require.Equal(t, 1, n, "task %s completed %d times", task, n)
	}
	overlapped := 0
	for _, rs := range runs {
		for i := 1; i < len(rs); i++ {
			if !rs[i-1].stopped.IsZero() && rs[i].start.Before(rs[i-1].stopped) {
				overlapped++
			}
		}
	}
	require.Positive(t, overlapped, "no agent started a task before the one before was completed: nothing was held ahead")
}
