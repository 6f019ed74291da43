package main

// End-to-end tests of the Agent's failure paths (issue 12): a failing task through `converge
// run`, discoveries reaching a later task's prompt through the real Knowledge service, an agent
// binary that cannot bind, an agent binary killed with SIGKILL mid-task, and an agent process
// replaced by a newer one of the same instance id.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// agentShq quotes s for sh.
func agentShq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// agentFileLines answers the lines of a file (none when it does not exist).
func agentFileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// agentPidAlive reports whether pid runs (a zombie waiting to be reaped does not).
func agentPidAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || !strings.Contains(string(stat), ") Z ")
}

// Issue 12 defect 1, end to end: with `converge run` (max_retries 3 by default), a task whose
// command always fails runs exactly 4 times and is reported FAILED with its command's error —
// not "cancelled", requeued and run 16 times.
func TestAgentFailingTaskRunsMaxRetriesPlusOneTimes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	tasks := filepath.Join(dir, "tasks.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# Tasks: fails\n\n### Task 1: Always fails\n\n**Command:** `"+
		"echo run >> "+count+"; echo 'compile error: x undefined' >&2; exit 1`\n"), 0o644))
	var out, errOut bytes.Buffer
	err := runRun(context.Background(), runOptions{TasksFile: tasks, Repo: clustertest.GitRepo(t), Agents: 1, JSON: true},
		runEnv{stdout: &out, stderr: &errOut, rerun: "converge run"})
	var ee exitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", errOut.String())
	require.Equal(t, exitFailure, ee.code)
	var sum struct {
		Converged bool          `json:"converged"`
		Tasks     []summaryTask `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &sum), out.String())
	require.False(t, sum.Converged)
	require.Len(t, sum.Tasks, 1)
	task := sum.Tasks[0]
	require.Equal(t, "failed", task.Status, "%+v", task)
	require.Equal(t, int32(4), task.Tries, "%+v", task)
	require.Equal(t, int32(1), task.Attempt, "one attempt: a FAILED task is not requeued")
	require.Contains(t, task.Error, "exit status 1")
	require.Contains(t, task.Error, "compile error: x undefined", "the command's own error")
	require.NotContains(t, task.Error, "cancel")
	require.Len(t, agentFileLines(t, count), 4, "max_retries 3: the command ran exactly 4 times")
	if logFile := agentSuiteLog(out.String() + errOut.String()); logFile != "" {
		_ = os.Remove(logFile)
	}
}

// agentSuiteLog answers the suite log a run that did not converge names, if any.
func agentSuiteLog(s string) string {
	const marker = "The suite's own log: "
	i := strings.Index(s, marker)
	if i < 0 {
		return ""
	}
	rest := s[i+len(marker):]
	if j := strings.IndexAny(rest, " \n\""); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// Issue 12 defect 11, end to end: task 1 prints a gotcha about notes.txt; Knowledge records it
// (the agent's tag used to break Knowledge's tag pattern, and every discovery was dropped); task
// 2, which depends on task 1 and touches notes.txt, gets it in its prompt. The executor is an
// agent CLI: a shell script that keeps the prompt it is given (written whole, then renamed: the
// test waits for the file to exist, and a file that `cat >` is still writing exists already).
func TestAgentGotchaReachesALaterTaskPrompt(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents = true, 1 })
	dir := t.TempDir()
	prompts := filepath.Join(dir, "prompts")
	require.NoError(t, os.MkdirAll(prompts, 0o755))
	script := filepath.Join(dir, "agent.sh")
	require.NoError(t, os.WriteFile(script, []byte(`#!/bin/sh
cat > `+agentShq(prompts)+`/"$CONVERGE_TASK_ID.part" && mv `+agentShq(prompts)+`/"$CONVERGE_TASK_ID.part" `+agentShq(prompts)+`/"$CONVERGE_TASK_ID.md"
echo "task $CONVERGE_TASK_ID" >> notes.txt
if [ "$CONVERGE_TASK_ID" = 1 ]; then
  echo "GOTCHA: notes.txt must end with a newline or the parser drops its last line"
fi
`), 0o755))
	sched := schedulerv1.NewSchedulerServiceClient(b.conn)
	spec := &schedulerv1.TaskListSpec{Name: "gotcha", Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: clustertest.GitRepo(t)}, BaseRef: "main"},
		Tasks: []*commonv1.Task{
			{Id: "1", Title: "first notes", File: "notes.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE},
			{Id: "2", Title: "more notes", File: "notes.txt", Action: commonv1.TaskAction_TASK_ACTION_UPDATE, DependsOn: []string{"1"}},
		}}
	tl, err := sched.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0), Executor: &commonv1.ExecutorSpec{
			Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{script}}}}}})
	require.NoError(t, err)
	id := ex.GetExecution().GetId()
	require.True(t, clustertest.Eventually(120*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(prompts, "2.md"))
		return err == nil
	}), "task 2 never ran: %v", agentExecution(t, sched, id))
	first, err := os.ReadFile(filepath.Join(prompts, "1.md"))
	require.NoError(t, err)
	require.NotContains(t, string(first), "must end with a newline", "task 1 knew nothing yet")
	second, err := os.ReadFile(filepath.Join(prompts, "2.md"))
	require.NoError(t, err)
	require.Contains(t, string(second), "notes.txt must end with a newline or the parser drops its last line",
		"task 2's prompt carries task 1's gotcha:\n%s", second)
}

func agentExecution(t *testing.T, sched schedulerv1.SchedulerServiceClient, id string) *schedulerv1.Execution {
	t.Helper()
	res, err := sched.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	return res.GetExecution()
}

// startAgentProc runs the agent binary (platform/clustertest) until it exits or the test ends
// (then SIGTERM).
func startAgentProc(t *testing.T, args ...string) *clustertest.Process {
	t.Helper()
	return clustertest.StartProcess(t, clustertest.ProcessSpec{Name: "converge-agent", Bin: clustertest.Binary(t, "converge-agent"), Args: args})
}

// agentArgs are the flags of an agent binary against a `converge dev` suite.
func agentArgs(devAddr, listen, id, dataDir string) []string {
	return []string{"--listen", listen, "--scheduler", devAddr, "--registry", devAddr, "--knowledge", devAddr,
		"--instance-id", id, "--data-dir", dataDir, "--log-level", "debug", "--allowed-root", os.TempDir()}
}

// Issue 12 defect 7: an agent whose port is taken exits non-zero before it registers: no ghost
// agent is left in the Registry.
func TestAgentOnATakenPortRegistersNothing(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cmd := exec.Command(clustertest.Binary(t, "converge-agent"), agentArgs(b.addr, taken.Addr().String(), "agent-clash", t.TempDir())...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the agent must fail:\n%s", out)
	require.NotZero(t, exit.ExitCode())
	require.Contains(t, string(out), "listen on "+taken.Addr().String())
	require.Contains(t, string(out), "nothing was registered")
	reg := registryv1.NewRegistryServiceClient(b.conn)
	_, err = reg.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: "agent-clash"})
	require.Equal(t, codes.NotFound, status.Code(err), "no agent record: %v", err)

	// A server that fails once the worker may have registered (its metrics port is taken)
	// leaves no live record either: none, or FAILED.
	metrics := startAgentProc(t, append(agentArgs(b.addr, "127.0.0.1:0", "agent-metrics", t.TempDir()), "--metrics-listen", taken.Addr().String())...)
	require.True(t, clustertest.Eventually(60*time.Second, metrics.Exited), "the agent must fail:\n%s", metrics.Output())
	require.NotZero(t, metrics.ExitCode(), "\n%s", metrics.Output())
	res, err := reg.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: "agent-metrics"})
	if status.Code(err) != codes.NotFound {
		require.NoError(t, err)
		require.Equal(t, commonv1.AgentStatus_AGENT_STATUS_FAILED, res.GetAgent().GetStatus(), "\n%s", metrics.Output())
	}
}

// --listen 127.0.0.1:0 picks a free port and logs it; a clean stop (SIGINT) leaves the agent's
// record COMPLETED.
func TestAgentListensOnAFreePortAndCompletesOnStop(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	p := startAgentProc(t, agentArgs(b.addr, "127.0.0.1:0", "agent-free", t.TempDir())...)
	reg := registryv1.NewRegistryServiceClient(b.conn)
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		res, err := reg.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: "agent-free"})
		return err == nil && res.GetAgent().GetStatus() == commonv1.AgentStatus_AGENT_STATUS_IDLE
	}), "the agent never went IDLE:\n%s", p.Output())
	require.Contains(t, p.Output(), "agent listening")
	require.NotContains(t, p.Output(), "addr=127.0.0.1:0 ", "the bound port is logged, not :0")
	require.NoError(t, p.Signal(os.Interrupt))
	require.True(t, clustertest.Eventually(30*time.Second, p.Exited), "the agent did not stop")
	require.Zero(t, p.ExitCode(), "\n%s", p.Output())
	res, err := reg.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: "agent-free"})
	require.NoError(t, err)
	require.Equal(t, commonv1.AgentStatus_AGENT_STATUS_COMPLETED, res.GetAgent().GetStatus(), "\n%s", p.Output())
}

// Issue 12 defect 8: an agent killed with SIGKILL mid-task leaves a child process writing into
// its worktree, and the worktree; a new agent started on the same data dir kills the child and
// removes the (clean) worktree.
func TestAgentRestartCleansUpAfterAKill(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	sched := schedulerv1.NewSchedulerServiceClient(b.conn)
	dir := t.TempDir()
	data := filepath.Join(dir, "agent-data")
	pidFile := filepath.Join(dir, "child.pid")
	spec := &schedulerv1.TaskListSpec{Name: "killed", Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: clustertest.GitRepo(t)}, BaseRef: "main"},
		Tasks: []*commonv1.Task{{Id: "1", Title: "leaves a child", File: "out.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE,
			Command: "(while :; do echo x >> out.txt; sleep 0.05; done) & echo $! > " + agentShq(pidFile) + "; sleep 600"}}}
	tl, err := sched.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0)}})
	require.NoError(t, err)
	id := ex.GetExecution().GetId()

	p := startAgentProc(t, agentArgs(b.addr, "127.0.0.1:0", "agent-killed", data)...)
	require.True(t, clustertest.Eventually(60*time.Second, func() bool { _, err := os.Stat(pidFile); return err == nil }),
		"the task never started:\n%s", p.Output())
	var child int
	require.True(t, clustertest.Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}))
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	worktrees, err := os.ReadDir(filepath.Join(data, "worktrees"))
	require.NoError(t, err)
	require.Len(t, worktrees, 1)
	worktree := filepath.Join(data, "worktrees", worktrees[0].Name())

	// The agent's watchdog would kill the child as soon as the agent dies (security/
	// TestFinding6KilledAgentTakesItsTaskProcessesWithIt): killed first, as when the whole host
	// side goes (an OOM kill of both), it leaves the child to the next agent.
	watchdogs, err := filepath.Glob(filepath.Join(data, "sessions", "*", "watchdog"))
	require.NoError(t, err)
	require.Len(t, watchdogs, 1)
	wb, err := os.ReadFile(watchdogs[0])
	require.NoError(t, err)
	watchdog, err := strconv.Atoi(string(wb))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(watchdog, syscall.SIGKILL))
	p.Kill()
	require.True(t, clustertest.Eventually(10*time.Second, p.Exited))
	require.True(t, agentPidAlive(child), "the killed agent's child outlives it")
	require.DirExists(t, worktree)
	// Nothing more to claim for the next agent.
	_, err = sched.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: id, Reason: "test"})
	require.NoError(t, err)

	p2 := startAgentProc(t, agentArgs(b.addr, "127.0.0.1:0", "agent-killed", data)...)
	require.True(t, clustertest.Eventually(60*time.Second, func() bool { return !agentPidAlive(child) }),
		"the new agent did not kill the child:\n%s", p2.Output())
	require.True(t, clustertest.Eventually(60*time.Second, func() bool { _, err := os.Stat(worktree); return os.IsNotExist(err) }),
		"the new agent did not remove the worktree:\n%s", p2.Output())
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		return strings.Contains(p2.Output(), "cleaned up after earlier processes on the data dir")
	}), "the new agent does not say what it cleaned up:\n%s", p2.Output())
}

// Issue 12 defect 4: an agent process whose instance id a newer process registered (a new
// session) stops: it exits non-zero and says why. Needs a Registry that tracks sessions.
func TestAgentReplacedByANewerProcessExits(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	reg := registryv1.NewRegistryServiceClient(b.conn)
	p1 := startAgentProc(t, agentArgs(b.addr, "127.0.0.1:0", "agent-twice", t.TempDir())...)
	var session string
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		res, err := reg.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: "agent-twice"})
		session = res.GetAgent().GetSessionId()
		return err == nil && res.GetAgent().GetStatus() == commonv1.AgentStatus_AGENT_STATUS_IDLE
	}), "the agent never went IDLE:\n%s", p1.Output())
	require.NotEmpty(t, session, "the Registry keeps the agent's session")
	// The agent's own heartbeat interval is 10 s: the replaced process learns it on its next one.
	p2 := startAgentProc(t, agentArgs(b.addr, "127.0.0.1:0", "agent-twice", t.TempDir())...)
	require.True(t, clustertest.Eventually(60*time.Second, p1.Exited),
		"the replaced agent did not exit:\n%s\nnewer:\n%s", p1.Output(), p2.Output())
	require.NotZero(t, p1.ExitCode(), "\n%s", p1.Output())
	require.Contains(t, p1.Output(), "session replaced")
}
