package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// testExecutionReadsSeeWrites: inside one UpdateExecution every read sees the transaction's own
// earlier writes (a backend may defer writes and read rows ahead with the lock,
// store.WithAssignmentHint), the next transaction sees them all, and a hint naming another
// execution's or no assignment changes no answer.
func testExecutionReadsSeeWrites(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	newList(t, s, "tl", 2)
	newList(t, s, "tl2", 1)
	r := newRun("ex", "tl", []string{"t0", "t1"}).create(t, s)
	other := newRun("ex-2", "tl2", []string{"t0"}).create(t, s)
	a0 := r.as[0].Id

	for round, hint := range []string{a0, other.as[0].Id, "nope", ""} {
		ctx := t.Context()
		if hint != "" {
			ctx = store.WithAssignmentHint(ctx, hint)
		}
		require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
			a, err := tx.Assignment(a0)
			require.NoError(t, err)
			require.EqualValues(t, round, a.GetFencingToken(), "the last transaction's write")
			w, err := tx.Wave(1)
			require.NoError(t, err)
			require.EqualValues(t, round, w.GetActiveAgents())

			a.Status, a.InstanceId, a.LeaseExpireTime = asAssigned, "agent", at(10)
			a.FencingToken++
			require.NoError(t, tx.PutAssignment(a))
			w.ActiveAgents++
			require.NoError(t, tx.PutWave(w))
			require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))

			// Read back in the same transaction, one by one and in lists.
			again, err := tx.Assignment(a0)
			require.NoError(t, err)
			require.Equal(t, asAssigned, again.GetStatus())
			require.EqualValues(t, round+1, again.GetFencingToken())
			w2, err := tx.Wave(1)
			require.NoError(t, err)
			require.EqualValues(t, round+1, w2.GetActiveAgents())
			ws, err := tx.Waves()
			require.NoError(t, err)
			require.EqualValues(t, round+1, ws[0].GetActiveAgents())
			list, err := tx.Assignments(store.ListAssignmentsQuery{ExecutionID: "ex"})
			require.NoError(t, err)
			require.Len(t, list, 2)
			require.EqualValues(t, round+1, list[0].GetFencingToken())
			next, err := tx.NextPending(1, nil)
			require.NoError(t, err)
			require.Equal(t, r.as[1].Id, next.GetId(), "the assigned one is no longer pending")

			// Put it back to pending for the next round, keeping the token.
			again.Status, again.InstanceId = asPending, ""
			require.NoError(t, tx.PutAssignment(again))
			return tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "round"})
		}))
	}
	_, _, err := s.GetExecution(t.Context(), "ex")
	require.NoError(t, err)
	entries, last := readAll(t, s, "ex")
	require.EqualValues(t, 5, last)
	require.Len(t, entries, 5)
	require.NoError(t, s.UpdateExecution(t.Context(), "ex", func(tx store.ExecTx) error {
		a, err := tx.Assignment(a0)
		require.NoError(t, err)
		require.EqualValues(t, 4, a.GetFencingToken())
		require.Equal(t, asPending, a.GetStatus())
		require.Empty(t, a.GetInstanceId(), "a write back to a value read earlier in the transaction")
		w, err := tx.Wave(1)
		require.NoError(t, err)
		require.EqualValues(t, 4, w.GetActiveAgents())
		return nil
	}))
	// The other execution was not touched by the hint naming its assignment.
	require.NoError(t, s.UpdateExecution(t.Context(), "ex-2", func(tx store.ExecTx) error {
		a, err := tx.Assignment(other.as[0].Id)
		require.NoError(t, err)
		require.Zero(t, a.GetFencingToken())
		return nil
	}))
}

// testTaskStatusesInOneTransaction: the statuses a transaction sets (a completion and the claim
// fused with it set two; a task set twice keeps the last) are all there after it commits, and
// none after it fails (a backend may write them together at the end).
func testTaskStatusesInOneTransaction(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	newList(t, s, "tl", 3)
	r := newRun("ex", "tl", []string{"t0", "t1", "t2"}).create(t, s)
	statuses := func() []commonv1.TaskStatus {
		tl, err := s.GetTaskList(t.Context(), "tl", store.ViewFull)
		require.NoError(t, err)
		var out []commonv1.TaskStatus
		for _, task := range tl.Spec.GetTasks() {
			out = append(out, task.GetStatus())
		}
		return out
	}
	err := s.UpdateExecution(t.Context(), "ex", func(tx store.ExecTx) error {
		for _, a := range r.as {
			_, err := tx.Assignment(a.Id)
			require.NoError(t, err)
		}
		require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_COMPLETED))
		require.NoError(t, tx.SetTaskStatus("t1", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))
		return store.ErrConflict
	})
	require.ErrorIs(t, err, store.ErrConflict)
	require.Equal(t, []commonv1.TaskStatus{commonv1.TaskStatus_TASK_STATUS_PENDING, commonv1.TaskStatus_TASK_STATUS_PENDING,
		commonv1.TaskStatus_TASK_STATUS_PENDING}, statuses())

	update(t, s, "ex", func(tx store.ExecTx) error {
		for _, a := range r.as[:2] {
			_, err := tx.Assignment(a.Id)
			require.NoError(t, err)
		}
		require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))
		require.NoError(t, tx.SetTaskStatus("t1", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))
		require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_COMPLETED))
		require.NoError(t, tx.SetTaskStatus("t2", commonv1.TaskStatus_TASK_STATUS_FAILED)) // not read
		return nil
	})
	require.Equal(t, []commonv1.TaskStatus{commonv1.TaskStatus_TASK_STATUS_COMPLETED, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS,
		commonv1.TaskStatus_TASK_STATUS_FAILED}, statuses())
}
