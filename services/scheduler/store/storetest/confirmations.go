package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// confirmationTests is the knowledge confirmation outbox (confirmations.go of the store).
var confirmationTests = []test{
	{"EnqueuedWithTheTransaction", testConfirmationEnqueuedWithTheTransaction},
	{"TakenOnceUntilTheLeaseEnds", testConfirmationTakenOnceUntilTheLeaseEnds},
	{"RetryAndDelete", testConfirmationRetryAndDelete},
	{"GoneWithTheExecution", testConfirmationGoneWithTheExecution},
}

// confirmRun stores list l with an execution ex of two tasks and returns the store.
func confirmRun(t *testing.T, newStore func(t *testing.T) store.Store) store.Store {
	t.Helper()
	s := newStore(t)
	newList(t, s, "l", 2)
	newRun("ex", "l", []string{"t0", "t1"}).create(t, s)
	return s
}

func enqueue(t *testing.T, s store.Store, assignment, task string) {
	t.Helper()
	update(t, s, "ex", func(tx store.ExecTx) error {
		return tx.EnqueueConfirmation(&store.Confirmation{AssignmentID: assignment, TaskID: task, InstanceID: "agent-1", Principal: "agent"})
	})
}

func takenIDs(list []*store.Confirmation) []string {
	out := []string{}
	for _, c := range list {
		out = append(out, c.AssignmentID)
	}
	return out
}

// A confirmation is committed with its transaction, or not at all; a second one of the same
// assignment is ignored.
func testConfirmationEnqueuedWithTheTransaction(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := confirmRun(t, newStore)
	rollback := errors.New("roll back")
	err := s.UpdateExecution(t.Context(), "ex", func(tx store.ExecTx) error {
		require.NoError(t, tx.EnqueueConfirmation(&store.Confirmation{AssignmentID: "ex/t1", TaskID: "t1", InstanceID: "agent-1", Principal: "agent"}))
		return rollback
	})
	require.ErrorIs(t, err, rollback)
	enqueue(t, s, "ex/t0", "t0")
	enqueue(t, s, "ex/t0", "t0") // ignored

	got, err := s.TakeConfirmations(t.Context(), 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1, "the rolled-back one is not there, the repeated one is there once")
	c := got[0]
	require.Equal(t, store.Confirmation{AssignmentID: "ex/t0", ExecutionID: "ex", TaskID: "t0", InstanceID: "agent-1",
		Principal: "agent", NextAttempt: c.NextAttempt, CreateTime: c.CreateTime}, *c)
	require.False(t, c.CreateTime.IsZero())
	require.True(t, c.NextAttempt.After(c.CreateTime), "taken: due a lease later")
}

// A taken confirmation is not taken again until its lease has run out (a taker that died), and
// at most limit are taken at once, in assignment id order.
func testConfirmationTakenOnceUntilTheLeaseEnds(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := confirmRun(t, newStore)
	enqueue(t, s, "ex/t1", "t1")
	enqueue(t, s, "ex/t0", "t0")

	got, err := s.TakeConfirmations(t.Context(), 1, time.Hour)
	require.NoError(t, err)
	require.Len(t, got, 1)
	rest, err := s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.ElementsMatch(t, []string{"ex/t0", "ex/t1"}, append(takenIDs(got), takenIDs(rest)...))
	none, err := s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, none, "both are leased")

	// A lease that has already run out: taken again at once (what a restart finds).
	enqueue(t, s, "ex/t2", "t1")
	_, err = s.TakeConfirmations(t.Context(), 10, -time.Minute)
	require.NoError(t, err)
	again, err := s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t2"}, takenIDs(again))
}

// A failed try counts and makes the row due again later; a done one is deleted (twice is fine).
func testConfirmationRetryAndDelete(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := confirmRun(t, newStore)
	enqueue(t, s, "ex/t0", "t0")
	enqueue(t, s, "ex/t1", "t1")
	_, err := s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)

	require.NoError(t, s.RetryConfirmation(t.Context(), "ex/t0", -time.Second)) // due at once
	require.NoError(t, s.RetryConfirmation(t.Context(), "ex/t1", time.Hour))
	got, err := s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t0"}, takenIDs(got))
	require.Equal(t, int32(1), got[0].Attempts)

	listed, err := s.ListConfirmations(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t0", "ex/t1"}, takenIDs(listed), "listed, due or not")
	require.Equal(t, int32(1), listed[1].Attempts)

	require.NoError(t, s.DeleteConfirmation(t.Context(), "ex/t0"))
	require.NoError(t, s.DeleteConfirmation(t.Context(), "ex/t0"))
	require.ErrorIs(t, s.RetryConfirmation(t.Context(), "ex/t0", 0), store.ErrNotFound)
	require.NoError(t, s.RetryConfirmation(t.Context(), "ex/t1", -time.Second))
	got, err = s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t1"}, takenIDs(got))
	require.Equal(t, int32(2), got[0].Attempts)
}

// Deleting the task list deletes its executions' confirmations.
func testConfirmationGoneWithTheExecution(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := confirmRun(t, newStore)
	enqueue(t, s, "ex/t0", "t0")
	update(t, s, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.Outcome = exCompleted, commonv1.Outcome_OUTCOME_CONVERGED
		return tx.PutExecution(e)
	})
	require.NoError(t, s.DeleteTaskList(t.Context(), "l"))
	got, err := s.TakeConfirmations(t.Context(), 10, time.Hour)
	require.NoError(t, err)
	require.Empty(t, got)
}
