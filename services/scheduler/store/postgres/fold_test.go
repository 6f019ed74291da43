package postgres_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// statements records the text of every statement sent, batched or not.
type statements struct {
	mu   sync.Mutex
	sqls []string
}

func (c *statements) add(sql string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sqls = append(c.sqls, strings.Join(strings.Fields(sql), " "))
}

func (c *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.add(d.SQL)
	return ctx
}
func (c *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *statements) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.add(d.SQL)
}
func (c *statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// count answers how many statements since the last count start with prefix, and forgets them.
func (c *statements) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.sqls {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	c.sqls = nil
	return n
}

// A claim and a completion each write an assignment and its task's status: on Postgres the
// status rides in the assignment's UPDATE (one statement, not two), in the order the writes
// were made, and never into a write of an earlier savepoint (a failed request's status is undone
// with it). A grouped transaction's savepoints are not released (one statement less per request).
func TestTaskStatusRidesInTheAssignmentUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sqls := &statements{}
	s := tracedStore(t, sqls)
	oneWaveRun(t, s, "fold", "t0", "t1", "t2", "t3")
	status := func(task string) string {
		var st string
		require.NoError(t, s.Pool().QueryRow(ctx, `SELECT status FROM tasks WHERE task_list_id = 'tl' AND task_key = $1`, task).Scan(&st))
		return st
	}
	name := func(st commonv1.TaskStatus) string {
		n, err := store.TaskStatusName(st)
		require.NoError(t, err)
		return n
	}
	put := func(tx store.ExecTx, id string, st schedulerv1.AssignmentStatus) {
		a, err := tx.Assignment(id)
		require.NoError(t, err)
		a.Status, a.InstanceId, a.LeaseExpireTime = st, "agent", timestamppb.New(tx.Now().Add(60e9))
		require.NoError(t, tx.PutAssignment(a))
	}
	const standalone = "UPDATE tasks SET status"
	pending := name(commonv1.TaskStatus_TASK_STATUS_PENDING)

	// A claim: the assignment leased, the wave's count, then the task in progress.
	sqls.count("")
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		w, err := tx.Wave(1)
		require.NoError(t, err)
		put(tx, "ex/t0", schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED)
		w.ActiveAgents++
		require.NoError(t, tx.PutWave(w))
		return tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS)
	}))
	require.Equal(t, 0, sqls.count(standalone), "the status rode in the assignment's update")
	require.Equal(t, name(commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS), status("t0"))

	// Two statuses after one assignment write: the later one stands.
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		put(tx, "ex/t1", schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED)
		require.NoError(t, tx.SetTaskStatus("t1", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))
		return tx.SetTaskStatus("t1", commonv1.TaskStatus_TASK_STATUS_COMPLETED)
	}))
	require.Equal(t, 1, sqls.count(standalone), "the second status is a statement of its own, after the first")
	require.Equal(t, name(commonv1.TaskStatus_TASK_STATUS_COMPLETED), status("t1"))

	// Grouped requests: each in a savepoint. The second request's status of t2 must not ride in
	// the first request's write of t2's assignment: the second fails, and its status with it.
	errFail := errors.New("refused")
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		require.NoError(t, tx.Savepoint(func() error {
			put(tx, "ex/t2", schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED)
			return nil
		}))
		require.ErrorIs(t, tx.Savepoint(func() error {
			require.NoError(t, tx.SetTaskStatus("t2", commonv1.TaskStatus_TASK_STATUS_FAILED))
			return errFail
		}), errFail)
		return tx.Savepoint(func() error {
			put(tx, "ex/t3", schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED)
			return tx.SetTaskStatus("t3", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS)
		})
	}))
	require.Equal(t, pending, status("t2"), "the failed request's status was undone with it")
	require.Equal(t, name(commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS), status("t3"))
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/t2")
		require.NoError(t, err)
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, a.GetStatus(), "the first request committed")
		return nil
	}))
	all := strings.Join(sqls.sqls, "\n")
	require.Equal(t, 0, sqls.count("RELEASE SAVEPOINT"), "savepoints are not released:\n%s", all)
}
