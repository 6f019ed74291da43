package storetest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Savepoint: the parts of one transaction that succeed are committed together, a part that
// fails is undone alone — its rows, its log entries and the execution as the transaction has
// it — whether it failed before any of its statements reached the store or after a read, and
// the log stays dense.
func testSavepoints(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	newList(t, s, "tl", 5)
	newRun("ex", "tl", []string{"t0", "t1", "t2", "t3", "t4"}).create(t, s)
	errStale := errors.New("stale")

	// part changes assignment task, logs one entry, counts a completed task on the execution and
	// sets its task's status; then reads (a round trip) when read is set, and fails with fail.
	part := func(tx store.ExecTx, task string, read bool, fail error) error {
		a, err := tx.Assignment("ex/" + task)
		if err != nil {
			return err
		}
		a.Status, a.InstanceId, a.FencingToken, a.LeaseExpireTime, a.AssignTime = asRunning, "agent-"+task, 1, at(40), at(12)
		if err := tx.PutAssignment(a); err != nil {
			return err
		}
		if err := tx.SetTaskStatus(task, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS); err != nil {
			return err
		}
		if err := tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: task}); err != nil {
			return err
		}
		e := tx.Execution()
		e.CompletedTasks++
		if err := tx.PutExecution(e); err != nil {
			return err
		}
		if read {
			w, err := tx.Wave(1)
			if err != nil {
				return err
			}
			w.ActiveAgents++
			if err := tx.PutWave(w); err != nil {
				return err
			}
			if _, err := tx.Assignment("ex/t4"); err != nil { // a round trip after the writes
				return err
			}
		}
		return fail
	}
	update(t, s, "ex", func(tx store.ExecTx) error {
		require.NoError(t, tx.Savepoint(func() error { return part(tx, "t0", false, nil) }))
		require.ErrorIs(t, tx.Savepoint(func() error { return part(tx, "t1", false, errStale) }), errStale)
		require.NoError(t, tx.Savepoint(func() error { return part(tx, "t2", true, nil) }))
		require.ErrorIs(t, tx.Savepoint(func() error { return part(tx, "t3", true, errStale) }), errStale)
		e := tx.Execution()
		require.EqualValues(t, 2, e.GetCompletedTasks(), "the failed parts' execution changes are undone")
		require.EqualValues(t, 3, e.GetLastSeq(), "the failed parts' entries are undone")
		// After a failed part the transaction goes on: reads see the undone state.
		a, err := tx.Assignment("ex/t3")
		require.NoError(t, err)
		require.Equal(t, asPending, a.GetStatus())
		w, err := tx.Wave(1)
		require.NoError(t, err)
		require.EqualValues(t, 1, w.GetActiveAgents())
		require.ErrorIs(t, tx.Savepoint(func() error {
			_, err := tx.Assignment("ex/nope")
			return err
		}), store.ErrNotFound)
		return tx.Savepoint(func() error { return part(tx, "t4", false, nil) })
	})

	e, waves, err := s.GetExecution(t.Context(), "ex")
	require.NoError(t, err)
	require.EqualValues(t, 3, e.GetCompletedTasks())
	require.EqualValues(t, 4, e.GetLastSeq())
	require.EqualValues(t, 1, waves[0].GetActiveAgents())
	entries, _ := readAll(t, s, "ex")
	require.Equal(t, []int64{1, 2, 3, 4}, seqs(entries))
	var msgs []string
	for _, en := range entries[1:] {
		msgs = append(msgs, en.GetMessage())
	}
	require.Equal(t, []string{"t0", "t2", "t4"}, msgs)
	as, _, err := s.ListAssignments(t.Context(), store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)
	status := map[string]schedulerv1.AssignmentStatus{}
	for _, a := range as {
		status[a.GetTaskId()] = a.GetStatus()
	}
	require.Equal(t, map[string]schedulerv1.AssignmentStatus{"t0": asRunning, "t1": asPending, "t2": asRunning,
		"t3": asPending, "t4": asRunning}, status)
	tl, err := s.GetTaskList(t.Context(), "tl", store.ViewFull)
	require.NoError(t, err)
	tasks := map[string]commonv1.TaskStatus{}
	for _, task := range tl.Spec.GetTasks() {
		tasks[task.GetId()] = task.GetStatus()
	}
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tasks["t0"])
	require.NotEqual(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tasks["t1"])
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tasks["t2"])
	require.NotEqual(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tasks["t3"])
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tasks["t4"])
}
