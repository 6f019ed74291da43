package security

// Finding 6 for tasks: a task's process that left its process group (setsid) outlived the task
// and its agent: the Scheduler requeued the task and the survivor ran on. Now each task process
// runs in a cgroup of its own (v2, when the host lets the agent make one: killed whole when the
// process ends, and by the agent's watchdog when the agent dies), and with --sandbox namespaces
// in a PID namespace (the kernel kills it whole when its init dies). Against the real binaries,
// in both modes.

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

func TestFinding6SetsidGrandchildOfATaskDiesWithTheTaskAndTheAgent(t *testing.T) {
	t.Parallel()
	for i, mode := range []string{"none", "namespaces"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			c := agentCluster(t, root, "--sandbox", mode)
			repo := filepath.Join(root, "app")
			require.NoError(t, os.Rename(clustertest.GitRepo(t), repo))
			base := 80000000 + 10*os.Getpid() + 4*i
			ended, killed := strconv.Itoa(base), strconv.Itoa(base+1)
			// Each grandchild makes a file once it runs (before it becomes the sleep).
			flags := t.TempDir()
			startedEnded, startedKilled := filepath.Join(flags, "ended"), filepath.Join(flags, "killed")
			t.Cleanup(func() {
				if processWith(ended) || processWith(killed) {
					t.Errorf("a setsid grandchild still runs")
				}
			})

			// The task ends (passes) having started a setsid grandchild: the grandchild goes with it.
			e, log := run(t, c, repo, &commonv1.Task{Id: "1", Title: "leaves a setsid grandchild", File: "out.txt",
				Command: "setsid sh -c 'touch " + startedEnded + "; exec sleep " + ended + "' </dev/null >/dev/null 2>&1 & " +
					"until [ -e " + startedEnded + " ]; do sleep 0.05; done; echo done > out.txt"})
			require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, e.GetStatus(), "%s", logText(log))
			require.True(t, clustertest.Eventually(10*time.Second, func() bool { return !processWith(ended) }),
				"the setsid grandchild outlives its task")

			// The agent is killed (SIGKILL) while its task runs a setsid grandchild: it goes at once.
			sched := c.SchedulerClient(0)
			spec := &schedulerv1.TaskListSpec{Name: "killed-" + mode, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"},
				Tasks: []*commonv1.Task{{Id: "1", Title: "leaves a setsid grandchild", File: "out2.txt",
					Command: "setsid sh -c 'touch " + startedKilled + "; exec sleep " + killed + "' </dev/null >/dev/null 2>&1 & sleep 600"}}}
			tl, err := sched.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
			require.NoError(t, err)
			ex, err := sched.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
				Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0)}})
			require.NoError(t, err)
			require.True(t, clustertest.Eventually(time.Minute, func() bool {
				_, err := os.Stat(startedKilled)
				return err == nil
			}),
				"the task never started:\n%s", c.Agent("agent-01").Tail(4096))
			c.Agent("agent-01").Kill()
			require.True(t, clustertest.Eventually(10*time.Second, func() bool { return !processWith(killed) }),
				"the setsid grandchild outlives the killed agent")
			_, err = sched.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: ex.GetExecution().GetId(), Reason: "test over"})
			require.NoError(t, err)
		})
	}
}
