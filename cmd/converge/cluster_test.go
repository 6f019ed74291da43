package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// A production-shaped deployment on this machine: every service its own process on real
// Postgres and Redis, two Scheduler replicas and three agent processes.

// cluster is the running deployment.
type cluster struct {
	t          *testing.T
	schedulers []string // addresses
	registry   string
	env        []string
	agentArgs  []string
	mu         sync.Mutex
	agents     map[string]*exec.Cmd // instance id → process
	agentOut   map[string]*process
	sched      schedulerv1.SchedulerServiceClient
	reg        registryv1.RegistryServiceClient
	workDir    string
}

// startKillable starts a binary that a test may kill -9; at the end a live one gets SIGINT.
func startKillable(t *testing.T, bin string, env []string, args ...string) (*exec.Cmd, *process) {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("%s did not stop within 30s of SIGINT:\n%s", bin, p.output())
		}
	})
	return p.cmd, p
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func newCluster(t *testing.T, agents int) *cluster {
	t.Helper()
	pg := dbtest.Postgres(t)
	work := t.TempDir()
	env := []string{"CONVERGE_POSTGRES_URL=" + pg, "CONVERGE_REDIS_URL=" + redisURL(), "CONVERGE_MIGRATE=true", "CONVERGE_LOG_LEVEL=debug"}
	c := &cluster{t: t, env: env, agents: map[string]*exec.Cmd{}, agentOut: map[string]*process{}, workDir: work}
	up := func(bin string, args ...string) string {
		addr := freeAddr(t)
		p := start(t, binary(t, bin), env, append([]string{"--listen", addr}, args...)...)
		waitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING)
		return addr
	}
	c.registry = up("converge-registry")
	knowledge := up("converge-knowledge")
	verifier := up("converge-verifier", "--allowed-root", work)
	for range 2 {
		c.schedulers = append(c.schedulers, up("converge-scheduler", "--verifier", verifier, "--registry", c.registry, "--work-dir", work))
	}
	c.sched = schedulerv1.NewSchedulerServiceClient(dial(t, c.schedulers[0]))
	c.reg = registryv1.NewRegistryServiceClient(dial(t, c.registry))
	c.agentArgs = []string{"--registry", c.registry, "--knowledge", knowledge}
	for i := range agents {
		c.addAgent(fmt.Sprintf("agent-%d", i+1), c.schedulers[i%2])
	}
	return c
}

// addAgent starts an agent process talking to scheduler.
func (c *cluster) addAgent(id, scheduler string) {
	c.t.Helper()
	args := append([]string{"--listen", freeAddr(c.t), "--scheduler", scheduler, "--instance-id", id,
		"--data-dir", filepath.Join(c.workDir, "agents", id)}, c.agentArgs...)
	cmd, p := startKillable(c.t, binary(c.t, "converge-agent"), c.env, args...)
	c.mu.Lock()
	c.agents[id], c.agentOut[id] = cmd, p
	c.mu.Unlock()
}

// kill sends SIGKILL to an agent.
func (c *cluster) kill(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NoError(c.t, c.agents[id].Process.Signal(syscall.SIGKILL))
}

// originRepo makes a repository with one commit to build in.
func originRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	run("init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# built by converge\n"), 0o644))
	run("add", "README.md")
	run("commit", "-q", "-m", "initial")
	return dir
}

// layered is n tasks in layers of ten: task i writes out/i.txt and depends on i-10.
func layered(name, repo string, n int, sleep string) *schedulerv1.TaskListSpec {
	spec := &schedulerv1.TaskListSpec{Name: name, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"},
		DoneCriteria: fmt.Sprintf("## F1: every file is there\nTag: AUTO_VERIFY\n```check\ncommand:\n  shell: test \"$(ls out | wc -l)\" -eq %d\n```\n", n)}
	for i := range n {
		t := &commonv1.Task{Id: fmt.Sprintf("t%02d", i), Title: fmt.Sprintf("write out/%02d.txt", i), File: fmt.Sprintf("out/%02d.txt", i),
			Action:     commonv1.TaskAction_TASK_ACTION_CREATE,
			Command:    fmt.Sprintf("mkdir -p out && sleep %s && echo %d > out/%02d.txt", sleep, i, i),
			Validation: &commonv1.TaskValidation{Command: fmt.Sprintf("test -s out/%02d.txt", i)}}
		if i >= 10 {
			t.DependsOn = []string{fmt.Sprintf("t%02d", i-10)}
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return spec
}

func (c *cluster) run(spec *schedulerv1.TaskListSpec, heartbeat time.Duration) *schedulerv1.Execution {
	c.t.Helper()
	tl, err := c.sched.CreateTaskList(c.t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(c.t, err)
	res, err := c.sched.StartExecution(c.t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: 10, AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(heartbeat)}}})
	require.NoError(c.t, err)
	return res.GetExecution()
}

func (c *cluster) execution(id string) *schedulerv1.Execution {
	c.t.Helper()
	res, err := c.sched.GetExecution(c.t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(c.t, err)
	return res.GetExecution()
}

func (c *cluster) waitEnded(id string, timeout time.Duration) *schedulerv1.Execution {
	c.t.Helper()
	var e *schedulerv1.Execution
	ok := assertEventually(timeout, func() bool {
		e = c.execution(id)
		return e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED ||
			e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED ||
			e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED
	})
	if !ok {
		c.mu.Lock()
		for id, p := range c.agentOut {
			c.t.Logf("agent %s output:\n%s", id, tailLines(p.output(), 40))
		}
		c.mu.Unlock()
	}
	require.True(c.t, ok, "execution %s did not end: %v", id, e)
	return e
}

func (c *cluster) assignments(id string, statuses ...schedulerv1.AssignmentStatus) []*schedulerv1.Assignment {
	c.t.Helper()
	res, err := c.sched.ListAssignments(c.t.Context(), &schedulerv1.ListAssignmentsRequest{ExecutionId: id, Statuses: statuses, PageSize: 1000})
	require.NoError(c.t, err)
	return res.GetAssignments()
}

func (c *cluster) locksHeld(prefix string) []*registryv1.Lock {
	c.t.Helper()
	res, err := c.reg.ListLocks(c.t.Context(), &registryv1.ListLocksRequest{Prefix: prefix})
	require.NoError(c.t, err)
	return res.GetLocks()
}

func (c *cluster) log(id string, types ...commonv1.EventType) []*commonv1.LogEntry {
	c.t.Helper()
	var out []*commonv1.LogEntry
	after := int64(0)
	for {
		res, err := c.sched.GetExecutionLog(c.t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: id, AfterSeq: after, Limit: 500, EventTypes: types})
		require.NoError(c.t, err)
		out = append(out, res.GetEntries()...)
		if !res.GetHasMore() {
			return out
		}
		after = res.GetEntries()[len(res.GetEntries())-1].GetSeq()
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// gitOut runs git in dir and returns its output.
func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// A 50-task list converges on two Scheduler replicas and three agents while one agent is
// killed -9 mid-task: its task is requeued, and every task is committed exactly once, in
// dependency order, on the run branch. No lock is left held.
func TestClusterConvergesThroughAnAgentKill(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	repo := originRepo(t)
	e := c.run(layered("fifty", repo, 50, "0.3"), 500*time.Millisecond)

	// Kill -9 an agent while it holds a running task.
	var victim string
	require.True(t, assertEventually(60*time.Second, func() bool {
		for _, a := range c.assignments(e.GetId(), schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING) {
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && c.execution(e.GetId()).GetCompletedTasks() >= 5 {
				victim = a.GetInstanceId()
				return true
			}
		}
		return false
	}), "no agent ran a task")
	killedAt := time.Now()
	c.kill(victim)

	e = c.waitEnded(e.GetId(), 4*time.Minute)
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), "%s", e.GetStatusMessage())
	require.Equal(t, int32(50), e.GetCompletedTasks())
	expired := c.log(e.GetId(), commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED)
	require.NotEmpty(t, expired, "the killed agent's lease expired")
	require.Equal(t, victim, expired[0].GetInstanceId())
	t.Logf("agent %s killed; its lease expired %.2fs later (lease 1.5 s)", victim, expired[0].GetTime().AsTime().Sub(killedAt).Seconds())

	// Every task exactly once on the run branch, each after the task it depends on.
	subjects := strings.Split(gitOut(t, repo, "log", "--reverse", "--format=%s", "main.."+e.GetRunBranch()), "\n")
	require.Len(t, subjects, 50)
	pos := map[string]int{}
	for i, s := range subjects {
		_, dup := pos[s]
		require.False(t, dup, "committed twice: %s", s)
		pos[s] = i
	}
	for i := 10; i < 50; i++ {
		require.Less(t, pos[fmt.Sprintf("Task t%02d: write out/%02d.txt", i-10, i-10)], pos[fmt.Sprintf("Task t%02d: write out/%02d.txt", i, i)])
	}
	require.Empty(t, c.locksHeld(e.GetId()), "no lock is left held")
	log := c.log(e.GetId())
	for i, en := range log {
		require.Equal(t, int64(i+1), en.GetSeq(), "the log has no gap")
	}
}

// A paused run hands out nothing until resumed; a cancelled run stops its agents within about one
// heartbeat interval and leaves no lock held.
func TestClusterPauseAndCancel(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	repo := originRepo(t)
	e := c.run(layered("paused", repo, 10, "0.1"), 500*time.Millisecond)
	_, err := c.sched.PauseExecution(t.Context(), &schedulerv1.PauseExecutionRequest{ExecutionId: e.GetId(), Reason: "test"})
	require.NoError(t, err)
	granted := len(c.log(e.GetId(), commonv1.EventType_EVENT_TYPE_LEASE_GRANTED))
	time.Sleep(2 * time.Second) //nolint:forbidigo // nothing may happen while paused: that takes time to observe
	require.Equal(t, granted, len(c.log(e.GetId(), commonv1.EventType_EVENT_TYPE_LEASE_GRANTED)), "a paused run claims nothing")
	_, err = c.sched.ResumeExecution(t.Context(), &schedulerv1.ResumeExecutionRequest{ExecutionId: e.GetId()})
	require.NoError(t, err)
	e = c.waitEnded(e.GetId(), 2*time.Minute)
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), "%s", e.GetStatusMessage())

	// Slow tasks: cancel while they run.
	slow := c.run(layered("slow", repo, 4, "60"), time.Second)
	require.True(t, assertEventually(30*time.Second, func() bool {
		return len(c.assignments(slow.GetId(), schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING)) == 2
	}))
	require.NotEmpty(t, c.locksHeld(slow.GetId()))
	cancelled := time.Now()
	_, err = c.sched.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: slow.GetId(), Reason: "test"})
	require.NoError(t, err)
	require.True(t, assertEventually(10*time.Second, func() bool {
		return len(c.assignments(slow.GetId(), schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED)) == 0 &&
			len(c.locksHeld(slow.GetId())) == 0
	}), "agents stopped and released their locks")
	took := time.Since(cancelled)
	t.Logf("cancel → agents stopped, locks released: %s (heartbeat 1 s)", took)
	require.Less(t, took, 3*time.Second, "within one heartbeat interval (1 s) plus the round trips")
	ended := c.execution(slow.GetId())
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, ended.GetStatus())
	ids := []string{}
	for _, a := range c.assignments(slow.GetId()) {
		ids = append(ids, a.GetStatus().String())
	}
	sort.Strings(ids)
	t.Logf("assignments after cancel: %v", ids)
}
