package main

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// A production-shaped deployment on this machine (platform/clustertest): every service its own
// process on real Postgres and Redis, two Scheduler replicas and a few agent processes.

// cluster is the running deployment with clients of its first Scheduler and of the Registry.
type cluster struct {
	*clustertest.Cluster
	t     *testing.T
	sched schedulerv1.SchedulerServiceClient
	reg   registryv1.RegistryServiceClient
}

func newCluster(t *testing.T, agents int) *cluster {
	t.Helper()
	dbtest.SkipUnit(t, "Postgres and Redis")
	c := clustertest.Start(t, clustertest.Options{Schedulers: 2, Agents: agents, LogLevel: "debug"})
	return &cluster{Cluster: c, t: t, sched: c.SchedulerClient(0), reg: c.RegistryClient()}
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
	ok := clustertest.Eventually(timeout, func() bool {
		e = c.execution(id)
		return clustertest.Ended(e)
	})
	if !ok {
		c.Dump(40)
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
	entries, err := clustertest.ExecutionLog(c.t.Context(), c.sched, id, types...)
	require.NoError(c.t, err)
	return entries
}

// A 50-task list converges on two Scheduler replicas and three agents while one agent is
// killed -9 mid-task: its task is requeued, and every task is committed exactly once, in
// dependency order, on the run branch. No lock is left held.
func TestClusterConvergesThroughAnAgentKill(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3)
	repo := clustertest.GitRepo(t)
	e := c.run(clustertest.Layered("fifty", repo, 50, "0.3"), 500*time.Millisecond)

	// Kill -9 an agent while it holds a running task.
	var victim string
	require.True(t, clustertest.Eventually(60*time.Second, func() bool {
		for _, a := range c.assignments(e.GetId(), schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING) {
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && c.execution(e.GetId()).GetCompletedTasks() >= 5 {
				victim = a.GetInstanceId()
				return true
			}
		}
		return false
	}), "no agent ran a task")
	killedAt := time.Now()
	c.Agent(victim).Kill()

	e = c.waitEnded(e.GetId(), 4*time.Minute)
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), "%s", e.GetStatusMessage())
	require.Equal(t, int32(50), e.GetCompletedTasks())
	expired := c.log(e.GetId(), commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED)
	require.NotEmpty(t, expired, "the killed agent's lease expired")
	require.Equal(t, victim, expired[0].GetInstanceId())
	t.Logf("agent %s killed; its lease expired %.2fs later (lease 1.5 s)", victim, expired[0].GetTime().AsTime().Sub(killedAt).Seconds())

	// Every task exactly once on the run branch, each after the task it depends on.
	subjects := strings.Split(clustertest.Git(t, repo, "log", "--reverse", "--format=%s", "main.."+e.GetRunBranch()), "\n")
	require.Len(t, subjects, 50)
	pos := map[string]int{}
	for i, s := range subjects {
		_, dup := pos[s]
		require.False(t, dup, "committed twice: %s", s)
		pos[s] = i
	}
	for i := 10; i < 50; i++ {
		require.Less(t, pos[clustertest.LayeredCommit(i-10)], pos[clustertest.LayeredCommit(i)])
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
	repo := clustertest.GitRepo(t)
	e := c.run(clustertest.Layered("paused", repo, 10, "0.1"), 500*time.Millisecond)
	_, err := c.sched.PauseExecution(t.Context(), &schedulerv1.PauseExecutionRequest{ExecutionId: e.GetId(), Reason: "test"})
	require.NoError(t, err)
	granted := len(c.log(e.GetId(), commonv1.EventType_EVENT_TYPE_LEASE_GRANTED))
	time.Sleep(2 * time.Second) //nolint:forbidigo // the behaviour under test: a paused run claims nothing while time passes
	require.Equal(t, granted, len(c.log(e.GetId(), commonv1.EventType_EVENT_TYPE_LEASE_GRANTED)), "a paused run claims nothing")
	_, err = c.sched.ResumeExecution(t.Context(), &schedulerv1.ResumeExecutionRequest{ExecutionId: e.GetId()})
	require.NoError(t, err)
	e = c.waitEnded(e.GetId(), 2*time.Minute)
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e.GetOutcome(), "%s", e.GetStatusMessage())

	// Slow tasks: cancel while they run.
	slow := c.run(clustertest.Layered("slow", repo, 4, "60"), time.Second)
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		return len(c.assignments(slow.GetId(), schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING)) == 2
	}))
	require.NotEmpty(t, c.locksHeld(slow.GetId()))
	cancelled := time.Now()
	_, err = c.sched.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: slow.GetId(), Reason: "test"})
	require.NoError(t, err)
	require.True(t, clustertest.Eventually(10*time.Second, func() bool {
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
