package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
)

// The deployment of cmd/converge's cluster tests (every service its own process, two Scheduler
// replicas, N agents), adapted: private Postgres and Redis, and fault proxies on the links the
// scenarios break — agent → Scheduler (one per replica), Scheduler → Postgres, and the suite's
// own event-stream reader → Scheduler.

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binary answers the path of converge-<svc>, built once (or taken from $CONVERGE_FAULTS_BIN).
func binary(t *testing.T, svc string) string {
	t.Helper()
	binOnce.Do(func() {
		if d := os.Getenv("CONVERGE_FAULTS_BIN"); d != "" {
			binDir = d
			return
		}
		binDir, binErr = os.MkdirTemp("", "converge-faults-bin-")
		if binErr != nil {
			return
		}
		for _, s := range []string{"scheduler", "registry", "knowledge", "verifier", "agent"} {
			out, err := exec.Command("go", "build", "-C", filepath.Join("..", "services", s), "-o", filepath.Join(binDir, "converge-"+s), "./cmd/converge-"+s).CombinedOutput()
			if err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", s, err, out)
				return
			}
		}
	})
	require.NoError(t, binErr)
	return filepath.Join(binDir, "converge-"+svc)
}

// proc is a started binary whose output goes to a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startProc(t *testing.T, logDir, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: filepath.Join(logDir, name+".log"), done: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); _ = f.Close(); close(p.done) }()
	return p
}

// stop: SIGCONT (a stopped one), SIGINT, then SIGKILL after 20 s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

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
}

// cluster is the running deployment of one scenario.
type cluster struct {
	t        *testing.T
	cfg      config
	opts     clusterOptions
	logDir   string
	workDir  string
	pg       *pgServer
	db       string // the scenario's database
	pgDirect string // URL straight to Postgres
	pgProxy  *Proxy // Schedulers → Postgres
	redis    *redisServer
	env      []string // every service's
	registry string
	know     string
	verifier string

	sched      [2]*proc
	schedAddr  [2]string
	schedEnv   []string
	schedArgs  []string
	agentProxy [2]*Proxy // agents → Scheduler i
	watchProxy [2]*Proxy // event-stream reader → Scheduler i
	clients    [2]schedulerv1.SchedulerServiceClient
	reg        registryv1.RegistryServiceClient

	mu       sync.Mutex
	procs    []*proc
	agents   map[string]*proc
	agentOf  map[string]int // instance → Scheduler index
	retired  []*proc        // killed agents, for their output
	nextID   int
	replaced int
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func healthy(addr string) bool {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

func (c *cluster) waitHealthy(p *proc, addr string) {
	c.t.Helper()
	require.True(c.t, eventually(60*time.Second, func() bool { return healthy(addr) }),
		"%s at %s never became SERVING:\n%s", p.name, addr, tail(p.output(), 40))
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// registryHelp is converge-registry --help, read once (which flags this build has).
var (
	registryHelpOnce sync.Once
	registryHelp     string
)

func registryHas(t *testing.T, flag string) bool {
	registryHelpOnce.Do(func() {
		out, _ := exec.Command(binary(t, "registry"), "--help").CombinedOutput()
		registryHelp = string(out)
	})
	return strings.Contains(registryHelp, flag+" ")
}

// newCluster starts the deployment on pg (a database of its own) and a fresh Redis.
func newCluster(t *testing.T, cfg config, pg *pgServer, db string, opts clusterOptions) *cluster {
	t.Helper()
	if opts.agents > 0 {
		cfg.agents = opts.agents
	}
	c := &cluster{t: t, cfg: cfg, opts: opts, pg: pg, agents: map[string]*proc{}, agentOf: map[string]int{}}
	// At the end every process still running is stopped, all at once (each drains for a while).
	t.Cleanup(c.stopAll)
	c.logDir = filepath.Join(resultsDir(t), db)
	require.NoError(t, os.MkdirAll(c.logDir, 0o755))
	c.workDir = t.TempDir()
	c.db, c.pgDirect = db, pg.createDB(t, db)
	c.pgProxy = newProxy(t, "127.0.0.1:"+pg.port)
	c.redis = startRedis(t)
	base := []string{"CONVERGE_REDIS_URL=redis://" + c.redis.addr() + "/0", "CONVERGE_MIGRATE=true", "CONVERGE_LOG_LEVEL=info"}
	c.env = append([]string{"CONVERGE_POSTGRES_URL=" + c.pgDirect}, base...)
	up := func(name, svc string, args ...string) string {
		addr := freeAddr(t)
		p := c.startProc(name, svc, c.env, append([]string{"--listen", addr}, args...)...)
		c.waitHealthy(p, addr)
		return addr
	}
	var regArgs []string
	if opts.stale > 0 {
		// The Registry's stale window (STALE status; GONE after a multiple of it), where this
		// build has the flag.
		if registryHas(t, "--stale-after") {
			regArgs = append(regArgs, "--stale-after", opts.stale.String())
		} else {
			t.Logf("converge-registry has no --stale-after: the Registry keeps its default stale window")
		}
	}
	c.registry = up("registry", "registry", regArgs...)
	c.know = up("knowledge", "knowledge")
	if opts.refusingVerifier {
		c.verifier = up("verifier", "verifier")
	} else {
		c.verifier = up("verifier", "verifier", "--allowed-root", c.workDir)
	}
	c.schedEnv = append([]string{"CONVERGE_POSTGRES_URL=" + pg.url(db, c.pgProxy.Addr)}, base...)
	c.schedArgs = []string{"--verifier", c.verifier, "--registry", c.registry, "--work-dir", c.workDir}
	if opts.stale > 0 {
		c.schedArgs = append(c.schedArgs, "--stale-after", opts.stale.String())
	}
	for i := range 2 {
		c.schedAddr[i] = freeAddr(t)
		c.startScheduler(i)
		c.agentProxy[i] = newProxy(t, c.schedAddr[i])
		c.watchProxy[i] = newProxy(t, c.schedAddr[i])
		c.clients[i] = schedulerv1.NewSchedulerServiceClient(dial(t, c.schedAddr[i]))
	}
	c.reg = registryv1.NewRegistryServiceClient(dial(t, c.registry))
	for range cfg.agents {
		c.addAgent(-1)
	}
	t.Cleanup(c.stopAll) // (again, to run before the proxies and stores registered since go)
	return c
}

func (c *cluster) startScheduler(i int) {
	c.t.Helper()
	name := fmt.Sprintf("scheduler-%d", i)
	c.sched[i] = c.startProc(name, "scheduler", c.schedEnv, append([]string{"--listen", c.schedAddr[i]}, c.schedArgs...)...)
	c.waitHealthy(c.sched[i], c.schedAddr[i])
}

// startProc starts converge-<svc> as name; stopAll stops it.
func (c *cluster) startProc(name, svc string, env []string, args ...string) *proc {
	c.t.Helper()
	p := startProc(c.t, c.logDir, name, binary(c.t, svc), env, args...)
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

// stopAll stops every process at once: agents first, then the services.
func (c *cluster) stopAll() {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	for _, agents := range []bool{true, false} {
		var wg sync.WaitGroup
		for _, p := range procs {
			if strings.HasPrefix(p.name, "agent-") == agents {
				wg.Add(1)
				go func() { defer wg.Done(); p.stop() }()
			}
		}
		wg.Wait()
	}
}

// addAgent starts a new agent talking to Scheduler replica i (-1: alternate).
func (c *cluster) addAgent(i int) string {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := fmt.Sprintf("agent-%02d", c.nextID)
	if i < 0 {
		i = c.nextID % 2
	}
	c.mu.Unlock()
	c.startAgent(id, id, i)
	return id
}

// startAgent starts an agent process named name (its log file) as instance id on replica i.
func (c *cluster) startAgent(name, id string, i int) *proc {
	c.t.Helper()
	args := []string{"--listen", freeAddr(c.t), "--scheduler", c.agentProxy[i].Addr, "--instance-id", id,
		"--data-dir", filepath.Join(c.workDir, "agents", id), "--registry", c.registry, "--knowledge", c.know}
	p := c.startProc(name, "agent", c.env, args...)
	c.mu.Lock()
	c.agents[id], c.agentOf[id] = p, i
	c.mu.Unlock()
	return p
}

// restartAgent kill -9s an agent and at once starts it again under the same instance id (a new
// process, so a new session), with the same data dir, on the same replica; it answers when the
// kill happened.
func (c *cluster) restartAgent(id string, n int) time.Time {
	c.mu.Lock()
	p, i := c.agents[id], c.agentOf[id]
	c.retired = append(c.retired, p)
	c.mu.Unlock()
	at := time.Now()
	p.kill9()
	c.startAgent(fmt.Sprintf("%s.restart-%d", id, n), id, i)
	return at
}

// killAgent kill -9s an agent and starts a replacement on the same Scheduler replica.
func (c *cluster) killAgent(id string) {
	c.mu.Lock()
	p, i := c.agents[id], c.agentOf[id]
	delete(c.agents, id)
	c.retired = append(c.retired, p)
	c.replaced++
	c.mu.Unlock()
	p.kill9()
	c.addAgent(i)
}

func (c *cluster) agentProc(id string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agents[id]
}

// call runs fn against a Scheduler replica, retrying on errors (replicas die, Postgres
// restarts) for up to a minute, alternating replicas.
func (c *cluster) call(fn func(ctx context.Context, s schedulerv1.SchedulerServiceClient) error) {
	c.t.Helper()
	var err error
	deadline := time.Now().Add(90 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = fn(ctx, c.clients[i%2])
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
	ok := eventually(60*time.Second, func() bool {
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
		opts := &schedulerv1.ExecutionOptions{MaxParallel: 10}
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

func isEnded(e *schedulerv1.Execution) bool {
	switch e.GetStatus() {
	case schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return true
	}
	return false
}

// waitProgress waits until the execution completed at least n tasks (or ended), bounded.
func (c *cluster) waitProgress(id string, n int32, timeout time.Duration) *schedulerv1.Execution {
	var e *schedulerv1.Execution
	eventually(timeout, func() bool {
		e = c.execution(id)
		time.Sleep(150 * time.Millisecond)
		return e.GetCompletedTasks() >= n || isEnded(e)
	})
	return e
}

func (c *cluster) waitEnded(id string, timeout time.Duration) *schedulerv1.Execution {
	var e *schedulerv1.Execution
	ok := eventually(timeout, func() bool {
		e = c.execution(id)
		time.Sleep(200 * time.Millisecond)
		return isEnded(e)
	})
	if !ok {
		c.dump()
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

// pickHolder waits (bounded) for an agent holding a task and answers one at random.
func (c *cluster) pickHolder(id string, timeout time.Duration) (string, *schedulerv1.Assignment) {
	var ids []string
	var hs map[string]*schedulerv1.Assignment
	eventually(timeout, func() bool {
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

// dump logs the tail of every process' output.
func (c *cluster) dump() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.sched {
		c.t.Logf("== %s:\n%s", p.name, tail(p.output(), 30))
	}
	for _, p := range c.agents {
		c.t.Logf("== %s:\n%s", p.name, tail(p.output(), 15))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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
		schedulerv1.NewSchedulerServiceClient(dial(c.t, c.watchProxy[0].Addr)),
		schedulerv1.NewSchedulerServiceClient(dial(c.t, c.watchProxy[1].Addr)),
	}
	go func() {
		defer close(w.done)
		cursor := int64(0)
		for i := 0; ; i++ {
			if ctx.Err() != nil {
				w.err = ctx.Err()
				return
			}
			stream, err := conns[i%2].WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: id, AfterSeq: cursor})
			if err == nil {
				for {
					var res *schedulerv1.WatchExecutionResponse
					res, err = stream.Recv()
					if err != nil {
						break
					}
					seq := res.GetEntry().GetSeq()
					w.mu.Lock()
					w.seqs = append(w.seqs, seq)
					w.mu.Unlock()
					cursor = seq
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

// originRepo makes a repository with one commit to build in.
func originRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	git("init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# built by converge under faults\n"), 0o644))
	git("add", "README.md")
	git("commit", "-q", "-m", "initial")
	return dir
}

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// taskTitle is the title of task i of layered.
func taskTitle(i int) string { return fmt.Sprintf("write out/%03d.txt", i) }

func taskID(i int) string { return fmt.Sprintf("t%03d", i) }

// layered is n tasks in layers of ten: task i writes out/i.txt and depends on i-10.
func layered(name, repo string, n int, sleep string) *schedulerv1.TaskListSpec {
	return layeredWidth(name, repo, n, 10, sleep)
}

// layeredWidth is n tasks in layers of width: task i writes out/i.txt and depends on i-width.
func layeredWidth(name, repo string, n, width int, sleep string) *schedulerv1.TaskListSpec {
	spec := &schedulerv1.TaskListSpec{Name: name, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"},
		DoneCriteria: fmt.Sprintf("## F1: every file is there\nTag: AUTO_VERIFY\n```check\ncommand:\n  shell: test \"$(ls out | wc -l)\" -eq %d\n```\n", n)}
	for i := range n {
		t := &commonv1.Task{Id: taskID(i), Title: taskTitle(i), File: fmt.Sprintf("out/%03d.txt", i),
			Action:     commonv1.TaskAction_TASK_ACTION_CREATE,
			Command:    fmt.Sprintf("mkdir -p out && sleep %s && echo %d > out/%03d.txt", sleep, i, i),
			Validation: &commonv1.TaskValidation{Command: fmt.Sprintf("test -s out/%03d.txt", i)}}
		if i >= width {
			t.DependsOn = []string{taskID(i - width)}
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return spec
}
