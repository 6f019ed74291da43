package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// config sizes a run of the suite.
type config struct {
	mode       string
	tasks      int           // tasks of each scenario's list
	agents     int           // agent processes
	heartbeat  time.Duration // agents' heartbeat interval (a lease is three)
	agentKills int           // scenario 1
	repeats    int           // how many times scenarios 2-4 and 6 inject their fault
	timeout    time.Duration // for a run to end
	sleep      string        // each task's command sleeps this long
}

func configFor(mode string) config {
	if mode == "full" {
		// A lease of 3 s: 200 tasks, 5 agents, two replicas and the faults keep 2 cores busy.
		return config{mode: mode, tasks: 200, agents: 5, heartbeat: time.Second, agentKills: 20, repeats: 2, timeout: 12 * time.Minute, sleep: "0.2"}
	}
	return config{mode: mode, tasks: 30, agents: 4, heartbeat: 500 * time.Millisecond, agentKills: 4, repeats: 1, timeout: 4 * time.Minute, sleep: "0.2"}
}

// result is one row of the table.
type result struct {
	scenario         string
	tasks            int
	converged        bool
	outcome          string
	commitsOnce      string
	locksLeft        int
	gaps, dups       int
	resumes          int
	deathToRequeue   []time.Duration
	deathToRerun     []time.Duration // to the task running again on another agent (lease and file lock)
	timing           string          // production-like timing of the scenario, when it has one
	notes            string
	wall             time.Duration
	failed           bool
	faultsInjected   int
	completedByStale int
}

var (
	resultsMu sync.Mutex
	results   []*result
	suiteDir  string
)

// resultsDir is where process logs go: $CONVERGE_FAULTS_LOGS or a temporary directory.
func resultsDir(t *testing.T) string {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if suiteDir == "" {
		suiteDir = os.Getenv("CONVERGE_FAULTS_LOGS")
		if suiteDir == "" {
			d, err := os.MkdirTemp("", "converge-faults-logs-")
			require.NoError(t, err)
			suiteDir = d
		}
	}
	return suiteDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if len(results) > 0 {
		table := renderTable()
		fmt.Println(table)
		if p := os.Getenv("CONVERGE_FAULTS_RESULTS"); p != "" {
			_ = os.WriteFile(p, []byte(table+"\n"), 0o644)
		}
		if suiteDir != "" {
			fmt.Println("process logs:", suiteDir)
		}
	}
	clustertest.RemoveBinaries()
	os.Exit(code)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func renderTable() string {
	var b strings.Builder
	b.WriteString("| scenario | timing | tasks | outcome | commits once | locks left | log gaps/dups | stream resumes | faults | death→requeue p50 / max (n) | death→running again p50 / max (n) | wall | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	figure := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2fs / %.2fs (%d)", percentile(ds, 0.5).Seconds(), percentile(ds, 1).Seconds(), len(ds))
	}
	for _, r := range results {
		conv := r.outcome
		if r.failed {
			conv += " (FAILED)"
		}
		timing := r.timing
		if timing == "" {
			timing = "suite"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %d | %d / %d | %d | %d | %s | %s | %s | %s |\n", r.scenario, timing, r.tasks, conv, r.commitsOnce,
			r.locksLeft, r.gaps, r.dups, r.resumes, r.faultsInjected, figure(r.deathToRequeue), figure(r.deathToRerun), r.wall.Round(time.Second), r.notes)
	}
	return strings.TrimRight(b.String(), "\n")
}

// scenario is one fault: inject runs while the execution runs and records the deaths it caused
// (instance → when), for death→requeue.
type scenario struct {
	name   string
	sleep  string
	inject func(s *run)
	// cluster shapes the deployment: production-like timing, a refusing Verifier (default: the
	// suite's short heartbeat).
	cluster func(cfg config) clusterOptions
	// tasks is the size of the list (default cfg.tasks).
	tasks func(cfg config) int
	// spec builds the task list (default: layered, in layers of ten).
	spec func(r *run) *schedulerv1.TaskListSpec
	// outcomes are how the run may end (default CONVERGED).
	outcomes []commonv1.Outcome
	// notCommitted are tasks of the list that must not reach the run branch (they fail).
	notCommitted []string
	// check asserts what is particular to the scenario, once the run ended.
	check func(r *run, e *schedulerv1.Execution, log []*commonv1.LogEntry)
	// timeout bounds the run (default cfg.timeout).
	timeout time.Duration
}

// run is one scenario's execution under its fault.
type run struct {
	t      *testing.T
	c      *cluster
	e      *schedulerv1.Execution
	res    *result
	deaths []death
	tasks  int
	repo   string // the repository built in
	dir    string // the scenario's scratch directory (outside the repository)
	spec   *schedulerv1.TaskListSpec
}

// death is an agent taken out (killed or stopped) at a time, holding an assignment.
type death struct {
	instance, assignment, task string
	at                         time.Time
	token                      int64 // of its lease then
	// cut: the agent lives on, cut off from its Scheduler; it may take the task again later.
	cut bool
	// restarted: the same instance started again at once; it may take the task again itself.
	restarted bool
	// rerun: when the task ran again (a newer lease held, with the task's file lock) as the
	// scenario saw it; zero when it did not look.
	rerun time.Time
}

// at waits until the run completed frac of its tasks.
func (r *run) at(frac float64) bool {
	n := int32(frac * float64(r.tasks))
	e := r.c.waitProgress(r.e.GetId(), n, r.c.cfg.timeout/2)
	return !clustertest.Ended(e)
}

func TestFaults(t *testing.T) {
	mode := os.Getenv("CONVERGE_FAULTS")
	if mode != "full" && mode != "ci" {
		t.Skip("the fault suite runs only with CONVERGE_FAULTS=full or ci (faults/run.sh, make faults, make faults-ci)")
	}
	cfg := configFor(mode)
	pg := clustertest.StartPostgres(t)
	only := os.Getenv("CONVERGE_FAULTS_ONLY")
	for i, sc := range scenarios() {
		if only != "" && !slices.Contains(strings.Split(only, ","), sc.name) {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			runScenario(t, cfg, pg, fmt.Sprintf("faults_%d_%s", i+1, strings.ReplaceAll(sc.name, "-", "_")), sc)
		})
	}
}

func runScenario(t *testing.T, cfg config, pg *clustertest.Postgres, db string, sc scenario) {
	began := time.Now()
	n := cfg.tasks
	if sc.tasks != nil {
		n = sc.tasks(cfg)
	}
	res := &result{scenario: sc.name, tasks: n, commitsOnce: "?", failed: true}
	resultsMu.Lock()
	results = append(results, res)
	resultsMu.Unlock()
	defer func() {
		res.wall = time.Since(began)
		res.failed = t.Failed()
	}()

	var opts clusterOptions
	if sc.cluster != nil {
		opts = sc.cluster(cfg)
	}
	if opts.stale > 0 || opts.heartbeat > 0 {
		res.timing = fmt.Sprintf("hb %s, stale %s", orDefault(opts.heartbeat), orDefault(opts.stale))
	}
	c := newCluster(t, cfg, pg, db, opts)
	repo := clustertest.GitRepo(t)
	sleep := cfg.sleep
	if sc.sleep != "" {
		sleep = sc.sleep
	}
	r := &run{t: t, c: c, res: res, tasks: n, repo: repo, dir: t.TempDir()}
	if sc.spec != nil {
		r.spec = sc.spec(r)
	} else {
		r.spec = clustertest.Layered(sc.name, repo, n, sleep)
	}
	res.tasks = len(r.spec.GetTasks())
	e := c.start(r.spec)
	r.e = e
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout+2*time.Minute)
	defer cancel()
	w := c.watch(ctx, e.GetId())
	// Force the event-stream reader to resume from its cursor: reset its connection now and then.
	stopResets := make(chan struct{})
	resetsDone := make(chan struct{})
	go func() {
		defer close(resetsDone)
		// The first as soon as the reader has an entry (a short run resumes at least once too),
		// then every 3 s.
		clustertest.Eventually(30*time.Second, func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.seqs) > 0
		})
		c.watchProxy[0].Reset()
		c.watchProxy[1].Reset()
		tk := time.NewTicker(3 * time.Second)
		defer tk.Stop()
		for range 1000 {
			select {
			case <-stopResets:
				return
			case <-tk.C:
				c.watchProxy[0].Reset()
				c.watchProxy[1].Reset()
			}
		}
	}()
	sc.inject(r)
	timeout := cfg.timeout
	if sc.timeout > 0 {
		timeout = sc.timeout
	}
	e = c.waitEnded(e.GetId(), timeout)
	close(stopResets)
	<-resetsDone
	res.outcome = strings.TrimPrefix(e.GetOutcome().String(), "OUTCOME_")
	res.converged = e.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED
	want := sc.outcomes
	if len(want) == 0 {
		want = []commonv1.Outcome{commonv1.Outcome_OUTCOME_CONVERGED}
	}
	assert.Contains(t, want, e.GetOutcome(), "%s", e.GetStatusMessage())
	if !slices.Contains(want, e.GetOutcome()) {
		res.notes = e.GetStatusMessage()
	}

	// Every task that is to complete exactly once on the run branch, no other commit.
	var subjects []string
	if exec.Command("git", "-C", repo, "rev-parse", "--verify", "--quiet", e.GetRunBranch()).Run() != nil {
		t.Errorf("the run branch %q does not exist (the run ended before any integration)", e.GetRunBranch())
	} else if out := clustertest.Git(t, repo, "log", "--format=%s", "main.."+e.GetRunBranch()); out != "" {
		subjects = strings.Split(out, "\n")
	}
	count := map[string]int{}
	for _, s := range subjects {
		count[s]++
	}
	missing, twice, expected := 0, 0, 0
	for _, tk := range r.spec.GetTasks() {
		subject := fmt.Sprintf("Task %s: %s", tk.GetId(), tk.GetTitle())
		if slices.Contains(sc.notCommitted, tk.GetId()) {
			assert.Zero(t, count[subject], "task %s, which fails, reached the run branch", tk.GetId())
			continue
		}
		expected++
		switch n := count[subject]; {
		case n == 0:
			missing++
		case n > 1:
			twice++
		}
	}
	extra := len(subjects) - expected + missing
	if missing == 0 && twice == 0 && len(subjects) == expected {
		res.commitsOnce = fmt.Sprintf("yes (%d)", expected)
	} else {
		res.commitsOnce = fmt.Sprintf("NO: %d missing, %d twice, %d commits", missing, twice, len(subjects))
	}
	assert.Zero(t, missing, "tasks missing from the run branch")
	assert.Zero(t, twice, "tasks committed twice")
	assert.Zero(t, extra, "commits that are no task's")

	// No lock left held (the agents release theirs; an expired one is free).
	res.locksLeft = len(c.locksHeld(e.GetId() + "/"))
	assert.Zero(t, res.locksLeft, "locks left held")

	// The event stream, read with a cursor across forced disconnects, and the log paged by
	// GetExecutionLog: both every seq from 1 to the last, once.
	select {
	case <-w.done:
	case <-time.After(2 * time.Minute):
		t.Errorf("the event stream did not end within 2 minutes of the execution")
	}
	log := c.log(e.GetId())
	w.mu.Lock()
	res.gaps, res.dups = gapsAndDups(w.seqs)
	res.resumes = w.disconnects
	streamed := len(w.seqs)
	w.mu.Unlock()
	lg, ld := gapsAndDups(seqsOf(log))
	res.gaps += lg
	res.dups += ld
	assert.Zero(t, res.gaps, "seqs missing from the stream or the log")
	assert.Zero(t, res.dups, "seqs received twice")
	assert.Equal(t, len(log), streamed, "the stream and the paged log hold the same entries")
	assert.Positive(t, res.resumes, "the stream was resumed from its cursor at least once")
	assert.Equal(t, int64(len(log)), e.GetLastSeq(), "the log holds every seq")

	// Death → requeue: for every agent taken out holding an assignment, the time from then to
	// the TASK_REQUEUED of that assignment; death → running again, where the scenario looked.
	for _, d := range r.deaths {
		for _, en := range log {
			if en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_REQUEUED && en.GetInstanceId() == d.instance &&
				en.GetTaskId() == d.task && en.GetTime().AsTime().After(d.at) {
				res.deathToRequeue = append(res.deathToRequeue, en.GetTime().AsTime().Sub(d.at))
				break
			}
		}
		if !d.rerun.IsZero() {
			res.deathToRerun = append(res.deathToRerun, d.rerun.Sub(d.at))
		}
	}
	checkLeases(t, log, r)
	early := earlyLeases(log)
	res.notes += fmt.Sprintf("; %d early (eager) leases", early)
	if sc.spec == nil && res.converged {
		assert.Positive(t, early, "no task of the layered list was leased before its wave opened: eager dispatch did not run")
	}
	if sc.check != nil {
		sc.check(r, e, log)
	}
	if !res.converged {
		failures(t, log)
	}
	// The writes of an agent taken out: its assignment ended COMPLETED by another agent, and the
	// task's ref holds that agent's commit (a late writer did not move it).
	if len(r.deaths) > 0 {
		byID := map[string]*schedulerv1.Assignment{}
		for _, a := range c.assignments(e.GetId()) {
			byID[a.GetId()] = a
		}
		intact, out := 0, 0
		for _, d := range r.deaths {
			a := byID[d.assignment]
			if !assert.NotNil(t, a) || d.cut || (a.GetInstanceId() == d.instance && a.GetFencingToken() == d.token) {
				continue // cut off only, or it finished the task just before it was taken out
			}
			out++
			assert.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, a.GetStatus(), "assignment %s of task %s", a.GetId(), d.task)
			if d.restarted {
				// The same instance, restarted, may do it again: under a newer lease.
				assert.Greater(t, a.GetFencingToken(), d.token, "task %s was completed under the lease its instance held before the restart", d.task)
			} else {
				assert.NotEqual(t, d.instance, a.GetInstanceId(), "task %s was completed by %s, taken out while holding it", d.task, d.instance)
			}
			if a.GetTaskRef() != "" {
				if got := clustertest.Git(t, repo, "rev-parse", a.GetTaskRef()); assert.Equal(t, a.GetCommitSha(), got, "task ref %s moved by a late writer", a.GetTaskRef()) {
					intact++
				}
			}
		}
		if out > 0 {
			res.notes += fmt.Sprintf("; %d/%d taken-out tasks completed by another agent, task ref intact", intact, out)
		}
	}
	t.Logf("%s: %s in %s; %d log entries; %d stream resumes; %d agents replaced", sc.name, res.outcome, time.Since(began).Round(time.Second),
		len(log), res.resumes, c.replaced)
}

// orDefault words a duration of the timing column; 0 is the services' default.
func orDefault(d time.Duration) string {
	if d == 0 {
		return "default (30s)"
	}
	return d.String()
}

func seqsOf(log []*commonv1.LogEntry) []int64 {
	out := make([]int64, len(log))
	for i, e := range log {
		out[i] = e.GetSeq()
	}
	return out
}

// checkLeases: every task completed exactly once in the log, and only by the holder of its
// current lease: a completion from an agent whose lease expired (or was granted to another since)
// is refused by the fencing token and never reaches the log.
func checkLeases(t *testing.T, log []*commonv1.LogEntry, r *run) {
	holder := map[string]string{} // task → instance of its latest lease
	completed := map[string]int{}
	stale := 0
	for _, en := range log {
		task := en.GetTaskId()
		if task == "" {
			continue
		}
		switch en.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_LEASE_GRANTED:
			holder[task] = en.GetInstanceId()
		case commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, commonv1.EventType_EVENT_TYPE_TASK_REQUEUED:
			if holder[task] == en.GetInstanceId() {
				holder[task] = ""
			}
		case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
			if en.GetInstanceId() == "" {
				continue // an agent's own event, not the engine's
			}
			completed[task]++
			if holder[task] != en.GetInstanceId() {
				stale++
				t.Errorf("task %s was completed by %s (seq %d), which did not hold its lease then (holder %q)", task, en.GetInstanceId(), en.GetSeq(), holder[task])
			}
		}
	}
	for task, n := range completed {
		if n > 1 {
			t.Errorf("task %s completed %d times in the log", task, n)
		}
	}
	r.res.completedByStale = stale
}

// earlyLeases counts the leases eager dispatch granted before the task's wave opened.
func earlyLeases(log []*commonv1.LogEntry) int {
	n := 0
	for _, en := range log {
		if en.GetEventType() == commonv1.EventType_EVENT_TYPE_LEASE_GRANTED && en.GetContext().AsMap()["eager"] == true {
			n++
		}
	}
	return n
}

// failures logs why tasks failed, from the log.
func failures(t *testing.T, log []*commonv1.LogEntry) {
	for _, en := range log {
		if en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_FAILED && en.GetInstanceId() != "" {
			t.Logf("seq %d %s: %s", en.GetSeq(), en.GetTaskId(), en.GetMessage())
		}
	}
}

func scenarios() []scenario {
	return append([]scenario{
		{name: "agent-kill", inject: killAgents},
		{name: "scheduler-kill", inject: killScheduler},
		{name: "redis-flush-restart", inject: restartRedis},
		{name: "postgres-restart", inject: restartPostgres},
		{name: "proxy-faults", inject: proxyFaults},
		{name: "agent-stop", sleep: "0.4", inject: stopAgent},
		// The same faults with agents holding one assignment ahead (--prefetch): a killed or
		// stopped agent takes two leases out, one of a task it never started.
		{name: "agent-kill-prefetch", cluster: withPrefetch, inject: killAgents},
		{name: "agent-stop-prefetch", cluster: withPrefetch, sleep: "0.4", inject: stopAgent},
		{name: "proxy-faults-prefetch", cluster: withPrefetch, inject: proxyFaults},
	}, failurePaths()...)
}

// withPrefetch runs the scenario's agents with --prefetch.
func withPrefetch(config) clusterOptions { return clusterOptions{prefetch: true} }

// 1. kill -9 a random agent holding a task, spread over the run; a replacement starts each time.
// A victim whose completion (fused with its next claim) was committed between the pick and the
// kill took no task out with it: it is counted apart, not as a death (nothing of its task is
// requeued; the end checks let its own completion stand, and what the fused claim leased it
// is requeued as any dead agent's).
func killAgents(r *run) {
	k := r.c.cfg.agentKills
	finishedFirst := 0
	for i := range k {
		if !r.at(float64(i+1) / float64(k+2)) {
			break
		}
		victim, a := r.c.pickHolder(r.e.GetId(), 20*time.Second)
		if victim == "" {
			continue
		}
		at := time.Now()
		r.c.killAgent(victim)
		if r.c.finished(r.e.GetId(), a) {
			finishedFirst++
			continue
		}
		r.deaths = append(r.deaths, death{instance: victim, assignment: a.GetId(), task: a.GetTaskId(), at: at, token: a.GetFencingToken()})
		r.res.faultsInjected++
	}
	r.res.notes = fmt.Sprintf("%d agents killed -9 while holding a task", r.res.faultsInjected)
	if finishedFirst > 0 {
		r.res.notes += fmt.Sprintf(" (%d more killed just after completing theirs)", finishedFirst)
	}
}

// leader answers the index of the Scheduler replica that leads (its log says so last), or 0.
func (c *cluster) leader() int {
	idx, latest := 0, ""
	for i := range c.Schedulers() {
		p := c.Scheduler(i)
		if at, leads := leadsSince(p.Output()); leads && at > latest {
			idx, latest = i, at
		}
	}
	return idx
}

// leadsSince reads a Scheduler's log: whether its last leadership event says it leads, and that
// event's time (RFC 3339 in UTC, so the strings order as times). It steps down on a lost
// leadership, a failed leadership check, or a driver round's store error.
func leadsSince(out string) (string, bool) {
	at, leads := "", false
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "this replica leads"):
			leads = true
		case strings.Contains(line, "leadership lost"), strings.Contains(line, `msg="scheduler driver: leadership check"`),
			strings.Contains(line, `msg="scheduler driver" err=`):
			leads = false
		default:
			continue
		}
		at = ""
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "time=") {
			at = strings.TrimPrefix(f[0], "time=")
		}
	}
	return at, leads
}

// 2. kill -9 the leading Scheduler replica and start it again (full: then the other one too).
func killScheduler(r *run) {
	var killed []string
	for i := range r.c.cfg.repeats {
		if !r.at(float64(i+1) / float64(r.c.cfg.repeats+1)) {
			break
		}
		victim := r.c.leader()
		if i > 0 {
			victim = 1 - victim
		}
		r.c.Scheduler(victim).Kill()
		time.Sleep(2 * time.Second)
		r.c.RestartScheduler(victim)
		killed = append(killed, fmt.Sprintf("replica %d", victim))
		r.res.faultsInjected++
	}
	r.res.notes = "killed -9 and restarted: " + strings.Join(killed, ", ") + " (the leader first)"
}

// probeToken takes and releases a lock on a probe resource and answers its fencing token.
func (c *cluster) probeToken() int64 {
	c.t.Helper()
	var token int64
	ok := clustertest.Eventually(60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := c.reg.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "faults/probe.txt", Holder: "faults-probe", Ttl: durationpb.New(time.Minute)})
		if err != nil || !res.GetGranted() {
			return false
		}
		token = res.GetLock().GetToken()
		_, _ = c.reg.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "faults/probe.txt", Holder: "faults-probe", Token: token})
		return true
	})
	require.True(c.t, ok, "the Registry granted no lock for a minute")
	return token
}

// 3. FLUSHALL Redis, kill it and start an empty one on the same port. Fencing tokens granted
// after it are greater than every token granted before it.
func restartRedis(r *run) {
	var tokens []string
	for i := range r.c.cfg.repeats {
		if !r.at(float64(i+1) / float64(r.c.cfg.repeats+1)) {
			break
		}
		before := r.c.probeToken()
		_, err := r.c.Redis.Do("FLUSHALL")
		assert.NoError(r.t, err)
		r.c.Redis.Kill()
		time.Sleep(time.Second)
		r.c.Redis.Start(r.t)
		after := r.c.probeToken()
		assert.Greater(r.t, after, before, "a fencing token after the flush is greater than every token before it")
		tokens = append(tokens, fmt.Sprintf("token %d→%d", before, after))
		r.res.faultsInjected++
	}
	r.res.notes = "FLUSHALL, kill -9, empty restart; " + strings.Join(tokens, ", ")
}

// leaderSessionKilled terminates only the Postgres session that holds the Scheduler leadership
// (its advisory lock) and answers whether the old leader noticed within a few seconds, or
// whether two replicas went on leading.
func leaderSessionKilled(r *run) string {
	c := r.c
	old := c.leader()
	before := [2]int{len(c.Scheduler(0).Output()), len(c.Scheduler(1).Output())}
	out, err := c.Postgres.Query(c.Database, "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted")
	if err != nil || strings.TrimSpace(out) != "1" {
		r.t.Errorf("killing the leader's Postgres session: %q %v", out, err)
		return fmt.Sprintf("leader session kill: %q %v", out, err)
	}
	time.Sleep(3 * time.Second)
	oldOut, otherOut := c.Scheduler(old).Output()[before[old]:], c.Scheduler(1 - old).Output()[before[1-old]:]
	noticed := strings.Contains(oldOut, `msg="scheduler driver"`) || strings.Contains(oldOut, "leadership lost")
	other := strings.Contains(otherOut, "this replica leads")
	switch {
	case noticed:
		return "leader's session killed: it stepped down"
	case other:
		r.t.Errorf("the leader's Postgres session was killed and the leader did not notice, while replica %d took the lead: two replicas lead", 1-old)
		return "leader's session killed: NOT noticed, two leaders"
	default:
		r.t.Errorf("the leader's Postgres session was killed and the leader did not notice (no replica holds the leadership)")
		return "leader's session killed: NOT noticed, nobody leads"
	}
}

// 4. stop Postgres (immediate: every session cut, crash recovery) and start it again; before
// that, kill only the leader's Postgres session.
func restartPostgres(r *run) {
	var notes []string
	if r.at(0.15) {
		notes = append(notes, leaderSessionKilled(r))
		r.res.faultsInjected++
	}
	for i := range r.c.cfg.repeats {
		if !r.at(0.15 + 0.85*float64(i+1)/float64(r.c.cfg.repeats+1)) {
			break
		}
		r.c.Postgres.Stop(r.t)
		time.Sleep(3 * time.Second)
		r.c.Postgres.Start(r.t)
		r.res.faultsInjected++
	}
	r.res.notes = strings.Join(append(notes, "pg_ctl stop -m immediate, 3 s down, start"), "; ")
}

// 5. latency, resets and cuts between agents and Schedulers and between Schedulers and Postgres.
func proxyFaults(r *run) {
	c := r.c
	links := []*clustertest.Proxy{c.SchedulerProxy(0), c.SchedulerProxy(1), c.PostgresProxy}
	var did []string
	// Latency: 30 ms per chunk on every link for 5 s.
	if r.at(0.15) {
		for _, p := range links {
			p.SetLatency(30 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		for _, p := range links {
			p.SetLatency(0)
		}
		did = append(did, "latency 30ms/5s")
		r.res.faultsInjected++
	}
	// Resets: every open connection of every link, three times a second apart.
	if r.at(0.35) {
		n := 0
		for range 3 {
			for _, p := range links {
				n += p.Reset()
			}
			time.Sleep(time.Second)
		}
		did = append(did, fmt.Sprintf("%d resets", n))
		r.res.faultsInjected++
	}
	// Cut agent ↔ Scheduler 0 past the lease (its agents' leases run out and are requeued).
	if r.at(0.55) {
		for id, h := range c.holders(r.e.GetId()) {
			c.mu.Lock()
			on0 := c.AgentScheduler(id) == 0
			c.mu.Unlock()
			if on0 {
				r.deaths = append(r.deaths, death{instance: id, assignment: h.GetId(), task: h.GetTaskId(), at: time.Now(), cut: true})
			}
		}
		c.SchedulerProxy(0).Cut()
		time.Sleep(4 * c.heartbeat() * 3 / 2)
		c.SchedulerProxy(0).Restore()
		did = append(did, fmt.Sprintf("agents↔scheduler-0 cut %s", 4*c.heartbeat()*3/2))
		r.res.faultsInjected++
	}
	// Cut Schedulers ↔ Postgres for 3 s.
	if r.at(0.75) {
		c.PostgresProxy.Cut()
		time.Sleep(3 * time.Second)
		c.PostgresProxy.Restore()
		did = append(did, "schedulers↔postgres cut 3s")
		r.res.faultsInjected++
	}
	r.res.notes = strings.Join(did, "; ")
}

// 6. SIGSTOP an agent holding a task past its lease; once its assignment went to another agent,
// SIGCONT it. Its late completion must be refused (the task completes once, by the new holder).
func stopAgent(r *run) {
	c := r.c
	refused := 0
	for i := range r.c.cfg.repeats {
		if !r.at(float64(i+1) / float64(r.c.cfg.repeats+1)) {
			break
		}
		var (
			victim string
			a      *schedulerv1.Assignment
			p      *clustertest.Process
			at     time.Time
		)
		for range 5 {
			victim, a = c.pickHolder(r.e.GetId(), 20*time.Second)
			if victim == "" {
				break
			}
			p = c.agentProc(victim)
			at = time.Now()
			require.NoError(r.t, p.Pause())
			if !c.finished(r.e.GetId(), a) {
				break
			}
			// Its completion was committed between the pick and the stop (the answer not read
			// yet): nothing of this assignment can move on. Let it go and pick again.
			require.NoError(r.t, p.Continue())
			victim = ""
		}
		if victim == "" {
			continue
		}
		// Wait (bounded) until another agent holds or finished the assignment with a newer token,
		// or the victim's own completion, sent before it stopped, was committed after all.
		finishedFirst := false
		moved := clustertest.Eventually(60*time.Second, func() bool {
			if c.finished(r.e.GetId(), a) {
				finishedFirst = true
				return true
			}
			for _, x := range c.assignments(r.e.GetId()) {
				if x.GetId() == a.GetId() {
					return x.GetFencingToken() > a.GetFencingToken() && x.GetInstanceId() != victim
				}
			}
			return false
		})
		if finishedFirst {
			require.NoError(r.t, p.Continue())
			continue
		}
		r.deaths = append(r.deaths, death{instance: victim, assignment: a.GetId(), task: a.GetTaskId(), at: at, token: a.GetFencingToken()})
		r.res.faultsInjected++
		assert.True(r.t, moved, "the stopped agent's assignment did not move to another agent")
		require.NoError(r.t, p.Continue())
		// The resumed agent finds out: its report or completion is refused (Aborted).
		if clustertest.Eventually(30*time.Second, func() bool {
			out := p.Output()
			return strings.Contains(out, "lease lost") || strings.Contains(out, "completion refused")
		}) {
			refused++
		} else {
			r.t.Errorf("agent %s, resumed after its lease moved on, was not told its lease was lost:\n%s", victim, clustertest.Tail(p.Output(), 20))
		}
	}
	r.res.notes = fmt.Sprintf("%d stopped past the lease, resumed: %d refused (Aborted)", r.res.faultsInjected, refused)
}

var _ = filepath.Join
