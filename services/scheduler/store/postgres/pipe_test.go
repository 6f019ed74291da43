package postgres_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// roundTrips counts what a connection sends: a statement outside a batch is one round trip, a
// batch is one.
type roundTrips struct{ n atomic.Int64 }

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// The execution's row is locked for the whole of an UpdateExecution, so its round trips are
// what every other writer of the run waits for. A lease holder's report (read the assignment,
// extend its lease, log an event) is two: BEGIN, the lock and the hinted assignment in one, the
// deferred writes and COMMIT in the other (it was six: BEGIN, lock, read, update, the log batch,
// COMMIT); a completion that reads the assignment and its wave, writes both and the task's
// status, then looks for the next pending task, is three.
func TestUpdateExecutionRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := &roundTrips{}
	s, err := postgres.New(ctx, dbtest.Postgres(t), database.WithMigrate(), database.WithTracer(rt))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })

	spec := &schedulerv1.TaskListSpec{Name: "rt", Tasks: []*commonv1.Task{
		{Id: "t0", Title: "task", File: "f0.go"}, {Id: "t1", Title: "task", File: "f1.go"}}}
	_, err = s.CreateTaskList(ctx, "tl", spec, nil)
	require.NoError(t, err)
	w := &schedulerv1.Wave{Id: "ex/w1", WaveNumber: 1, Status: schedulerv1.WaveStatus_WAVE_STATUS_RUNNING, TaskCount: 2}
	var as []*store.Assignment
	for i, task := range []string{"t0", "t1"} {
		as = append(as, &store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/" + task,
			Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, WaveId: w.Id, WaveNumber: 1, TaskId: task,
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1}, Position: int32(i)})
	}
	e := &schedulerv1.Execution{Id: "ex", TaskListId: "tl", Status: schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		WaveCount: 1, CurrentWave: 1, TotalTasks: 2}
	require.NoError(t, s.CreateExecution(ctx, e, []*schedulerv1.Wave{w}, as, nil))

	measure := func(ctx context.Context, fn func(tx store.ExecTx) error) int64 {
		before := rt.n.Load()
		require.NoError(t, s.UpdateExecution(ctx, "ex", fn))
		return rt.n.Load() - before
	}
	report := func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/t0")
		require.NoError(t, err)
		a.Status, a.InstanceId = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING, "agent"
		a.LeaseExpireTime = timestamppb.New(tx.Now().Add(60e9))
		require.NoError(t, tx.PutAssignment(a))
		return tx.Append(&commonv1.LogEntry{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "started"})
	}
	require.EqualValues(t, 2, measure(store.WithAssignmentHint(ctx, "ex/t0"), report))
	require.EqualValues(t, 3, measure(ctx, report), "without the hint the assignment is one more round trip")
	async := func(tx store.ExecTx) error {
		tx.CommitAsync()
		return report(tx)
	}
	require.EqualValues(t, 2, measure(store.WithAssignmentHint(ctx, "ex/t0"), async),
		"an asynchronous commit sets synchronous_commit in the commit's round trip")
	var sync string
	require.NoError(t, s.Pool().QueryRow(ctx, "SHOW synchronous_commit").Scan(&sync))
	require.Equal(t, "on", sync, "only for that transaction (SET LOCAL)")

	complete := func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/t0")
		require.NoError(t, err)
		w, err := tx.Wave(a.GetWaveNumber())
		require.NoError(t, err)
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED
		require.NoError(t, tx.PutAssignment(a))
		w.CompletedCount++
		require.NoError(t, tx.PutWave(w))
		require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_COMPLETED))
		next, err := tx.NextPending(1, nil)
		require.NoError(t, err)
		require.Equal(t, "ex/t1", next.GetId())
		return tx.Append(&commonv1.LogEntry{EventType: commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, Message: "done"})
	}
	require.EqualValues(t, 3, measure(store.WithAssignmentHint(ctx, "ex/t0"), complete))
	_, _, err = s.GetExecution(ctx, "ex")
	require.NoError(t, err)
}
