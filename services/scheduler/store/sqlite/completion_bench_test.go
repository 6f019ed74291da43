package sqlite

import (
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// BenchmarkCompletionTransaction: the store's side of a fused completion, one UpdateExecution
// per op: the held assignment read and completed, the wave and the execution counted, the next
// pending assignment claimed, two task statuses and a log entry, as the runner does it at
// max_parallel above the task count.
func BenchmarkCompletionTransaction(b *testing.B) {
	for _, where := range []string{"memory", "file"} {
		b.Run(where, func(b *testing.B) {
			path := func() string {
				if where == "file" {
					return dbtest.SQLite(b)
				}
				return database.SQLiteMemory
			}
			// One wave of n tasks, as a fan-out at max_parallel n (bench/dag's); a new run
			// (outside the timer) when it has no pending task left.
			const n = 1000
			s, _ := placementsRunAt(b, path(), n)
			ctx := b.Context()
			held := ""
			i, ops := 0, 0
			var cpu, from time.Duration // the process's CPU time in the loop, outside the setups
			b.ReportAllocs()
			for b.Loop() {
				if ops == 0 {
					from = cpuTime(b)
				}
				ops++
				if i == n-1 {
					b.StopTimer()
					cpu += cpuTime(b) - from
					s, _ = placementsRunAt(b, path(), n)
					held, i = "", 0
					from = cpuTime(b)
					b.StartTimer()
				}
				i++
				err := s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
					w, err := tx.Wave(1)
					if err != nil {
						return err
					}
					e := tx.Execution()
					if held != "" {
						a, err := tx.Assignment(held)
						if err != nil {
							return err
						}
						a.Status, a.CompleteTime, a.LeaseExpireTime = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, timestamppb.New(tx.Now()), nil
						a.Result, a.CommitSha = schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, "0123456789abcdef0123456789abcdef01234567"
						if err := tx.PutAssignment(a); err != nil {
							return err
						}
						if err := tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_COMPLETED); err != nil {
							return err
						}
						w.CompletedCount++
						e.CompletedTasks++
					}
					next, err := tx.NextPending(1, nil)
					if err != nil {
						return err
					}
					next.Status, next.InstanceId, next.FencingToken = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, "agent-1", int64(i)
					next.AssignTime, next.LeaseExpireTime = timestamppb.New(tx.Now()), timestamppb.New(tx.Now().Add(time.Minute))
					if err := tx.PutAssignment(next); err != nil {
						return err
					}
					if err := tx.SetTaskStatus(next.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS); err != nil {
						return err
					}
					held = next.GetId()
					w.ActiveAgents = 1
					if err := tx.PutWave(w); err != nil {
						return err
					}
					e.TotalAttempts++
					if err := tx.Append(&commonv1.LogEntry{EventType: commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, Message: "done", TaskId: next.GetTaskId()}); err != nil {
						return err
					}
					return tx.PutExecution(e)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			cpu += cpuTime(b) - from
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(ops), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user + system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
