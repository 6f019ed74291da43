package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A completion that leases the agent's next assignment in its transaction (store.NextPendingHint)
// reads the wave's next pending assignment with the lock: NextPending costs no round trip of its
// own, and answers what it would have queried, the transaction's own writes included (an
// assignment put back to pending, the read-ahead one written), for the kinds asked.
func TestNextPendingReadWithTheLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := &roundTrips{}
	s := tracedStore(t, rt)
	oneWaveRun(t, s, "next", "t0", "t1", "t2")

	hinted := store.WithNextPendingHint(store.WithAssignmentHint(ctx, "ex/t0"))
	errRollback := errors.New("rolled back")
	// run runs fn in a transaction and answers its round trips.
	run := func(ctx context.Context, fn func(tx store.ExecTx) error) int64 {
		before := rt.n.Load()
		if err := s.UpdateExecution(ctx, "ex", fn); !errors.Is(err, errRollback) {
			require.NoError(t, err)
		}
		return rt.n.Load() - before
	}
	put := func(tx store.ExecTx, id string, st schedulerv1.AssignmentStatus) {
		a, err := tx.Assignment(id)
		require.NoError(t, err)
		a.Status, a.InstanceId, a.LeaseExpireTime = st, "agent", timestamppb.New(tx.Now().Add(60e9))
		if st == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING {
			a.InstanceId, a.LeaseExpireTime = "", nil
		}
		require.NoError(t, tx.PutAssignment(a))
	}
	next := func(tx store.ExecTx, wave int32, kinds ...schedulerv1.AssignmentKind) string {
		a, err := tx.NextPending(wave, kinds)
		require.NoError(t, err)
		if a == nil {
			return ""
		}
		return a.GetId()
	}
	const (
		pending   = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
		running   = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING
		completed = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED
		task      = schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK
		integ     = schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION
	)

	// The read-ahead answer (t0 itself) was written: NextPending queries, and sees the write.
	var got string
	n := run(hinted, func(tx store.ExecTx) error {
		put(tx, "ex/t0", running)
		got = next(tx, 1)
		return nil
	})
	require.Equal(t, "ex/t1", got)
	require.EqualValues(t, 3, n, "lock, NextPending (with the deferred write), commit")

	// A completion, then the next pending one: no round trip of its own.
	n = run(hinted, func(tx store.ExecTx) error {
		put(tx, "ex/t0", completed)
		got = next(tx, 1)
		return nil
	})
	require.Equal(t, "ex/t1", got)
	require.EqualValues(t, 2, n, "lock with the reads ahead, commit")
	n = run(store.WithAssignmentHint(ctx, "ex/t0"), func(tx store.ExecTx) error {
		put(tx, "ex/t0", completed)
		got = next(tx, 1)
		return nil
	})
	require.Equal(t, "ex/t1", got)
	require.EqualValues(t, 3, n, "without the hint NextPending is a round trip")

	// An assignment put back to pending before the read-ahead one: NextPending sees it.
	run(hinted, func(tx store.ExecTx) error {
		put(tx, "ex/t0", pending)
		got = next(tx, 1)
		return errRollback
	})
	require.Equal(t, "ex/t0", got)

	// Kinds: a task came first, so no integration is pending; another wave is queried.
	for _, c := range []struct {
		wave  int32
		kinds []schedulerv1.AssignmentKind
		want  string
		trips int64
	}{
		{1, []schedulerv1.AssignmentKind{integ}, "", 2},
		{1, []schedulerv1.AssignmentKind{task}, "ex/t1", 2},
		{1, []schedulerv1.AssignmentKind{task, integ}, "ex/t1", 2},
		{2, nil, "", 3},
	} {
		n = run(hinted, func(tx store.ExecTx) error {
			got = next(tx, c.wave, c.kinds...)
			return errRollback
		})
		require.Equal(t, c.want, got, "wave %d kinds %v", c.wave, c.kinds)
		// A rollback is one more round trip after the function.
		require.EqualValues(t, c.trips, n, "wave %d kinds %v", c.wave, c.kinds)
	}

	// Every transaction's writes are committed (the reads ahead wrote nothing).
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		require.Equal(t, "ex/t1", next(tx, 1))
		a, err := tx.Assignment("ex/t0")
		require.NoError(t, err)
		require.Equal(t, completed, a.GetStatus())
		return nil
	}))
}
