package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// Issue 15 part 5, end to end: a task whose command asks for a design change (exit 78) ends
// BLOCKED_DCR with the request, its dependent waits and the run pauses; once a person has
// decided (here: the file the command looks for exists), RetryTask and ResumeExecution pick it
// up again and the run completes, dependent included, without stalling.
func TestDesignChangeRequestPausesUntilAPersonDecides(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents = true, 1 })
	sched := schedulerv1.NewSchedulerServiceClient(b.conn)
	decision := filepath.Join(t.TempDir(), "decision")
	spec := &schedulerv1.TaskListSpec{Name: "dcr", Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: clustertest.GitRepo(t)}, BaseRef: "main"},
		Tasks: []*commonv1.Task{
			{Id: "1", Title: "needs a decision", File: "a.txt",
				Command: "test -f " + agentShq(decision) + " || { echo 'a.txt or b.txt? decide the file name'; exit 78; }; cat " + agentShq(decision) + " > a.txt"},
			{Id: "2", Title: "after it", File: "b.txt", Command: "echo b > b.txt", DependsOn: []string{"1"}},
		}}
	tl, err := sched.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(2)}})
	require.NoError(t, err)
	id := ex.GetExecution().GetId()

	var e *schedulerv1.Execution
	require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
		e = agentExecution(t, sched, id)
		return e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED
	}), "the run did not pause: %v", e)
	require.Contains(t, e.GetStatusMessage(), "decide the file name")
	got, err := sched.GetTaskList(t.Context(), &schedulerv1.GetTaskListRequest{TaskListId: tl.GetTaskList().GetId()})
	require.NoError(t, err)
	status := map[string]commonv1.TaskStatus{}
	for _, task := range got.GetTaskList().GetSpec().GetTasks() {
		status[task.GetId()] = task.GetStatus()
	}
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR, status["1"])
	require.NotEqual(t, commonv1.TaskStatus_TASK_STATUS_COMPLETED, status["2"], "the dependent waits")

	require.NoError(t, os.WriteFile(decision, []byte("a.txt it is\n"), 0o644))
	_, err = sched.RetryTask(t.Context(), &schedulerv1.RetryTaskRequest{ExecutionId: id, TaskId: "1", Reason: "decided: a.txt"})
	require.NoError(t, err)
	_, err = sched.ResumeExecution(t.Context(), &schedulerv1.ResumeExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
		e = agentExecution(t, sched, id)
		return clustertest.Ended(e)
	}), "the resumed run did not end: %v", e)
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, e.GetStatus(), "%v", e)
	require.EqualValues(t, 2, e.GetCompletedTasks())
}
