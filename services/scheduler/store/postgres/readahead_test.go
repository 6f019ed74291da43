package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// readAheader is the Postgres ExecTx's ReadAhead (a grouped transaction's later requests).
type readAheader interface {
	ReadAhead(assignmentID string, nextPending bool) error
}

// A grouped transaction's second request (another agent's fused completion) reads its held
// assignment, its wave and its wave's next pending assignment: the lock's batch read them
// (the execution's held assignments, a pending task per holder), so ReadAhead answers from
// memory with no round trip, and the answers are the rows as the transaction's writes left
// them. A savepoint that failed forgets them (its writes are undone): ReadAhead then queries.
func TestReadAheadAnswersFromTheLocksBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := &roundTrips{}
	s := tracedStore(t, rt)
	oneWaveRun(t, s, "readahead", "t0", "t1", "t2", "t3", "t4")
	const (
		running   = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING
		completed = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED
	)
	lease := func(tx store.ExecTx, a *store.Assignment) {
		a.Status, a.InstanceId, a.FencingToken = running, "agent-"+a.GetTaskId(), 7
		a.LeaseExpireTime = timestamppb.New(tx.Now().Add(60e9))
		require.NoError(t, tx.PutAssignment(a))
	}
	// t0 and t1 held by two agents.
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		for _, id := range []string{"ex/t0", "ex/t1"} {
			a, err := tx.Assignment(id)
			require.NoError(t, err)
			lease(tx, a)
		}
		return nil
	}))
	// complete is a fused completion of a held assignment: it, its wave's count, the next one.
	complete := func(tx store.ExecTx, id string) string {
		a, err := tx.Assignment(id)
		require.NoError(t, err)
		w, err := tx.Wave(a.GetWaveNumber())
		require.NoError(t, err)
		a.Status, a.CompleteTime = completed, timestamppb.New(tx.Now())
		require.NoError(t, tx.PutAssignment(a))
		w.CompletedCount++
		w.BaseCommit = "base-" + id
		require.NoError(t, tx.PutWave(w))
		next, err := tx.NextPending(a.GetWaveNumber(), nil)
		require.NoError(t, err)
		require.NotNil(t, next)
		lease(tx, next)
		return next.GetId()
	}
	hinted := store.WithNextPendingHint(store.WithAssignmentHint(ctx, "ex/t0"))
	errRollback := errors.New("rolled back")
	var leased []string
	err := s.UpdateExecution(hinted, "ex", func(tx store.ExecTx) error {
		leased = append(leased, complete(tx, "ex/t0"))
		before := rt.n.Load()
		require.NoError(t, tx.(readAheader).ReadAhead("ex/t1", true))
		a, err := tx.Assignment("ex/t1")
		require.NoError(t, err)
		w, err := tx.Wave(1)
		require.NoError(t, err)
		next, err := tx.NextPending(1, nil)
		require.NoError(t, err)
		require.EqualValues(t, 0, rt.n.Load()-before, "the second request's reads answered from the lock's batch")

		// The rows themselves, read again (the deferred writes go first): the same.
		a2, err := tx.Assignment("ex/t1")
		require.NoError(t, err)
		require.True(t, proto.Equal(a2.Assignment, a.Assignment), "assignment %v, from memory %v", a2, a)
		w2, err := tx.Wave(1)
		require.NoError(t, err)
		require.True(t, proto.Equal(w2, w), "wave %v, from memory %v", w2, w)
		require.EqualValues(t, 1, w.GetCompletedCount())
		require.Equal(t, "base-ex/t0", w.GetBaseCommit())
		require.Equal(t, "ex/t3", next.GetId(), "t2 went to the first request")
		leased = append(leased, complete(tx, "ex/t1"))
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t2", "ex/t3"}, leased)

	// A request that failed in its savepoint wrote the wave: the next one must not see it.
	hinted = store.WithNextPendingHint(store.WithAssignmentHint(ctx, "ex/t2"))
	err = s.UpdateExecution(hinted, "ex", func(tx store.ExecTx) error {
		complete(tx, "ex/t2")
		require.Error(t, tx.Savepoint(func() error {
			w, err := tx.Wave(1)
			require.NoError(t, err)
			w.CompletedCount = 99
			require.NoError(t, tx.PutWave(w))
			return errRollback
		}))
		before := rt.n.Load()
		require.NoError(t, tx.(readAheader).ReadAhead("ex/t3", true))
		require.EqualValues(t, 1, rt.n.Load()-before, "after a failed savepoint ReadAhead queries")
		w, err := tx.Wave(1)
		require.NoError(t, err)
		require.EqualValues(t, 3, w.GetCompletedCount())
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
}
