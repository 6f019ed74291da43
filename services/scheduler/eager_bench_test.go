package scheduler

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// BenchmarkRandomDAG runs bench/dag's random DAG (P2b: 1,000 tasks, 5,000 uniform random edges,
// seed 1, depth 26) through the Scheduler's gRPC server with two in-process agents (fused
// complete-and-claim, one TASK_STARTED report per task, as BenchmarkFanout's), in strict and in
// eager dispatch side by side: the Scheduler's CPU per task in each mode (what eager's
// bookkeeping costs), the statements per task on Postgres, the agents' idle time per task (from
// a completion that brought no next assignment to the next lease) and the early leases.
//
// Environment: CONVERGE_DAG_TASKS, CONVERGE_DAG_EDGES (1,000 / 5,000); CONVERGE_DAG_WORK, a
// duration each agent spends per task before it completes it (0: the Scheduler alone; a few ms
// make the agents, not the Scheduler, the bottleneck, as converge-agent's process start does);
// CONVERGE_FANOUT_SQL as in BenchmarkFanout.
//
//	go test -run '^$' -bench BenchmarkRandomDAG -benchtime 1x ./
func BenchmarkRandomDAG(b *testing.B) {
	n, m := dagEnvInt(b, "CONVERGE_DAG_TASKS", 1000), dagEnvInt(b, "CONVERGE_DAG_EDGES", 5000)
	var work time.Duration
	if env := os.Getenv("CONVERGE_DAG_WORK"); env != "" {
		d, err := time.ParseDuration(env)
		if err != nil {
			b.Fatalf("CONVERGE_DAG_WORK: %v", err)
		}
		work = d
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, mode := range []schedulerv1.DispatchMode{schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES, schedulerv1.DispatchMode_DISPATCH_MODE_EAGER} {
			label := "strict"
			if mode == schedulerv1.DispatchMode_DISPATCH_MODE_EAGER {
				label = "eager"
			}
			b.Run(fmt.Sprintf("%s/%s/tasks=%d", name, label, n), func(b *testing.B) {
				for range b.N {
					randomDAGRun(b, name, mode, n, m, work)
				}
			})
		}
	}
}

func dagEnvInt(b *testing.B, name string, def int) int {
	env := os.Getenv(name)
	if env == "" {
		return def
	}
	v, err := strconv.Atoi(env)
	if err != nil || v <= 0 {
		b.Fatalf("%s: %q is not a positive number", name, env)
	}
	return v
}

func randomDAGRun(b *testing.B, backend string, mode schedulerv1.DispatchMode, n, m int, work time.Duration) {
	b.StopTimer()
	sqls := newSQLCounter()
	st, _ := benchStore(b, backend, sqls)
	c, ctx, cancel := serveBench(b, st)
	defer cancel()
	spec := &schedulerv1.TaskListSpec{Name: "random dag"}
	for i, ds := range clustertest.RandomDAG(n, m, 1) {
		id := fmt.Sprintf("t%04d", i)
		t := &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true", File: "out/" + id + ".txt"}
		for _, d := range ds {
			t.DependsOn = append(t.DependsOn, fmt.Sprintf("t%04d", d))
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	sqls.reset()
	cpu0 := cpuTime()
	b.StartTimer()
	start := time.Now()
	e, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(min(n, 1024)), Dispatch: mode}})
	if err != nil {
		b.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		idle time.Duration
	)
	errs := make(chan error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := dagAgent(ctx, c, fmt.Sprintf("agent-%d", i), e.GetExecution().GetId(), work)
			mu.Lock()
			idle += id
			mu.Unlock()
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if backend == "postgres" {
		rt, stmts := sqls.totals()
		b.ReportMetric(float64(rt)/float64(n), "roundtrips/task")
		b.ReportMetric(float64(stmts)/float64(n), "statements/task")
		if os.Getenv("CONVERGE_FANOUT_SQL") != "" {
			sqls.print(os.Stderr, n)
		}
	}
	entries, err := clustertest.ExecutionLog(ctx, c, e.GetExecution().GetId())
	if err != nil {
		b.Fatal(err)
	}
	early := 0
	for _, en := range entries {
		if en.GetEventType() == commonv1.EventType_EVENT_TYPE_LEASE_GRANTED && en.GetContext().AsMap()["eager"] == true {
			early++
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/task")
	b.ReportMetric(float64(elapsed.Microseconds())/float64(n), "µs/task")
	b.ReportMetric(float64(idle.Microseconds())/float64(n), "idle-µs/task")
	b.ReportMetric(float64(early), "early")
	b.StartTimer()
}

// dagAgent claims, reports and completes (fused) until the execution ended; it answers its idle
// time (from a completion or a claim that brought nothing to the next lease).
func dagAgent(ctx context.Context, c schedulerv1.SchedulerServiceClient, instance, execution string, work time.Duration) (time.Duration, error) {
	claim := &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: []string{"executor:command", "integration"}, ExecutionId: execution}
	var (
		next      *schedulerv1.ClaimedAssignment
		idle      time.Duration
		idleSince = time.Now()
	)
	for {
		ca := next
		if ca == nil {
			res, err := c.ClaimTask(ctx, &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: claim.Capabilities,
				Wait: durationpb.New(200 * time.Millisecond), ExecutionId: execution})
			if err != nil {
				return idle, err
			}
			ca = res.GetAssignment()
		}
		if ca == nil {
			done, err := allEnded(ctx, c, []string{execution})
			if err != nil || done {
				return idle, err
			}
			continue
		}
		if next == nil {
			idle += time.Since(idleSince)
		}
		a := ca.GetAssignment()
		if _, err := c.ReportProgress(ctx, &schedulerv1.ReportProgressRequest{AssignmentId: a.GetId(), InstanceId: instance,
			FencingToken: a.GetFencingToken(), ReportSeq: 1, Message: "started",
			Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "started"}}}); err != nil {
			return idle, err
		}
		if work > 0 {
			time.Sleep(work) //nolint:forbidigo // the agent's work on the task is what is simulated
		}
		req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: instance,
			FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, ClaimNext: claim}
		res, err := c.CompleteTask(ctx, req)
		if err != nil {
			return idle, err
		}
		next = res.GetNext()
		if next == nil {
			idleSince = time.Now()
		}
	}
}
