package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// testNextEager: ReadyWave is stored with an assignment and kept by PutAssignment; NextEager
// returns the pending task assignments of later waves whose ready wave is open, in claim order;
// ClaimableExecutions finds a run whose open wave has nothing pending but a later task is ready.
func testNextEager(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 6)
	r := newRun("ex", "tl", []string{"t0"}, []string{"t1", "t2"}, []string{"t3", "t4", "t5"})
	r.as[0].Status, r.as[0].InstanceId, r.as[0].LeaseExpireTime = asRunning, "agent", at(60) // the open wave: nothing pending
	r.as[1].ReadyWave = 1                                                                    // t1
	r.as[3].ReadyWave, r.as[3].Position = 1, 5                                               // t3, after t5 and t4
	r.as[4].ReadyWave = 2                                                                    // t4: once wave 2 is open
	r.as[5].ReadyWave, r.as[5].Position = 1, 3                                               // t5, before t4
	r.create(t, s)
	strict := newRun("st", "tl", []string{"t0"}, []string{"t1"})
	strict.as[0].Status, strict.as[0].InstanceId, strict.as[0].LeaseExpireTime = asRunning, "agent", at(60)
	strict.create(t, s)

	list, err := s.ClaimableExecutions(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ex"}, ids(list), "a ready task of a later wave makes the run claimable; a strict run waits")

	as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)
	ready := map[string]int32{}
	for _, a := range as {
		ready[a.TaskId] = a.ReadyWave
	}
	require.Equal(t, map[string]int32{"t0": 0, "t1": 1, "t2": 0, "t3": 1, "t4": 2, "t5": 1}, ready)

	update(t, s, "ex", func(tx store.ExecTx) error {
		got, err := tx.NextEager(1, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t1", "ex/t5", "ex/t3"}, ids(assignmentProtos(got)), "position, then wave")
		require.EqualValues(t, 1, got[0].ReadyWave)
		got, err = tx.NextEager(1, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t1"}, ids(assignmentProtos(got)))
		// Leased: no longer a candidate, and its ready wave stays.
		a := got[0]
		a.Status, a.InstanceId, a.LeaseExpireTime = asAssigned, "agent-2", timestamppb.New(tx.Now().Add(time.Minute))
		require.NoError(t, tx.PutAssignment(a))
		got, err = tx.NextEager(1, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t5", "ex/t3"}, ids(assignmentProtos(got)))
		back, err := tx.Assignment("ex/t1")
		require.NoError(t, err)
		require.EqualValues(t, 1, back.ReadyWave)
		// Wave 2 open: its own tasks are NextPending's; wave 3's ready ones are eager.
		got, err = tx.NextEager(2, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t5", "ex/t4", "ex/t3"}, ids(assignmentProtos(got)), "t4 is at position 4")
		got, err = tx.NextEager(3, 10)
		require.NoError(t, err)
		require.Empty(t, got, "no wave after the last")
		return nil
	})
	update(t, s, "st", func(tx store.ExecTx) error {
		got, err := tx.NextEager(1, 10)
		require.NoError(t, err)
		require.Empty(t, got)
		return nil
	})

	// Positions are the run's claim ranks (the critical path first): they order the candidates
	// of different waves too; the wave breaks a tie.
	rk := newRun("rk", "tl", []string{"t0"}, []string{"t1", "t2"}, []string{"t3"})
	rk.as[0].Status, rk.as[0].InstanceId, rk.as[0].LeaseExpireTime = asRunning, "agent", at(60)
	rk.as[1].ReadyWave, rk.as[1].Position = 1, 7 // t1
	rk.as[2].ReadyWave, rk.as[2].Position = 1, 3 // t2
	rk.as[3].ReadyWave, rk.as[3].Position = 1, 2 // t3, of wave 3
	rk.create(t, s)
	update(t, s, "rk", func(tx store.ExecTx) error {
		got, err := tx.NextEager(1, 10)
		require.NoError(t, err)
		require.Equal(t, []string{"rk/t3", "rk/t2", "rk/t1"}, ids(assignmentProtos(got)), "position, then wave")
		got, err = tx.NextEager(1, 1)
		require.NoError(t, err)
		require.Equal(t, []string{"rk/t3"}, ids(assignmentProtos(got)))
		return nil
	})
}

// testSatisfyDependencies: a task with unmet dependencies is no eager candidate (NextEager,
// ClaimableExecutions) until SatisfyDependencies has lowered its count to 0, by one per
// occurrence of its id, never below 0; other executions' rows and unknown tasks are untouched.
func testSatisfyDependencies(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 4)
	mk := func(id string) run {
		r := newRun(id, "tl", []string{"t0"}, []string{"t1", "t2"}, []string{"t3"})
		r.as[0].Status, r.as[0].InstanceId, r.as[0].LeaseExpireTime = asRunning, "agent", at(60)
		r.as[1].ReadyWave, r.as[1].UnmetDeps = 1, 1 // t1: one dependency
		r.as[2].ReadyWave, r.as[2].UnmetDeps = 1, 0 // t2: none left
		r.as[3].ReadyWave, r.as[3].UnmetDeps = 1, 2 // t3: two
		return r.create(t, s)
	}
	mk("ex")
	other := mk("other")
	other.as[2].Status, other.as[2].InstanceId, other.as[2].LeaseExpireTime = asAssigned, "agent", at(60)
	update(t, s, "other", func(tx store.ExecTx) error { return tx.PutAssignment(other.as[2]) })

	as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)
	unmet := map[string]int32{}
	for _, a := range as {
		unmet[a.TaskId] = a.UnmetDeps
	}
	require.Equal(t, map[string]int32{"t0": 0, "t1": 1, "t2": 0, "t3": 2}, unmet, "stored with the assignment")

	eager := func(id string) []string {
		var got []string
		update(t, s, id, func(tx store.ExecTx) error {
			list, err := tx.NextEager(1, 10)
			got = ids(assignmentProtos(list))
			return err
		})
		return got
	}
	require.Equal(t, []string{"ex/t2"}, eager("ex"), "t1 and t3 wait for their dependencies")
	list, err := s.ClaimableExecutions(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ex"}, ids(list), "other's t2 is leased; t1 and t3 have unmet dependencies")

	update(t, s, "ex", func(tx store.ExecTx) error {
		return tx.SatisfyDependencies([]string{"t1", "t3", "t1", "t9"})
	})
	require.Equal(t, []string{"ex/t1", "ex/t2"}, eager("ex"), "t1 reached 0 (and not below: named twice); t3 has one left")
	require.Empty(t, eager("other"), "another execution's counts are untouched")
	update(t, s, "ex", func(tx store.ExecTx) error { return tx.SatisfyDependencies([]string{"t3"}) })
	require.Equal(t, []string{"ex/t1", "ex/t2", "ex/t3"}, eager("ex"))
	back, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)
	for _, a := range back {
		require.Zero(t, a.UnmetDeps, a.TaskId)
	}

	update(t, s, "other", func(tx store.ExecTx) error { return tx.SatisfyDependencies([]string{"t1", "t3", "t3"}) })
	require.Equal(t, []string{"other/t1", "other/t3"}, eager("other"))
	list, err = s.ClaimableExecutions(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ex", "other"}, ids(list))
}
