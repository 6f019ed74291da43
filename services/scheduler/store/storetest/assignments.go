package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

func testNextPending(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	newList(t, s, "tl", 5)
	r := newRun("ex", "tl", []string{"t2", "t0", "t1"}, []string{"t3"})
	// Positions out of id order: t1 first, then t0, then t2.
	r.as[0].Position, r.as[1].Position, r.as[2].Position = 7, 3, 1
	r.create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		a, err := tx.NextPending(1, nil)
		require.NoError(t, err)
		require.Equal(t, "ex/t1", a.Id)
		require.NoError(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i1",
			Kind: kindIntegration, WaveId: "ex/w1"}, Position: -1}))
		a, err = tx.NextPending(1, nil)
		require.NoError(t, err)
		require.Equal(t, "ex/i1", a.Id, "integration first")
		require.Equal(t, kindIntegration, a.Kind)
		require.EqualValues(t, 1, a.WaveNumber)
		a, err = tx.NextPending(1, []schedulerv1.AssignmentKind{kindTask})
		require.NoError(t, err)
		require.Equal(t, "ex/t1", a.Id)
		a.Status, a.InstanceId, a.LeaseExpireTime = asAssigned, "agent-1", timestamppb.New(tx.Now().Add(time.Minute))
		require.NoError(t, tx.PutAssignment(a))
		a, err = tx.NextPending(1, []schedulerv1.AssignmentKind{kindTask})
		require.NoError(t, err)
		require.Equal(t, "ex/t0", a.Id)
		a, err = tx.NextPending(2, []schedulerv1.AssignmentKind{kindTask, kindIntegration})
		require.NoError(t, err)
		require.Equal(t, "ex/t3", a.Id)
		a, err = tx.NextPending(2, []schedulerv1.AssignmentKind{kindIntegration})
		require.NoError(t, err)
		require.Nil(t, a)
		a, err = tx.NextPending(3, nil)
		require.NoError(t, err)
		require.Nil(t, a)
		return nil
	})
}

func testInsertAssignment(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	newRun("ex", "tl", []string{"t0"}, []string{"t1"}).create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		integration := &store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i2", Kind: kindIntegration, WaveNumber: 2},
			Position: -1, FinalIntegration: true, Merges: []*schedulerv1.IntegrationInput{{TaskId: "t1", CommitSha: "c1"}}}
		require.NoError(t, tx.InsertAssignment(integration))
		require.Equal(t, "ex", integration.ExecutionId)
		require.Equal(t, "ex/w2", integration.WaveId)
		require.EqualValues(t, 1, integration.Attempt)
		require.Equal(t, asPending, integration.Status)
		// A second integration of the wave, a task twice, an id twice: ErrAlreadyExists, and
		// the transaction goes on.
		err := tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i2b", Kind: kindIntegration, WaveNumber: 2}, Position: -1})
		require.ErrorIs(t, err, store.ErrAlreadyExists)
		err = tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/t1b", Kind: kindTask, TaskId: "t1", WaveId: "ex/w2"}})
		require.ErrorIs(t, err, store.ErrAlreadyExists)
		err = tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/t0", Kind: kindTask, TaskId: "t1", WaveId: "ex/w1"}})
		require.ErrorIs(t, err, store.ErrAlreadyExists)
		err = tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i9", Kind: kindIntegration, WaveNumber: 9}, Position: -1})
		require.ErrorIs(t, err, store.ErrNotFound)
		// The same task in another wave is another assignment.
		require.NoError(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/t1w1", Kind: kindTask, TaskId: "t1", WaveId: "ex/w1"}, Position: 1}))
		return tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "after the refusals"})
	})
	as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t0", "ex/t1w1", "ex/t1", "ex/i2"}, ids(assignmentProtos(as)))
	require.True(t, as[3].FinalIntegration)
	require.Len(t, as[3].Merges, 1)
	id, err := s.AssignmentExecution(ctx, "ex/i2")
	require.NoError(t, err)
	require.Equal(t, "ex", id)
}

func testClaimableExecutions(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	// Created in this order, so oldest first is a, d.
	newRun("a", "tl", []string{"t0"}).create(t, s) // running, pending task in a running wave
	paused := newRun("b", "tl", []string{"t0"})
	paused.e.Status = exPaused
	paused.create(t, s)
	waiting := newRun("c", "tl", []string{"t0"})
	waiting.waves[0].Status = wvPending
	waiting.create(t, s)
	integrating := newRun("d", "tl", []string{"t0"})
	integrating.waves[0].Status = wvIntegrating
	integrating.as[0].Status = asCompleted
	integrating.create(t, s)
	update(t, s, "d", func(tx store.ExecTx) error {
		return tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "d/i1", Kind: kindIntegration, WaveNumber: 1}, Position: -1})
	})
	busy := newRun("e", "tl", []string{"t0"})
	busy.as[0].Status, busy.as[0].InstanceId, busy.as[0].LeaseExpireTime = asRunning, "agent", at(60)
	busy.create(t, s)
	newList(t, s, "tl-pending", 1) // a new (PENDING) run needs a list without an open one
	pendingRun := newRun("f", "tl-pending", []string{"t0"})
	pendingRun.e.Status = exPending
	pendingRun.create(t, s)

	list, err := s.ClaimableExecutions(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "d"}, ids(list))
	list, err = s.ClaimableExecutions(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids(list))

	list, err = s.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{exPaused, exPending}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"b", "f"}, ids(list))
	list, err = s.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{exRunning}, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, ids(list))
}

func testExpiredLeases(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 5)
	newRun("ex", "tl", []string{"t0", "t1", "t2", "t3", "t4"}).create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		now := tx.Now()
		for task, lease := range map[string]struct {
			status schedulerv1.AssignmentStatus
			expiry time.Duration
		}{
			"t0": {asAssigned, -time.Second}, // expired second
			"t1": {asRunning, -time.Minute},  // expired first
			"t2": {asRunning, time.Hour},     // live
			"t3": {asCompleted, -time.Hour},  // not held
			"t4": {asAssigned, -time.Second}, // expired, tied with t0 (id order)
		} {
			a, err := tx.Assignment("ex/" + task)
			require.NoError(t, err)
			a.Status, a.InstanceId, a.LeaseExpireTime = lease.status, "agent", timestamppb.New(now.Add(lease.expiry))
			require.NoError(t, tx.PutAssignment(a))
		}
		return nil
	})
	list, err := s.ExpiredLeases(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t1", "ex/t0", "ex/t4"}, ids(assignmentProtos(list)))
	list, err = s.ExpiredLeases(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t1"}, ids(assignmentProtos(list)))
}

// testSessionsHeldAndSourceTime: the session an assignment was leased to, the held assignments
// of agents, and an entry's source time are stored and read back.
func testSessionsHeldAndSourceTime(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 4)
	newRun("ex", "tl", []string{"t0", "t1", "t2", "t3"}).create(t, s)
	newRun("ex2", "tl", []string{"t0"}).create(t, s)
	src := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	for _, ex := range []string{"ex", "ex2"} {
		update(t, s, ex, func(tx store.ExecTx) error {
			now := tx.Now()
			holders := map[string]struct {
				status          schedulerv1.AssignmentStatus
				instance, sess  string
				assignedSeconds int
			}{
				"t0": {asAssigned, "agent-1", "boot-1", 2},
				"t1": {asRunning, "agent-2", "", 1},
				"t2": {asCompleted, "agent-1", "boot-1", 0}, // not held
				"t3": {asRunning, "agent-3", "boot-9", 3},
			}
			for task, h := range holders {
				a, err := tx.Assignment(ex + "/" + task)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				require.NoError(t, err)
				a.Status, a.InstanceId, a.SessionID = h.status, h.instance, h.sess
				a.LeaseExpireTime = timestamppb.New(now.Add(time.Hour))
				a.AssignTime = timestamppb.New(now.Add(time.Duration(h.assignedSeconds) * time.Second))
				if ex == "ex2" {
					a.AssignTime = timestamppb.New(now.Add(time.Minute))
				}
				require.NoError(t, tx.PutAssignment(a))
			}
			return tx.Append(&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t0", InstanceId: "agent-1", WaveNumber: 1,
				Message: "started at the source", SourceTime: timestamppb.New(src)})
		})
	}
	list, err := s.HeldAssignments(ctx, []string{"agent-1", "agent-2"}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"ex/t1", "ex/t0", "ex2/t0"}, ids(assignmentProtos(list)), "held only, oldest lease first")
	require.Equal(t, "", list[0].SessionID)
	require.Equal(t, "boot-1", list[1].SessionID)
	list, err = s.HeldAssignments(ctx, []string{"agent-1", "agent-2"}, 1)
	require.NoError(t, err)
	require.Len(t, list, 1)
	list, err = s.HeldAssignments(ctx, nil, 10)
	require.NoError(t, err)
	require.Empty(t, list)

	update(t, s, "ex", func(tx store.ExecTx) error {
		a, err := tx.Assignment("ex/t3")
		require.NoError(t, err)
		require.Equal(t, "boot-9", a.SessionID)
		a.SessionID = ""
		return tx.PutAssignment(a)
	})
	all, err := s.HeldAssignments(ctx, []string{"agent-3"}, 10)
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Empty(t, all[0].SessionID, "a session is cleared")

	entries, _, _, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex", EventTypes: []commonv1.EventType{evTaskStarted}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.True(t, entries[0].GetSourceTime().AsTime().Equal(src), "source time %v", entries[0].GetSourceTime().AsTime())
	require.False(t, entries[0].GetTime().AsTime().Equal(src), "the entry's time is the store's")
	first, _, _, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex", Limit: 1})
	require.NoError(t, err)
	require.Nil(t, first[0].GetSourceTime(), "no source time: unset")
}

func testListAssignments(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 5)
	r := newRun("ex", "tl", []string{"t0", "t1", "t2"}, []string{"t3", "t4"})
	r.as[0].Position, r.as[2].Position = 5, 0 // wave 1 order: t2, t1, t0
	r.as[3].Status, r.as[3].InstanceId, r.as[3].LeaseExpireTime = asRunning, "agent-1", at(5)
	r.as[1].Status, r.as[1].InstanceId = asCompleted, "agent-1"
	r.create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		return tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i1", Kind: kindIntegration, WaveNumber: 1}, Position: -1})
	})
	all := []string{"ex/t2", "ex/t1", "ex/t0", "ex/i1", "ex/t3", "ex/t4"}
	list := func(q store.ListAssignmentsQuery) []string {
		t.Helper()
		q.ExecutionID = "ex"
		var got []string
		for range 10 {
			page, next, err := s.ListAssignments(ctx, q)
			require.NoError(t, err)
			got = append(got, ids(assignmentProtos(page))...)
			if next == 0 {
				return got
			}
			require.Equal(t, q.Offset+q.PageSize, next)
			q.Offset = next
		}
		t.Fatal("too many pages")
		return nil
	}
	require.Equal(t, all, list(store.ListAssignmentsQuery{PageSize: 100}))
	require.Equal(t, all, list(store.ListAssignmentsQuery{PageSize: 4}))
	require.Equal(t, all, list(store.ListAssignmentsQuery{PageSize: 1}))
	require.Equal(t, all[:4], list(store.ListAssignmentsQuery{PageSize: 2, WaveNumber: 1}))
	require.Equal(t, []string{"ex/t3"}, list(store.ListAssignmentsQuery{PageSize: 2, TaskID: "t3"}))
	require.Equal(t, []string{"ex/t1", "ex/t3"}, list(store.ListAssignmentsQuery{PageSize: 2, InstanceID: "agent-1"}))
	require.Equal(t, []string{"ex/t1", "ex/t3"}, list(store.ListAssignmentsQuery{PageSize: 5,
		Statuses: []schedulerv1.AssignmentStatus{asRunning, asCompleted}}))
	require.Empty(t, list(store.ListAssignmentsQuery{PageSize: 5, WaveNumber: 2, InstanceID: "agent-2"}))
	page, next, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 2, Offset: 6})
	require.NoError(t, err)
	require.Empty(t, page)
	require.Zero(t, next)

	// Inside a transaction, the same filters without paging.
	update(t, s, "ex", func(tx store.ExecTx) error {
		got, err := tx.Assignments(store.ListAssignmentsQuery{PageSize: 1, Statuses: []schedulerv1.AssignmentStatus{asPending}})
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t2", "ex/t0", "ex/i1", "ex/t4"}, ids(assignmentProtos(got)))
		got, err = tx.Assignments(store.ListAssignmentsQuery{WaveNumber: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"ex/t3", "ex/t4"}, ids(assignmentProtos(got)))
		return nil
	})
}
