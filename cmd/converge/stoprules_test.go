package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// Issue 15 part 6: STUCK counts failed tasks, not tries, so each stop rule reaches its own
// outcome. With max_retries 3 every failing task below fails 4 tries; before, the first such task
// made its agent STUCK (4 consecutive failed tries) and the run ESCALATED whatever the rules.
func TestStopRulesReachTheirOwnOutcomes(t *testing.T) {
	t.Parallel()
	failing := func(id, phase string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "fails " + id, Command: "echo no; exit 1", Phase: phase}
	}
	for _, tc := range []struct {
		name    string
		tasks   []*commonv1.Task
		opts    *schedulerv1.ExecutionOptions
		outcome commonv1.Outcome
		message string
	}{
		{"more than max_failed_tasks", []*commonv1.Task{failing("1", ""), failing("2", "")},
			&schedulerv1.ExecutionOptions{MaxFailedTasks: proto.Int32(1)}, commonv1.Outcome_OUTCOME_FAILED, "2 failed tasks (more than 1)"},
		{"a critical phase", []*commonv1.Task{failing("1", "database")},
			&schedulerv1.ExecutionOptions{}, commonv1.Outcome_OUTCOME_FAILED, "critical phase database failed: task 1"},
		{"three tasks in a row on one agent: STUCK", []*commonv1.Task{failing("1", ""), failing("2", ""), failing("3", "")},
			&schedulerv1.ExecutionOptions{MaxFailedTasks: proto.Int32(10)}, commonv1.Outcome_OUTCOME_ESCALATED, "STUCK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents = true, 1 })
			sched := schedulerv1.NewSchedulerServiceClient(b.conn)
			tl, err := sched.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: &schedulerv1.TaskListSpec{Name: "stop", Tasks: tc.tasks}})
			require.NoError(t, err)
			opts := proto.Clone(tc.opts).(*schedulerv1.ExecutionOptions)
			opts.MaxRetries = proto.Int32(3)
			ex, err := sched.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(), Options: opts})
			require.NoError(t, err)
			var e *schedulerv1.Execution
			require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
				e = agentExecution(t, sched, ex.GetExecution().GetId())
				return clustertest.Ended(e)
			}), "the run did not end: %v", e)
			require.Equal(t, tc.outcome, e.GetOutcome(), "%v", e)
			require.Contains(t, e.GetStatusMessage(), tc.message)
		})
	}
}
