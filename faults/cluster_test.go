package faults

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// The deployment is platform/clustertest's (every service its own process, two Scheduler
// replicas, N agents) on the suite's private Postgres and a private Redis per scenario, with
// fault proxies on the links the scenarios break: agent → Scheduler (one per replica), Scheduler
// → Postgres, and the suite's own event-stream reader → Scheduler.

// clusterOptions shape a scenario's deployment; the zero value is the suite's usual one.
type clusterOptions struct {
	// heartbeat is the execution's agent heartbeat (a lease is three); 0 = the agents' default
	// (30 s).
	heartbeat time.Duration
	// stale is the stale window given to the Registry and the Scheduler (--stale-after); 0 = their
	// defaults.
	stale time.Duration
	// agents overrides cfg.agents when > 0.
	agents int
	// refusingVerifier starts the Verifier with no --allowed-root: it refuses the local
	// directory the Scheduler hands it.
	refusingVerifier bool
	// execOptions adjusts the execution's options.
	execOptions func(*schedulerv1.ExecutionOptions)
	// prefetch runs every agent with --prefetch: each holds one assignment ahead of the one it
	// runs, so a fault takes out two leases at once.
	prefetch bool
}

// cluster is the running deployment of one scenario.
type cluster struct {
	*clustertest.Cluster
	t    *testing.T
	cfg  config
	opts clusterOptions

	watchProxy [2]*clustertest.Proxy // event-stream reader → Scheduler i
	clients    []schedulerv1.SchedulerServiceClient
	reg        registryv1.RegistryServiceClient

	mu       sync.Mutex
	dead     map[string]bool // agents killed for good
	replaced int
}

// registryHelp is converge-registry --help, read once (which flags this build has).
var (
	registryHelpOnce sync.Once
	registryHelp     string
)

func registryHas(t *testing.T, flag string) bool {
	registryHelpOnce.Do(func() {
		out, _ := exec.Command(clustertest.Binary(t, "converge-registry"), "--help").CombinedOutput()
		registryHelp = string(out)
	})
	return strings.Contains(registryHelp, flag+" ")
}

// newCluster starts the deployment on pg (a database of its own, named db) and a fresh Redis.
func newCluster(t *testing.T, cfg config, pg *clustertest.Postgres, db string, opts clusterOptions) *cluster {
	t.Helper()
	if opts.agents > 0 {
		cfg.agents = opts.agents
	}
	o := clustertest.Options{Schedulers: 2, Agents: cfg.agents, Postgres: pg, Database: db, Redis: clustertest.StartRedis(t),
		ProxySchedulerPostgres: true, ProxyAgents: true, LogDir: filepath.Join(resultsDir(t), db), VerifierNoAllowedRoot: opts.refusingVerifier}
	if opts.prefetch {
		o.AgentArgs = append(o.AgentArgs, "--prefetch")
	}
	if opts.stale > 0 {
		// The Registry's stale window (STALE status; GONE after a multiple of it), where this
		// build has the flag.
		if registryHas(t, "--stale-after") {
			o.RegistryArgs = append(o.RegistryArgs, "--stale-after", opts.stale.String())
		} else {
			t.Logf("converge-registry has no --stale-after: the Registry keeps its default stale window")
		}
		o.SchedulerArgs = append(o.SchedulerArgs, "--stale-after", opts.stale.String())
	}
	c := &cluster{Cluster: clustertest.Start(t, o), t: t, cfg: cfg, opts: opts, dead: map[string]bool{}}
	for i := range c.Schedulers() {
		c.watchProxy[i] = clustertest.StartProxy(t, c.SchedulerAddr(i))
		c.clients = append(c.clients, c.SchedulerClient(i))
	}
	c.reg = c.RegistryClient()
	return c
}

// agentProc answers a live agent's process (nil for one killed for good).
func (c *cluster) agentProc(id string) *clustertest.Process {
	c.mu.Lock()
	dead := c.dead[id]
	c.mu.Unlock()
	if dead {
		return nil
	}
	return c.Agent(id)
}

// killAgent kill -9s an agent and starts a replacement on the same Scheduler replica.
func (c *cluster) killAgent(id string) {
	c.mu.Lock()
	c.dead[id] = true
	c.replaced++
	c.mu.Unlock()
	c.Agent(id).Kill()
	c.AddAgent("", c.AgentScheduler(id))
}

// restartAgent kill -9s an agent and at once starts it again under the same instance id (a new
// process, so a new session), with the same data dir, on the same replica; it answers when the
// kill happened.
func (c *cluster) restartAgent(id string, n int) time.Time {
	p := c.Agent(id)
	at := time.Now()
	p.Kill()
	p.Restart(c.t)
	c.t.Logf("agent %s restarted (%d)", id, n)
	return at
}

// call runs fn against a Scheduler replica, retrying on errors (replicas die, Postgres
// restarts) for up to a minute, alternating replicas.
func (c *cluster) call(fn func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error) {
	c.t.Helper()
	var err error
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = fn(ctx, c.clients[i%len(c.clients)])
		cancel()
		if err == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(c.t, err, "Scheduler calls kept failing for 90 s")
}

func (c *cluster) execution(id string) *schedulerv1.Execution {
	var e *schedulerv1.Execution
	c.call(func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error {
		res, err := s.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		e = res.GetExecution()
		return err
	})
	return e
}

func (c *cluster) assignments(id string, statuses ...schedulerv1.AssignmentStatus) []*schedulerv1.Assignment {
	var out []*schedulerv1.Assignment
	c.call(func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error {
		res, err := s.ListAssignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: id, Statuses: statuses, PageSize: 1000})
		out = res.GetAssignments()
		return err
	})
	return out
}

// log reads the whole execution log by GetExecutionLog pages (cursor = last seq of a page).
func (c *cluster) log(id string) []*commonv1.LogEntry {
	var out []*commonv1.LogEntry
	after := int64(0)
	for range 100000 {
		var res *schedulerv1.GetExecutionLogResponse
		c.call(func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error {
			var err error
			res, err = s.GetExecutionLog(ctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: id, AfterSeq: after, Limit: 500})
			return err
		})
		out = append(out, res.GetEntries()...)
		if !res.GetHasMore() || len(res.GetEntries()) == 0 {
			return out
		}
		after = res.GetEntries()[len(res.GetEntries())-1].GetSeq()
	}
	return out
}

func (c *cluster) locksHeld(prefix string) []*registryv1.Lock {
	c.t.Helper()
	var locks []*registryv1.Lock
	ok := clustertest.Eventually(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := c.reg.ListLocks(ctx, &registryv1.ListLocksRequest{Prefix: prefix, PageSize: 1000})
		locks = res.GetLocks()
		return err == nil
	})
	require.True(c.t, ok, "ListLocks kept failing")
	return locks
}

// start creates the task list and starts it.
func (c *cluster) start(spec *schedulerv1.TaskListSpec) *schedulerv1.Execution {
	c.t.Helper()
	var tl *schedulerv1.TaskList
	c.call(func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error {
		res, err := s.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
		tl = res.GetTaskList()
		return err
	})
	var e *schedulerv1.Execution
	c.call(func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error {
		// Eager dispatch, the default, named: with waves of 5 a layer of ten is two waves, and a
		// task of a layer's first wave may start while the previous layer's second wave runs (its
		// dependency, ten tasks back, is in the previous layer's first wave). So every fault meets
		// early leases too.
		opts := &schedulerv1.ExecutionOptions{MaxParallel: 5, Dispatch: schedulerv1.DispatchMode_DISPATCH_MODE_EAGER}
		if hb := c.heartbeat(); hb > 0 {
			opts.AgentConfig = &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(hb)}
		}
		if c.opts.execOptions != nil {
			c.opts.execOptions(opts)
		}
		res, err := s.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetId(), Options: opts})
		e = res.GetExecution()
		return err
	})
	return e
}

// heartbeat is the execution's agent heartbeat: the scenario's production-like one, else the
// suite's short one; 0 = the agents' default.
func (c *cluster) heartbeat() time.Duration {
	if c.opts.heartbeat > 0 || c.opts.stale > 0 {
		return c.opts.heartbeat
	}
	return c.cfg.heartbeat
}

// waitProgress waits until the execution completed at least n tasks (or ended), bounded.
func (c *cluster) waitProgress(id string, n int32, timeout time.Duration) *schedulerv1.Execution {
	var e *schedulerv1.Execution
	clustertest.Eventually(timeout, func() bool {
		e = c.execution(id)
		return e.GetCompletedTasks() >= n || clustertest.Ended(e)
	})
	return e
}

func (c *cluster) waitEnded(id string, timeout time.Duration) *schedulerv1.Execution {
	var e *schedulerv1.Execution
	ok := clustertest.Eventually(timeout, func() bool {
		e = c.execution(id)
		return clustertest.Ended(e)
	})
	if !ok {
		c.Dump(30)
	}
	require.True(c.t, ok, "execution %s did not end within %s: %v", id, timeout, e)
	return e
}

// holders answers the agents holding a task assignment now, with the assignments.
func (c *cluster) holders(id string) map[string]*schedulerv1.Assignment {
	out := map[string]*schedulerv1.Assignment{}
	for _, a := range c.assignments(id, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED) {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && c.agentProc(a.GetInstanceId()) != nil {
			out[a.GetInstanceId()] = a
		}
	}
	return out
}

// finished reports whether assignment a ended (completed, failed, skipped or cancelled) under the
// fencing token it was picked with: its holder finished it.
func (c *cluster) finished(id string, a *schedulerv1.Assignment) bool {
	for _, x := range c.assignments(id) {
		if x.GetId() == a.GetId() {
			switch x.GetStatus() {
			case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED,
				schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED:
				return x.GetFencingToken() == a.GetFencingToken()
			}
			return false
		}
	}
	return false
}

// pickHolder waits (bounded) for an agent holding a task and answers one at random.
func (c *cluster) pickHolder(id string, timeout time.Duration) (string, *schedulerv1.Assignment) {
	var ids []string
	var hs map[string]*schedulerv1.Assignment
	clustertest.Eventually(timeout, func() bool {
		hs = c.holders(id)
		ids = ids[:0]
		for k := range hs {
			ids = append(ids, k)
		}
		return len(ids) > 0
	})
	if len(ids) == 0 {
		return "", nil
	}
	v := ids[rand.IntN(len(ids))]
	return v, hs[v]
}

// watcher reads the execution's event stream with WatchExecution through the watch proxies,
// resuming from its cursor (the last seq received) after every disconnect, until the stream
// ends with the execution.
type watcher struct {
	mu          sync.Mutex
	seqs        []int64
	disconnects int
	done        chan struct{}
	err         error
}

func (c *cluster) watch(ctx context.Context, id string) *watcher {
	w := &watcher{done: make(chan struct{})}
	conns := [2]schedulerv1.SchedulerServiceClient{
		schedulerv1.NewSchedulerServiceClient(clustertest.Dial(c.t, c.watchProxy[0].Addr)),
		schedulerv1.NewSchedulerServiceClient(clustertest.Dial(c.t, c.watchProxy[1].Addr)),
	}
	go func() {
		defer close(w.done)
		cursor := int64(0)
		for i := 0; ; i++ {
			if ctx.Err() != nil {
				w.err = ctx.Err()
				return
			}
			// Every other stream takes its entries in batches (max_entries_per_message), so resuming
			// is checked both ways.
			stream, err := conns[i%2].WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: cursor,
				MaxEntriesPerMessage: int32(i%2) * 50})
			if err == nil {
				for {
					var res *schedulerv1.WatchExecutionResponse
					res, err = stream.Recv()
					if err != nil {
						break
					}
					entries := res.GetEntries()
					if en := res.GetEntry(); en != nil {
						entries = append(entries, en)
					}
					for _, en := range entries {
						w.mu.Lock()
						w.seqs = append(w.seqs, en.GetSeq())
						w.mu.Unlock()
						cursor = en.GetSeq()
					}
				}
			}
			if errors.Is(err, io.EOF) {
				return // the execution ended and every entry was sent
			}
			w.mu.Lock()
			w.disconnects++
			w.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return w
}

// gapsAndDups answers the seqs missing from 1..max and those received more than once.
func gapsAndDups(seqs []int64) (gaps, dups int) {
	seen := map[int64]int{}
	var hi int64
	for _, s := range seqs {
		seen[s]++
		hi = max(hi, s)
	}
	for s := int64(1); s <= hi; s++ {
		switch n := seen[s]; {
		case n == 0:
			gaps++
		case n > 1:
			dups += n - 1
		}
	}
	return gaps, dups
}
