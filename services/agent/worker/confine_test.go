package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/proc"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// Issue 14 finding 4: an assignment naming a local repository outside the agent's allowed roots
// (by path, through a symbolic link, or as a file:// URL) fails with REPOSITORY_NOT_ALLOWED and
// nothing is written into it; one inside a root is built in.
func TestAssignmentOutsideTheAllowedRootsFails(t *testing.T) {
	t.Parallel()
	allowed := t.TempDir()
	inside := filepath.Join(allowed, "app")
	require.NoError(t, os.Rename(origin(t), inside))
	victim := origin(t)
	link := filepath.Join(allowed, "link")
	require.NoError(t, os.Symlink(victim, link))
	roots, err := workspace.NewRoots([]string{allowed})
	require.NoError(t, err)
	h := startWorker(t, func(c *Config) { c.Roots = roots })

	task := &commonv1.Task{Id: "1", Title: "write", File: "out.txt", Command: "echo hi > out.txt"}
	for _, src := range []string{victim, link} {
		ca := claimed(t, task, src)
		h.sched.push(ca)
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult(), src)
		require.Equal(t, "REPOSITORY_NOT_ALLOWED", c.GetError().GetCode(), src)
		require.Contains(t, c.GetError().GetMessage(), "outside the agent's allowed roots", src)
	}
	ca := claimed(t, task, "")
	ca.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: "file://" + victim}, BaseRef: "main"}
	ca.TaskRef = "refs/converge/ex_1/1"
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, "REPOSITORY_NOT_ALLOWED", c.GetError().GetCode())
	require.Empty(t, gitT(t, victim, "for-each-ref", "refs/converge"), "nothing was pushed into the victim")

	h.sched.push(claimed(t, task, inside))
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.NotEmpty(t, gitT(t, inside, "for-each-ref", "refs/converge"))
}

// Issue 14 finding 5: a task list's executor may name only the variables on the agent's
// allow-list; a task whose command reads its environment sees none of the agent's others.
func TestExecutorSpecsNameOnlyAllowedVariables(t *testing.T) {
	t.Setenv("CONVERGE_WORKER_TEST_SECRET", "s3cret-of-the-agent")
	t.Setenv("WORKER_TEST_ALLOWED", "fine-to-share")
	h := startWorker(t, func(c *Config) { c.AllowedEnv = []string{"WORKER_TEST_ALLOWED"} })
	spec := func(names ...string) *commonv1.ExecutorSpec {
		return &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{EnvPassthrough: names}}}
	}
	out := tmpFile(t, "env")
	task := &commonv1.Task{Id: "1", Title: "env", Command: "env > " + shq(out)}
	ca := claimed(t, task, "")
	ca.Options.Executor = spec("CONVERGE_WORKER_TEST_SECRET")
	ca.Options.MaxRetries = proto.Int32(0)
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, "EXECUTOR", c.GetError().GetCode())
	require.Contains(t, c.GetError().GetMessage(), "never passed")

	ca = claimed(t, task, "")
	ca.Options.Executor = spec("WORKER_TEST_ALLOWED")
	h.sched.push(ca)
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	env, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(env), "WORKER_TEST_ALLOWED=fine-to-share")
	require.NotContains(t, string(env), "s3cret-of-the-agent")
	for _, line := range strings.Split(string(env), "\n") {
		name, _, _ := strings.Cut(line, "=")
		if strings.HasPrefix(name, "CONVERGE_") {
			require.Contains(t, []string{"CONVERGE_TASK_ID", "CONVERGE_TASK_FILE", "CONVERGE_ATTEMPT"}, name, "only the task's own CONVERGE_ variables")
		}
	}
}

// Issue 14 finding 6: when the agent process dies (here: its end of the watchdog's pipe closes
// without the clean stop, as the kernel does for a SIGKILL), the session's watchdog kills every
// recorded process group at once, children that left their leader included.
func TestWatchdogKillsTheGroupsOfADeadAgent(t *testing.T) {
	t.Parallel()
	sess, err := openSession(t.TempDir(), NewSessionID())
	require.NoError(t, err)
	pidFile := tmpFile(t, "child.pid")
	done := make(chan proc.Result, 1)
	go func() {
		done <- proc.Run(t.Context(), proc.Spec{Shell: background(tmpFile(t, "out"), pidFile) + "; sleep 600", Env: proc.Env(nil, nil), Groups: sess.groups})
	}()
	eventually(t, 10*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil && len(sess.groups.Live()) == 1 }, "the task started")
	child := readPid(t, pidFile)
	require.True(t, alive(child))

	require.NoError(t, sess.feed.Close()) // the agent is gone
	require.NoError(t, sess.watchdog.Wait())
	eventually(t, 10*time.Second, func() bool { return !alive(child) }, "the watchdog did not kill the child %d", child)
	select {
	case res := <-done:
		require.Equal(t, -1, res.ExitCode, "the leader was killed")
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not end")
	}
	sess.feed = nil // already closed
	sess.close()
}

// The emptied run cgroups kept for the next tasks (platform/proc's pool) go with the session:
// after close, nothing of its cgroup is left.
func TestSessionCloseLeavesNoCgroup(t *testing.T) {
	t.Parallel()
	sess, err := openSession(t.TempDir(), NewSessionID())
	require.NoError(t, err)
	require.NoError(t, sess.cgroupErr, "this test needs a writable cgroup v2")
	sb := &proc.Sandbox{UID: -1, GID: -1, CgroupParent: sess.cgroup}
	for range 2 {
		res := proc.Run(t.Context(), proc.Spec{Shell: "true", Env: proc.Env(nil, nil), Groups: sess.groups, Sandbox: sb})
		require.NoError(t, res.Err)
		require.Zero(t, res.ExitCode, res.Output)
	}
	entries, err := os.ReadDir(sess.cgroup)
	require.NoError(t, err)
	kept := 0
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "run-") {
			kept++
		}
	}
	require.Equal(t, 1, kept, "the emptied cgroup is kept for the next task")
	sess.close()
	_, err = os.Stat(sess.cgroup)
	require.ErrorIs(t, err, os.ErrNotExist, "the session's cgroup and its kept run cgroups are gone")
}
