package security

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// Findings 4, 5 and 6 (agent): an agent confined to its allowed roots, pushing without running
// the origin's hooks, keeping its token from its tasks, and taking its tasks' processes with it
// when it is killed. Each test runs the real binaries (platform/clustertest) and attacks them as
// a task list's author would.

// agentCluster is one Scheduler and one agent allowed to build under root only.
func agentCluster(t *testing.T, root string, agentArgs ...string) *clustertest.Cluster {
	t.Helper()
	return clustertest.Start(t, clustertest.Options{Agents: 1, AgentAllowedRoots: []string{root}, AgentArgs: agentArgs,
		Without: []string{"verifier", "knowledge"}})
}

// run submits one task list on repo (a local path) and waits for its execution to end.
func run(t *testing.T, c *clustertest.Cluster, repo string, tasks ...*commonv1.Task) (*schedulerv1.Execution, []*commonv1.LogEntry) {
	t.Helper()
	ctx := t.Context()
	sched := c.SchedulerClient(0)
	spec := &schedulerv1.TaskListSpec{Name: strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")),
		Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"}, Tasks: tasks}
	tl, err := sched.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0)}})
	require.NoError(t, err)
	return wait(t, c, ex.GetExecution().GetId())
}

// wait waits for execution id to end and answers it with its log.
func wait(t *testing.T, c *clustertest.Cluster, id string) (*schedulerv1.Execution, []*commonv1.LogEntry) {
	t.Helper()
	sched := c.SchedulerClient(0)
	var e *schedulerv1.Execution
	require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
		res, err := sched.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
		e = res.GetExecution()
		return err == nil && clustertest.Ended(e)
	}), "the execution did not end: %v", e)
	log, err := clustertest.ExecutionLog(context.WithoutCancel(t.Context()), sched, id)
	require.NoError(t, err)
	return e, log
}

// logText is the execution log's messages and contexts, one entry a line.
func logText(log []*commonv1.LogEntry) string {
	var b strings.Builder
	for _, e := range log {
		b.WriteString(e.GetMessage())
		b.WriteString(" ")
		b.WriteString(e.GetContext().String())
		b.WriteString("\n")
	}
	return b.String()
}

// Finding 4: a task list naming a repository outside the agent's allowed roots (directly, or
// through a symbolic link inside a root) fails with REPOSITORY_NOT_ALLOWED, and nothing is
// pushed into the repository.
func TestFinding4AgentRefusesRepositoriesOutsideItsRoots(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := agentCluster(t, root)
	victim := clustertest.GitRepo(t) // another temporary directory
	link := filepath.Join(root, "innocent")
	require.NoError(t, os.Symlink(victim, link))
	for _, repo := range []string{victim, link} {
		e, log := run(t, c, repo, &commonv1.Task{Id: "1", Title: "write", File: "out.txt", Command: "echo pwned > out.txt"})
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, e.GetStatus(), repo)
		text := logText(log)
		require.Contains(t, text, "outside the agent's allowed roots", repo)
	}
	require.Equal(t, "refs/heads/main", clustertest.Git(t, victim, "for-each-ref", "--format=%(refname)"), "nothing was pushed into the victim")
}

// Finding 4: pushing into a local repository runs none of its receive-side hooks (they would
// run a program of the repository owner's choosing as the agent's user).
func TestFinding4PushRunsNoHooksOfTheRepository(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := agentCluster(t, root)
	repo := filepath.Join(root, "app")
	require.NoError(t, os.Rename(clustertest.GitRepo(t), repo))
	marker := filepath.Join(t.TempDir(), "hook-ran")
	for _, hook := range []string{"pre-receive", "update", "post-receive", "post-update", "reference-transaction"} {
		require.NoError(t, os.WriteFile(filepath.Join(repo, ".git", "hooks", hook), []byte("#!/bin/sh\necho "+hook+" >> "+marker+"\n"), 0o755))
	}
	e, log := run(t, c, repo, &commonv1.Task{Id: "1", Title: "write", File: "out.txt", Command: "echo built > out.txt"})
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, e.GetStatus(), "%s", logText(log))
	require.Contains(t, clustertest.Git(t, repo, "for-each-ref", "--format=%(refname)"), "converge", "the task's commit was pushed")
	_, err := os.Stat(marker)
	require.True(t, os.IsNotExist(err), "a hook of the repository ran")
}

// Finding 5: an agent given its token in a file (--token-file) keeps it from its tasks: a task
// command reading its own environment and arguments, and the agent's, finds no token.
func TestFinding5TaskSeesNoAgentToken(t *testing.T) {
	t.Parallel()
	const token = "agent-token-7d1e0c5b"
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	root := t.TempDir()
	c := agentCluster(t, root, "--token-file", tokenFile)
	repo := filepath.Join(root, "app")
	require.NoError(t, os.Rename(clustertest.GitRepo(t), repo))
	loot := filepath.Join(t.TempDir(), "loot")
	steal := "{ env; tr '\\0' ' ' < /proc/self/cmdline; echo; tr '\\0' ' ' < /proc/$PPID/cmdline; echo; tr '\\0' '\\n' < /proc/$PPID/environ; } > " + loot + " 2>&1; echo done > out.txt"
	e, log := run(t, c, repo, &commonv1.Task{Id: "1", Title: "steal", File: "out.txt", Command: steal})
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, e.GetStatus(), "%s", logText(log))
	got, err := os.ReadFile(loot)
	require.NoError(t, err)
	require.Contains(t, string(got), "converge-agent", "the task read the agent's arguments: the test looks where a token would be")
	require.Contains(t, string(got), "--token-file")
	require.NotContains(t, string(got), token)
}

// Finding 5, sandbox: an agent started with --sandbox namespaces runs its tasks in PID and
// mount namespaces of their own: a task looking through /proc for the agent (its arguments and
// environment) finds no process but its own.
func TestFinding5SandboxedTaskCannotSeeTheAgent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := agentCluster(t, root, "--sandbox", "namespaces")
	repo := filepath.Join(root, "app")
	require.NoError(t, os.Rename(clustertest.GitRepo(t), repo))
	loot := filepath.Join(t.TempDir(), "loot")
	hunt := "{ echo \"me=$$\"; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; } > " + loot + " 2>&1; echo done > out.txt"
	e, log := run(t, c, repo, &commonv1.Task{Id: "1", Title: "hunt", File: "out.txt", Command: hunt})
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, e.GetStatus(), "%s", logText(log))
	got, err := os.ReadFile(loot)
	require.NoError(t, err)
	require.Contains(t, string(got), "me=1\n", "the task is the init of its own PID namespace")
	require.NotContains(t, string(got), "converge-agent", "the agent is invisible to the task")
	require.NotContains(t, string(got), "converge-scheduler")
}

// Finding 6 (agent): a task's processes, those it left in the background included, die with the
// agent when it is killed with SIGKILL, at once, not when a later agent starts: the Scheduler
// requeues the task, and a survivor would run it twice.
func TestFinding6KilledAgentTakesItsTaskProcessesWithIt(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	c := agentCluster(t, root)
	repo := filepath.Join(root, "app")
	require.NoError(t, os.Rename(clustertest.GitRepo(t), repo))
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	ctx := t.Context()
	sched := c.SchedulerClient(0)
	spec := &schedulerv1.TaskListSpec{Name: "killed", Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"},
		Tasks: []*commonv1.Task{{Id: "1", Title: "leaves a child", File: "out.txt",
			Command: "(while :; do echo x >> out.txt; sleep 0.05; done) & echo $! > " + pidFile + "; sleep 600"}}}
	tl, err := sched.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0)}})
	require.NoError(t, err)
	var child int
	require.True(t, clustertest.Eventually(time.Minute, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}), "the task never started:\n%s", c.Agent("agent-01").Tail(4096))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	require.NoError(t, syscall.Kill(child, 0), "the task's child runs")

	c.Agent("agent-01").Kill()
	require.True(t, clustertest.Eventually(10*time.Second, func() bool { return !running(child) }),
		"the task's child %d outlives the killed agent", child)
	_, err = sched.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: ex.GetExecution().GetId(), Reason: "test over"})
	require.NoError(t, err)
}

// running reports whether pid runs (a zombie does not).
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || !strings.Contains(string(stat), ") Z ")
}
