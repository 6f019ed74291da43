package scheduler

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
	"github.com/converge-dev/converge/services/scheduler/store/sqlite"
)

// BenchmarkFanout runs a fan-out of n no-op tasks through the Scheduler's gRPC server (bufconn,
// interceptors) with two in-process agents (CONVERGE_FANOUT_AGENTS) doing what converge-agent does per task: ClaimTask,
// then CompleteTask (fused with the next claim when the sub-benchmark says so) carrying the
// TASK_STARTED event with the time the task started, as converge-agent sends it for a task that
// ends within its started grace (no ReportProgress; CONVERGE_FANOUT_STARTED_REPORT below). It reports per task the wall and CPU time, the bytes allocated and the
// memory the run held: the claim/complete path without process spawns, git or the Registry.
// The sizes grow by 10× so an O(tasks) step shows as a growing µs/task (P1b in
// bench/RESULTS.md), and a per-task memory that grows with n as a Scheduler holding the run.
//
// Environment:
//
//   - CONVERGE_FANOUT_SIZES (comma-separated) replaces the sizes, e.g. 100,1000,10000,100000
//     (a task list holds at most 10,000 tasks: a larger size runs as that many executions at
//     once, n tasks in the Scheduler together);
//
//   - CONVERGE_FANOUT_MAX_PARALLEL is the execution's max_parallel (tasks per wave): 2 (the
//     agents, so n/2 waves of two: a wave barrier every second completion) unless set; bench/run.sh
//     sets 1024 (the contract's maximum, as bench/dag does: n/1024 waves, the fan-out);
//
//   - CONVERGE_FANOUT_AGENTS is how many agents run (2, as bench/dag's and ninja -j 2, unless
//     set): every change of an execution is one transaction at a time, which takes the requests
//     waiting when it starts, so the agents' count is the size of a transaction's group;
//
//   - CONVERGE_FANOUT_STARTED_REPORT (any value) sends TASK_STARTED in its own ReportProgress
//     before the completion, as converge-agent does for a task longer than its started grace (and
//     as agents before it did for every task): one more Scheduler transaction per task;
//
//   - CONVERGE_FANOUT_SQLITE_MEMORY (any value) runs the SQLite backend on an in-memory database, as
//     `converge dev --in-memory` (bench/dag's embedded runs) does, instead of a file in WAL mode;
//
//   - CONVERGE_FANOUT_WARMUP (any value) first runs a fan-out of 2×agents tasks on the same
//     Scheduler and store, untimed (warmUp): the timed run then measures a Scheduler that has
//     served a run before (its pool's connections open, their statements prepared, the
//     database's catalogs read), without the first run's cost of a fresh process and database;
//
//   - CONVERGE_FANOUT_SQL (any value) prints every statement's count per task, on Postgres with its
//     mean time ([b]: sent in a batch), and on Postgres each table's and index's pages and entries
//     read per task; roundtrips/task and statements/task are always reported on Postgres; on
//     SQLite statements/task only with it (SQLite's statement trace, which costs CPU).
//
// On Postgres it also reports the server's side of the run (fanout_pgstats_test.go): the run
// database's backends' CPU (pg-cpu-µs/task), its WAL (wal-B/task), pages hit and read per task
// and the checkpoints made meanwhile.
//
//	go test -run '^$' -bench BenchmarkFanout -benchtime 1x ./
//	go test -run '^$' -bench 'BenchmarkFanout/(sqlite|postgres)/fused=true/' -benchtime 1x ./  # the growth run of make bench
func BenchmarkFanout(b *testing.B) {
	sizes := []int{100, 1000, 10000}
	width := 2
	if env := os.Getenv("CONVERGE_FANOUT_MAX_PARALLEL"); env != "" {
		w, err := strconv.Atoi(env)
		if err != nil || w <= 0 || w > 1024 {
			b.Fatalf("CONVERGE_FANOUT_MAX_PARALLEL: %q is not a max_parallel from 1 to 1024", env)
		}
		width = w
	}
	if env := os.Getenv("CONVERGE_FANOUT_SIZES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("CONVERGE_FANOUT_SIZES: %q is not a task count", f)
			}
			sizes = append(sizes, n)
		}
	}
	agents := dagEnvInt(b, "CONVERGE_FANOUT_AGENTS", 2)
	if agents > 64 {
		b.Fatalf("CONVERGE_FANOUT_AGENTS: %d is not an agent count from 1 to 64", agents)
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, fused := range []bool{false, true} {
			for _, n := range sizes {
				b.Run(fmt.Sprintf("%s/fused=%v/tasks=%d", name, fused, n), func(b *testing.B) {
					for range b.N {
						fanout(b, name, n, agents, min(width, n), fused)
					}
				})
			}
		}
	}
}

// serveBench serves a Scheduler with its driver on st over bufconn (every interceptor), for the
// benchmarks: its client, and the context of its background work, which cancel ends.
func serveBench(b *testing.B, st store.Store) (schedulerv1.SchedulerServiceClient, context.Context, context.CancelFunc) {
	s := New(st, WithWorkDir(b.TempDir()))
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	conn := servertest.Serve(b, server.Config{
		Name:     "scheduler-bench",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}},
	})
	return schedulerv1.NewSchedulerServiceClient(conn), ctx, cancel
}

// benchStore opens a fresh store of backend name; on Postgres also its database's URL.
func benchStore(b *testing.B, name string, tracer *sqlCounter) (store.Store, string) {
	var (
		st  store.Store
		url string
		err error
	)
	if name == "postgres" {
		opts := []database.Option{database.WithMigrate()}
		if tracer != nil {
			opts = append(opts, database.WithTracer(tracer))
		}
		url = dbtest.Postgres(b)
		st, err = postgres.New(b.Context(), url, opts...)
	} else {
		path := dbtest.SQLite(b)
		if os.Getenv("CONVERGE_FANOUT_SQLITE_MEMORY") != "" {
			path = database.SQLiteMemory // converge dev --in-memory's, as bench/dag runs it
		}
		st, err = sqlite.New(b.Context(), path, database.WithMigrate())
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st, url
}

func fanout(b *testing.B, backend string, n, agents, width int, fused bool) {
	b.StopTimer()
	sqls := newSQLCounter()
	countSQLite := backend == "sqlite" && os.Getenv("CONVERGE_FANOUT_SQL") != ""
	if countSQLite {
		traceSQLite()
	}
	st, url := benchStore(b, backend, sqls)
	var pg *pgSide
	if url != "" {
		pg = watchPostgres(b, url)
	}
	c, ctx, cancel := serveBench(b, st)
	defer cancel()
	if os.Getenv("CONVERGE_FANOUT_WARMUP") != "" {
		warmUp(b, ctx, c, agents, fused)
	}
	// A task list holds at most maxListTasks tasks (the contract's limit): a larger fan-out is
	// that many lists' executions at once, which the agents claim from without an execution
	// filter — n tasks in the Scheduler's store and its claim path at the same time.
	var specs []*schedulerv1.TaskListSpec
	for i := range n {
		if i%maxListTasks == 0 {
			specs = append(specs, &schedulerv1.TaskListSpec{Name: fmt.Sprintf("fanout %d", len(specs)+1)})
		}
		id := fmt.Sprintf("t%06d", i)
		spec := specs[len(specs)-1]
		spec.Tasks = append(spec.Tasks, fanoutTask(id))
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	mem := watchMemory(n)
	sqls.reset()
	if countSQLite {
		sqliteCounting.Store(sqls)
	}
	if pg != nil {
		pg.start(b)
	}
	cpu0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	var executions []string
	for _, spec := range specs {
		executions = append(executions, startRun(b, ctx, c, spec, width))
	}
	runAgents(b, ctx, c, agents, executions, fused, mem)
	// The run's wall ends at its last completion, as bench/dag's ends with the execution: after it
	// an agent's long-poll ClaimTask may still wait out its 200 ms before the agent sees the
	// executions ended, which is the benchmark's own end detection (reported as drain-ms).
	end := time.Now()
	elapsed := end.Sub(start)
	if last := mem.last.Load(); last != 0 {
		elapsed = time.Unix(0, last).Sub(start)
		b.ReportMetric(float64(end.Sub(time.Unix(0, last)).Microseconds())/1000, "drain-ms")
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if pg != nil {
		pg.report(b, n)
	}
	sqliteCounting.Store(nil)
	if backend == "postgres" || countSQLite {
		rt, stmts := sqls.totals()
		if backend == "postgres" {
			b.ReportMetric(float64(rt)/float64(n), "roundtrips/task")
		}
		b.ReportMetric(float64(stmts)/float64(n), "statements/task")
		if os.Getenv("CONVERGE_FANOUT_SQL") != "" {
			sqls.print(os.Stderr, n)
		}
	}
	mem.stop()
	// The memory: absolute (bench/report derives the memory per task from the slope between
	// sizes: what one more task in the run costs) and above the start, per task.
	b.ReportMetric(float64(mem.liveMid)/(1<<20), "live-mid-MB")
	b.ReportMetric(float64(mem.rssPeak)/(1<<20), "rss-peak-MB")
	b.ReportMetric(float64(max(mem.liveMid-mem.live0, 0))/float64(n), "live-B/task")
	b.ReportMetric(float64(max(mem.rssPeak-mem.rss0, 0))/float64(n), "rss-B/task")
	b.ReportMetric(float64(width), "max-parallel")
	b.ReportMetric(float64(len(executions)), "executions")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/task")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(elapsed.Microseconds())/float64(n), "µs/task")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "alloc-B/task")
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/float64(n), "heap-B/task")
	b.StartTimer()
}

// warmUp runs a fan-out of 2×agents tasks on the Scheduler before the timed run, untimed: the
// store's connections opened and their statements prepared, the database's catalogs read, the
// validators built, as in a Scheduler that has served a run before.
func warmUp(b *testing.B, ctx context.Context, c schedulerv1.SchedulerServiceClient, agents int, fused bool) {
	spec := &schedulerv1.TaskListSpec{Name: "warm-up"}
	for i := range 2 * agents {
		spec.Tasks = append(spec.Tasks, fanoutTask(fmt.Sprintf("t%06d", i)))
	}
	runAgents(b, ctx, c, agents, []string{startRun(b, ctx, c, spec, 2*agents)}, fused, nil)
}

// fanoutTask is a fan-out's no-op task id.
func fanoutTask(id string) *commonv1.Task {
	return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN,
		Command: "true", File: "out/" + id + ".txt"}
}

// startRun creates spec's task list and starts its execution with maxParallel: the execution's id.
func startRun(b *testing.B, ctx context.Context, c schedulerv1.SchedulerServiceClient, spec *schedulerv1.TaskListSpec, maxParallel int) string {
	tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	e, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(maxParallel)}})
	if err != nil {
		b.Fatal(err)
	}
	return e.GetExecution().GetId()
}

// runAgents runs agents benchAgents on executions until they have nothing left.
func runAgents(b *testing.B, ctx context.Context, c schedulerv1.SchedulerServiceClient, agents int, executions []string, fused bool, mem *memWatch) {
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for i := range agents {
		wg.Go(func() { errs <- benchAgent(ctx, c, fmt.Sprintf("agent-%d", i), executions, fused, mem) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// maxListTasks is the most tasks CreateTaskList takes in one list.
const maxListTasks = 10000

// benchAgent claims, reports and completes until the executions have nothing left for it (it
// claims from the one execution, or from any when there are several); fused: each completion
// claims the next assignment (claim_next), as converge-agent does.
func benchAgent(ctx context.Context, c schedulerv1.SchedulerServiceClient, instance string, executions []string, fused bool, mem *memWatch) error {
	startedReport := os.Getenv("CONVERGE_FANOUT_STARTED_REPORT") != ""
	execution := ""
	if len(executions) == 1 {
		execution = executions[0]
	}
	claim := &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: []string{"executor:command", "integration"},
		ExecutionId: execution}
	var next *schedulerv1.ClaimedAssignment
	for {
		ca := next
		if ca == nil {
			res, err := c.ClaimTask(ctx, &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: claim.Capabilities,
				Wait: durationpb.New(200 * time.Millisecond), ExecutionId: execution})
			if err != nil {
				return err
			}
			ca = res.GetAssignment()
		}
		if ca == nil {
			done, err := allEnded(ctx, c, executions)
			if err != nil || done {
				return err
			}
			continue
		}
		a := ca.GetAssignment()
		started := &schedulerv1.AgentEvent{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "started",
			Time: timestamppb.Now()}
		req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: instance,
			FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1}
		if startedReport {
			if _, err := c.ReportProgress(ctx, &schedulerv1.ReportProgressRequest{AssignmentId: a.GetId(), InstanceId: instance,
				FencingToken: a.GetFencingToken(), ReportSeq: 1, Message: "started",
				Events: []*schedulerv1.AgentEvent{started}}); err != nil {
				return err
			}
		} else {
			req.Events = []*schedulerv1.AgentEvent{started}
		}
		if fused {
			req.ClaimNext = claim
		}
		res, err := c.CompleteTask(ctx, req)
		if err != nil {
			return err
		}
		mem.taskDone()
		next = res.GetNext()
	}
}

func allEnded(ctx context.Context, c schedulerv1.SchedulerServiceClient, executions []string) (bool, error) {
	for _, id := range executions {
		g, err := c.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		if err != nil {
			return false, err
		}
		if !ended(g.GetExecution()) {
			return false, nil
		}
	}
	return true, nil
}

// memWatch measures the process's memory while a run goes on: the Go heap live at mid-run (what
// the process holds then, not garbage awaiting a cycle) and the peak resident set
// (/proc/self/statm sampled every 20 ms; it also counts SQLite's pages, which modernc's libc
// allocates outside the Go heap, and the Go runtime keeps RSS it once used, so it is a
// high-water mark).
//
// The live heap is the runtime's own figure (/gc/heap/live:bytes) from the first collection that
// ends after half the tasks are done, or, when the run ends before one, from a collection forced
// after the run (untimed). Until 2026-12-07 a collection was forced at mid-run, inside the timed
// run: it cost a 100-task Postgres run ≈ 0.12 ms of CPU per task (0.73–0.85 against 0.62–0.72
// ms, 3 alternated pairs) for the same figure (11.5 MiB both ways; 14.5 against 14.4 MiB at
// 1,000 tasks).
type memWatch struct {
	n         int64
	completed atomic.Int64
	done      chan struct{}
	finished  chan struct{}
	live0     int64 // live heap at the GC before the start
	liveMid   int64 // live heap at the first GC after mid-run (0 until then)
	midCycle  uint64
	rss0      int64
	rssPeak   int64
	last      atomic.Int64 // when the n-th completion was answered (Unix ns)
}

func watchMemory(n int) *memWatch {
	live0, _ := liveHeap() // the caller's collection's, just before
	m := &memWatch{n: int64(n), done: make(chan struct{}), finished: make(chan struct{}), live0: live0, rss0: rss()}
	m.rssPeak = m.rss0
	go func() {
		defer close(m.finished)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			m.rssPeak = max(m.rssPeak, rss())
			if m.liveMid == 0 && 2*m.completed.Load() >= m.n {
				live, cycle := liveHeap()
				if m.midCycle == 0 {
					m.midCycle = cycle + 1 // the next collection's: it ends after mid-run
				} else if cycle >= m.midCycle {
					m.liveMid = live
				}
			}
			select {
			case <-m.done:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// taskDone counts a completion (the mid-run live heap waits for half of them).
func (m *memWatch) taskDone() {
	if m != nil && m.completed.Add(1) == m.n {
		m.last.Store(time.Now().UnixNano())
	}
}

// stop ends the sampling (after the timed run): without a collection since mid-run, it forces
// one for the live heap.
func (m *memWatch) stop() {
	close(m.done)
	<-m.finished
	if m.liveMid == 0 {
		runtime.GC()
		m.liveMid, _ = liveHeap()
	}
}

// liveHeap answers the heap the last collection found live and how many collections have ended.
func liveHeap() (live int64, cycles uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64()), s[1].Value.Uint64()
}

// rss is the resident set in bytes (0 where /proc is missing).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// cpuTime is the process's user + system CPU time: on a shared machine it says what a task costs
// better than the wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
