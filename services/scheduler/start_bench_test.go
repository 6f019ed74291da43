package scheduler

import (
	"fmt"
	"os"
	"testing"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// BenchmarkRunStart measures what P2b's wall holds before the first claim: CreateTaskList of
// bench/dag's random DAG (1,000 tasks, 5,000 edges, seed 1, as bench/dag builds it) and
// StartExecution (plan, claim order, the execution's waves and assignments stored), through the
// Scheduler's gRPC server, on each store. It reports each RPC's wall and the process's CPU per
// run (getrusage).
//
//	go test -run '^$' -bench BenchmarkRunStart -benchtime 5x -cpuprofile cpu.prof ./
func BenchmarkRunStart(b *testing.B) {
	n, m := dagEnvInt(b, "CONVERGE_DAG_TASKS", 1000), dagEnvInt(b, "CONVERGE_DAG_EDGES", 5000)
	spec := &schedulerv1.TaskListSpec{Name: "dag random"}
	for i, ds := range clustertest.RandomDAG(n, m, 1) {
		t := &commonv1.Task{Id: fmt.Sprintf("t%04d", i), Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%04d", i)}
		for _, d := range ds {
			t.DependsOn = append(t.DependsOn, fmt.Sprintf("t%04d", d))
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(fmt.Sprintf("%s/tasks=%d", name, n), func(b *testing.B) {
			sqls := newSQLCounter()
			st, _ := benchStore(b, name, sqls)
			c, ctx, cancel := serveBench(b, st)
			defer cancel()
			var create, start, cpu time.Duration
			b.ResetTimer()
			for range b.N {
				cpu0, t0 := cpuTime(), time.Now()
				tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
					Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(min(n, 1024)), Dispatch: schedulerv1.DispatchMode_DISPATCH_MODE_EAGER}}); err != nil {
					b.Fatal(err)
				}
				create, start, cpu = create+t1.Sub(t0), start+time.Since(t1), cpu+cpuTime()-cpu0
			}
			b.ReportMetric(float64(create.Microseconds())/1000/float64(b.N), "create-ms")
			b.ReportMetric(float64(start.Microseconds())/1000/float64(b.N), "start-ms")
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms")
			if name == "postgres" && os.Getenv("CONVERGE_FANOUT_SQL") != "" {
				sqls.print(os.Stderr, b.N) // per run, not per task
			}
		})
	}
}
