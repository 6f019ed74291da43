package clustertest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Options shape a cluster. The zero value is one Scheduler, no agent, the Registry, Knowledge and
// Verifier, on a fresh database of the test Postgres server and the test Redis.
type Options struct {
	Schedulers int // Scheduler replicas (0: 1)
	Agents     int // agent processes started with the cluster (more with AddAgent)

	// Without leaves out services among "knowledge" and "verifier" (the Registry and the
	// Scheduler always run).
	Without []string

	// Postgres is the server the cluster's database is made on (nil: UsePostgres(PostgresURL())).
	Postgres *Postgres
	// Database names the cluster's database ("": converge_c_<random>); it is dropped at the end.
	Database string
	// Redis is the cluster's Redis (nil: UseRedis(RedisURL())).
	Redis *Redis

	// ProxySchedulerPostgres puts a fault proxy (PostgresProxy) between the Schedulers and
	// Postgres; the other services reach Postgres directly.
	ProxySchedulerPostgres bool
	// ProxyAgents puts a fault proxy (SchedulerProxy(i)) between the agents and each Scheduler.
	ProxyAgents bool

	LogLevel      string   // CONVERGE_LOG_LEVEL of every process ("": info)
	Env           []string // added to every process's environment
	RegistryArgs  []string // added to the Registry's arguments
	SchedulerArgs []string // added to every Scheduler's arguments
	AgentArgs     []string // added to every agent's arguments
	// AgentAllowedRoots are every agent's --allowed-root (nil: WorkDir and the temporary
	// directory, where tests make their repositories; empty: none, no local repository).
	AgentAllowedRoots []string
	// VerifierNoAllowedRoot starts the Verifier without --allowed-root WorkDir: it refuses the
	// local directories the Schedulers hand it.
	VerifierNoAllowedRoot bool

	// LogDir holds one log file per process (<name>.log; "": a temporary directory); WorkDir the
	// Schedulers' work folder, the Verifier's allowed root and the agents' data ("": temporary).
	LogDir, WorkDir string
	// Grace is how long a process may take to exit after SIGTERM at the end (0: DefaultGrace).
	Grace time.Duration
	// HealthTimeout bounds the wait for each service to serve (0: DefaultHealthTimeout).
	HealthTimeout time.Duration
	// WaitAgents waits for each agent's own health endpoint to serve as it starts.
	WaitAgents bool
}

// Cluster is a running deployment: every service its own process.
type Cluster struct {
	tb   TB
	opts Options

	Postgres    *Postgres
	Redis       *Redis
	Database    string // the cluster's database
	PostgresURL string // its URL, straight to the server
	// PostgresProxy is the Schedulers' way to Postgres (Options.ProxySchedulerPostgres), else nil.
	PostgresProxy *Proxy

	RegistryAddr, KnowledgeAddr, VerifierAddr string // "" for a service left out
	LogDir, WorkDir                           string

	env       []string // every service's environment
	schedEnv  []string
	schedAddr []string
	sched     []*Process
	agentProx []*Proxy

	mu       sync.Mutex
	procs    []*Process // every process started, in order
	services map[string]*Process
	agents   map[string]*Process
	agentOf  map[string]int    // agent → Scheduler index
	agentAt  map[string]string // agent → its own API's address
	isAgent  map[*Process]bool
	nextID   int
	conns    map[string]*grpc.ClientConn
}

// Start starts a cluster: the Registry, Knowledge and Verifier, then the Schedulers, then the
// agents, each service waited for until it serves. Everything is stopped when tb ends (agents
// first, then the services; SIGTERM, SIGKILL after the grace period).
func Start(tb TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Schedulers <= 0 {
		opts.Schedulers = 1
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	c := &Cluster{tb: tb, opts: opts, Postgres: opts.Postgres, Redis: opts.Redis,
		services: map[string]*Process{}, agents: map[string]*Process{}, agentOf: map[string]int{}, agentAt: map[string]string{}, isAgent: map[*Process]bool{}, conns: map[string]*grpc.ClientConn{}}
	if c.Postgres == nil {
		c.Postgres = UsePostgres(tb, PostgresURL())
	}
	if c.Redis == nil {
		c.Redis = UseRedis(tb, RedisURL())
	}
	c.LogDir, c.WorkDir = opts.LogDir, opts.WorkDir
	if c.LogDir == "" {
		c.LogDir = tb.TempDir()
	}
	if c.WorkDir == "" {
		c.WorkDir = tb.TempDir()
	}
	if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
	c.Database, c.PostgresURL = c.Postgres.CreateDatabase(tb, opts.Database)
	// Registered after the database's drop: runs before it.
	tb.Cleanup(c.stopAll)
	base := append([]string{"CONVERGE_REDIS_URL=" + c.Redis.URL(), "CONVERGE_MIGRATE=true", "CONVERGE_LOG_LEVEL=" + opts.LogLevel}, opts.Env...)
	c.env = append([]string{"CONVERGE_POSTGRES_URL=" + c.PostgresURL}, base...)
	c.schedEnv = c.env
	if opts.ProxySchedulerPostgres {
		c.PostgresProxy = StartProxy(tb, c.Postgres.HostPort())
		c.schedEnv = append([]string{"CONVERGE_POSTGRES_URL=" + c.Postgres.URL(c.Database, c.PostgresProxy.Addr)}, base...)
	}

	c.RegistryAddr = c.service("registry", "registry", opts.RegistryArgs...)
	if !slices.Contains(opts.Without, "knowledge") {
		c.KnowledgeAddr = c.service("knowledge", "knowledge")
	}
	if !slices.Contains(opts.Without, "verifier") {
		// The cluster's work dir is a private (0700) temporary directory of the test's user, where
		// the Scheduler checks out what Verify Done reads: the Verifier's checks keep its uid
		// (their namespaces stay on). The uid switch is the security suite's, on its own Verifier.
		args := []string{"--sandbox-uid=-1"}
		if !opts.VerifierNoAllowedRoot {
			args = append(args, "--allowed-root", c.WorkDir)
		}
		c.VerifierAddr = c.service("verifier", "verifier", args...)
	}
	for i := range opts.Schedulers {
		addr := FreeAddr(tb)
		c.schedAddr = append(c.schedAddr, addr)
		if opts.ProxyAgents {
			c.agentProx = append(c.agentProx, StartProxy(tb, addr))
		}
		args := []string{"--listen", addr, "--registry", c.RegistryAddr, "--work-dir", filepath.Join(c.WorkDir, "scheduler")}
		if c.VerifierAddr != "" {
			args = append(args, "--verifier", c.VerifierAddr)
		}
		if c.KnowledgeAddr != "" { // read by the Scheduler's dashboard (--dashboard) only
			args = append(args, "--knowledge", c.KnowledgeAddr)
		}
		p := c.start(fmt.Sprintf("scheduler-%d", i), "converge-scheduler", c.schedEnv, append(args, opts.SchedulerArgs...))
		c.sched = append(c.sched, p)
		c.waitServing(p, addr)
	}
	for range opts.Agents {
		c.AddAgent("", -1)
	}
	// Registered again, after the proxies: the processes stop before their links close.
	tb.Cleanup(c.stopAll)
	return c
}

// service starts converge-<svc> as name on a free address and waits until it serves.
func (c *Cluster) service(name, svc string, args ...string) string {
	c.tb.Helper()
	addr := FreeAddr(c.tb)
	p := c.start(name, "converge-"+svc, c.env, append([]string{"--listen", addr}, args...))
	c.mu.Lock()
	c.services[name] = p
	c.mu.Unlock()
	c.waitServing(p, addr)
	return addr
}

func (c *Cluster) start(name, bin string, env, args []string) *Process {
	c.tb.Helper()
	p, err := startProcess(ProcessSpec{Name: name, Bin: Binary(c.tb, bin), Args: args, Env: env, LogDir: c.LogDir, Grace: c.opts.Grace})
	if err != nil {
		c.tb.Fatalf("clustertest: %v", err)
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

func (c *Cluster) waitServing(p *Process, addr string) {
	c.tb.Helper()
	WaitHealth(c.tb, p, addr, "", healthpb.HealthCheckResponse_SERVING, c.opts.HealthTimeout)
}

// stopAll stops every process still running: the agents at once, then the services at once.
func (c *Cluster) stopAll() {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	isAgent := maps.Clone(c.isAgent)
	c.mu.Unlock()
	for _, agents := range []bool{true, false} {
		var wg sync.WaitGroup
		for _, p := range procs {
			if isAgent[p] == agents {
				wg.Add(1)
				go func() { defer wg.Done(); _ = p.Stop() }()
			}
		}
		wg.Wait()
	}
}

// Env answers the environment every service of the cluster runs with (its Postgres and Redis).
func (c *Cluster) Env() []string { return slices.Clone(c.env) }

// Schedulers answers how many Scheduler replicas run.
func (c *Cluster) Schedulers() int { return len(c.sched) }

// Scheduler answers replica i's process.
func (c *Cluster) Scheduler(i int) *Process { return c.sched[i] }

// SchedulerAddr answers replica i's address.
func (c *Cluster) SchedulerAddr(i int) string { return c.schedAddr[i] }

// SchedulerProxy answers the fault proxy between the agents and replica i (Options.ProxyAgents).
func (c *Cluster) SchedulerProxy(i int) *Proxy {
	if i >= len(c.agentProx) {
		c.tb.Fatalf("clustertest: no proxy to Scheduler %d: set Options.ProxyAgents", i)
	}
	return c.agentProx[i]
}

// Service answers the process of "registry", "knowledge" or "verifier".
func (c *Cluster) Service(name string) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.services[name]
}

// RestartScheduler stops replica i (SIGTERM, or finds it killed) and starts it again on the same
// address, waiting until it serves.
func (c *Cluster) RestartScheduler(i int) {
	c.tb.Helper()
	c.sched[i].Restart(c.tb)
	c.waitServing(c.sched[i], c.schedAddr[i])
}

// AddAgent starts an agent process named id ("": agent-01, agent-02, ... in order) talking to
// Scheduler replica i (-1: the replicas in turn), through its proxy with Options.ProxyAgents.
func (c *Cluster) AddAgent(id string, i int) *Process {
	c.tb.Helper()
	c.mu.Lock()
	c.nextID++
	if id == "" {
		id = fmt.Sprintf("agent-%02d", c.nextID)
	}
	if i < 0 {
		i = (c.nextID - 1) % len(c.sched)
	}
	c.mu.Unlock()
	sched := c.schedAddr[i]
	if c.opts.ProxyAgents {
		sched = c.agentProx[i].Addr
	}
	addr := FreeAddr(c.tb)
	args := []string{"--listen", addr, "--scheduler", sched, "--registry", c.RegistryAddr, "--instance-id", id,
		"--data-dir", filepath.Join(c.WorkDir, "agents", id)}
	roots := c.opts.AgentAllowedRoots
	if roots == nil {
		roots = []string{c.WorkDir, os.TempDir()}
	}
	for _, r := range roots {
		args = append(args, "--allowed-root", r)
	}
	if c.KnowledgeAddr != "" {
		args = append(args, "--knowledge", c.KnowledgeAddr)
	}
	p := c.start(id, "converge-agent", c.env, append(args, c.opts.AgentArgs...))
	c.mu.Lock()
	c.agents[id], c.agentOf[id], c.agentAt[id], c.isAgent[p] = p, i, addr, true
	c.mu.Unlock()
	if c.opts.WaitAgents {
		c.waitServing(p, addr)
	}
	return p
}

// Agent answers agent id's process (nil when there is none).
func (c *Cluster) Agent(id string) *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agents[id]
}

// AgentAddr answers the address of agent id's own API (AgentService).
func (c *Cluster) AgentAddr(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agentAt[id]
}

// AgentScheduler answers the Scheduler replica agent id talks to.
func (c *Cluster) AgentScheduler(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agentOf[id]
}

// Agents answers the agents' ids, in order.
func (c *Cluster) Agents() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.agents))
	for id := range c.agents {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// conn answers a client connection to addr, one per address, closed when the test ends.
func (c *Cluster) conn(addr string) *grpc.ClientConn {
	c.mu.Lock()
	conn, ok := c.conns[addr]
	c.mu.Unlock()
	if ok {
		return conn
	}
	conn = Dial(c.tb, addr)
	c.mu.Lock()
	c.conns[addr] = conn
	c.mu.Unlock()
	return conn
}

// SchedulerClient answers a client of replica i.
func (c *Cluster) SchedulerClient(i int) schedulerv1.SchedulerServiceClient {
	return schedulerv1.NewSchedulerServiceClient(c.conn(c.schedAddr[i]))
}

// RegistryClient answers a client of the Registry.
func (c *Cluster) RegistryClient() registryv1.RegistryServiceClient {
	return registryv1.NewRegistryServiceClient(c.conn(c.RegistryAddr))
}

// Dump logs the last lines of every process's output: n of each service's, n/2 of each agent's.
func (c *Cluster) Dump(n int) {
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	for _, p := range procs {
		lines := n
		if strings.HasPrefix(p.Name, "agent") {
			lines = max(n/2, 1)
		}
		c.tb.Logf("== %s (%s):\n%s", p.Name, p.LogPath, p.Tail(lines))
	}
}
