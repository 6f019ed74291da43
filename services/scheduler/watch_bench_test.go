package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// countingStore is a real store that counts the log and execution reads (what a watcher costs)
// and the transactions of executions (what a waiting claim costs, claimwake_test.go).
type countingStore struct {
	store.Store
	readLog, getExecution, updateExecution atomic.Int64
}

func (c *countingStore) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	c.updateExecution.Add(1)
	return c.Store.UpdateExecution(ctx, id, fn)
}

func (c *countingStore) ReadLog(ctx context.Context, q store.LogQuery) ([]*commonv1.LogEntry, bool, int64, error) {
	c.readLog.Add(1)
	return c.Store.ReadLog(ctx, q)
}

func (c *countingStore) GetExecution(ctx context.Context, id string) (*schedulerv1.Execution, []*schedulerv1.Wave, error) {
	c.getExecution.Add(1)
	return c.Store.GetExecution(ctx, id)
}

// BenchmarkWatchers runs a fan-out of 200 no-op tasks (two agents, fused) while w WatchExecution
// streams (half with snapshots) follow it from seq 0, and reports the store's log and execution
// reads per log entry of the run, and the CPU per task.
//
//	go test -run '^$' -bench BenchmarkWatchers -benchtime 1x ./
func BenchmarkWatchers(b *testing.B) {
	for _, w := range []int{0, 1, 8, 32} {
		b.Run(fmt.Sprintf("sqlite/watchers=%d", w), func(b *testing.B) {
			for range b.N {
				watchRun(b, 200, w, true, 0)
			}
		})
	}
	// Many streams without snapshots, as bench/load opens them (R8): the cost per stream per event,
	// one entry per message and up to 100 per message.
	for _, batch := range []int{1, 100} {
		b.Run(fmt.Sprintf("sqlite/watchers=200/entries-only/batch=%d", batch), func(b *testing.B) {
			for range b.N {
				watchRun(b, 200, 200, false, batch)
			}
		})
	}
}

// watchRun runs n tasks under watchers streams, each asking for up to batch entries per message.
func watchRun(b *testing.B, n, watchers int, snapshots bool, batch int) {
	b.StopTimer()
	sqliteStore, _ := benchStore(b, "sqlite", nil)
	st := &countingStore{Store: sqliteStore}
	c, ctx, cancel := serveBench(b, st)
	defer cancel()
	spec := &schedulerv1.TaskListSpec{Name: "watched"}
	for i := range n {
		id := fmt.Sprintf("t%06d", i)
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN,
			Command: "true", File: "out/" + id + ".txt"})
	}
	tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		b.Fatal(err)
	}
	e, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: 2}})
	if err != nil {
		b.Fatal(err)
	}
	id := e.GetExecution().GetId()
	var (
		wg                 sync.WaitGroup
		received, messages atomic.Int64
	)
	errs := make(chan error, watchers+2)
	for i := range watchers {
		stream, err := c.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: id, IncludeSnapshots: snapshots && i%2 == 1,
			MaxEntriesPerMessage: int32(batch)})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func(stream grpc.ServerStreamingClient[schedulerv1.WatchExecutionResponse]) {
			defer wg.Done()
			for {
				msg, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					errs <- nil
					return
				}
				if err != nil {
					errs <- err
					return
				}
				n := int64(len(msg.GetEntries()))
				if msg.GetEntry() != nil {
					n++
				}
				if n > 0 {
					received.Add(n)
					messages.Add(1)
				}
			}
		}(stream)
	}
	reads0, gets0 := st.readLog.Load(), st.getExecution.Load()
	cpu0 := cpuTime()
	b.StartTimer()
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- benchAgent(ctx, c, fmt.Sprintf("agent-%d", i), []string{id}, true, nil)
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu := cpuTime() - cpu0
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	got, _, err := st.Store.GetExecution(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	entries := float64(got.GetLastSeq())
	if want := int64(watchers) * got.GetLastSeq(); received.Load() != want {
		b.Fatalf("the watchers received %d entries, want %d", received.Load(), want)
	}
	b.ReportMetric(float64(st.readLog.Load()-reads0)/entries, "log-reads/entry")
	b.ReportMetric(float64(st.getExecution.Load()-gets0)/entries, "exec-reads/entry")
	b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/task")
	if watchers > 0 {
		// Per entry a stream received (one per message unless batched), and entries per message.
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(received.Load()), "cpu-ns/entry")
		b.ReportMetric(float64(received.Load())/float64(messages.Load()), "entries/message")
	}
	b.StartTimer()
}
