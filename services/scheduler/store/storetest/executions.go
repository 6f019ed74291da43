package storetest

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// executionTests is the execution part of the suite: executions, waves, assignments, the log and leadership.
var executionTests = []test{
	{"CreateAndGet", testExecutionCreateAndGet},
	{"CreateLarge", testExecutionCreateLarge},
	{"PlacementsAreTheCallers", testPlacementsAreTheCallers},
	{"NotFound", testExecutionNotFound},
	{"ReadsSeeWrites", testExecutionReadsSeeWrites},
	{"TaskStatusesInOneTransaction", testTaskStatusesInOneTransaction},
	{"RunNumbers", testExecutionRunNumbers},
	{"RequestID", testExecutionRequestID},
	{"OneOpenRunPerList", testOneOpenRunPerList},
	{"AwaitingSignOff", testAwaitingSignOff},
	{"UpdateCommits", testUpdateCommits},
	{"UpdateRollsBack", testUpdateRollsBack},
	{"Savepoints", testSavepoints},
	{"AppendIsDense", testAppendIsDense},
	{"AppendAroundPutExecution", testAppendAroundPutExecution},
	{"NextPending", testNextPending},
	{"NextEager", testNextEager},
	{"SatisfyDependencies", testSatisfyDependencies},
	{"InsertAssignment", testInsertAssignment},
	{"ClaimableExecutions", testClaimableExecutions},
	{"ExpiredLeases", testExpiredLeases},
	{"SessionsHeldAndSourceTime", testSessionsHeldAndSourceTime},
	{"ReadLog", testReadLog},
	{"ListExecutions", testListExecutions},
	{"ListAssignments", testListAssignments},
	{"TryLead", testTryLead},
	{"DeleteTaskList", testDeleteTaskList},
}

func testExecutionCreateAndGet(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 3)
	first := newRun("ex-1", "tl", []string{"t0"}).create(t, s)
	r := richRun("ex-2", "tl", first.e.Id)
	before := time.Now()
	require.NoError(t, s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries))

	// What the store set.
	require.EqualValues(t, 2, r.e.RunNumber)
	require.EqualValues(t, 3, r.e.LastSeq)
	require.NotNil(t, r.e.CreateTime)
	require.True(t, proto.Equal(r.e.CreateTime, r.e.UpdateTime))
	require.WithinDuration(t, before, r.e.CreateTime.AsTime(), time.Minute)
	require.Equal(t, []int64{1, 2, 3}, seqs(r.entries))
	for _, e := range r.entries {
		require.Equal(t, "ex-2", e.ExecutionId)
		require.True(t, proto.Equal(r.e.CreateTime, e.Time), "entry time %v, create time %v", e.Time, r.e.CreateTime)
	}
	for _, w := range r.waves {
		require.Equal(t, "ex-2", w.ExecutionId)
	}
	for _, a := range r.as {
		require.Equal(t, "ex-2", a.ExecutionId)
	}

	// Everything reads back as given.
	e, waves, err := s.GetExecution(ctx, "ex-2")
	require.NoError(t, err)
	require.True(t, proto.Equal(r.e, e), "execution:\n got %v\nwant %v", e, r.e)
	requireProtos(t, r.waves, waves)
	row, err := s.Execution(ctx, "ex-2")
	require.NoError(t, err)
	require.True(t, proto.Equal(r.e, row), "the row alone:\n got %v\nwant %v", row, r.e)
	as, next, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex-2", PageSize: 10})
	require.NoError(t, err)
	require.Zero(t, next)
	requireAssignments(t, r.as, as)
	entries, last := readAll(t, s, "ex-2")
	require.EqualValues(t, 3, last)
	requireProtos(t, r.entries, entries)

	// A run given without trigger or outcome reads back with the defaults.
	e, waves, err = s.GetExecution(ctx, "ex-1")
	require.NoError(t, err)
	require.EqualValues(t, 1, e.RunNumber)
	require.Equal(t, schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_USER, e.TriggeredBy)
	require.Equal(t, commonv1.Outcome_OUTCOME_UNSPECIFIED, e.Outcome)
	require.Len(t, waves, 1)

	id, err := s.AssignmentExecution(ctx, "ex-2/i2")
	require.NoError(t, err)
	require.Equal(t, "ex-2", id)

	// The list counts its runs.
	tl, err := s.GetTaskList(ctx, "tl", store.ViewBasic)
	require.NoError(t, err)
	require.EqualValues(t, 2, tl.RunCount)
	require.Equal(t, "ex-2", tl.LatestExecutionID)
}

// testExecutionCreateLarge: a run of 1,001 assignments in 3 waves reads back as given (a store
// that inserts rows in chunks has chunks of every size, down to one row).
func testExecutionCreateLarge(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	const n = 1001
	newList(t, s, "tl", n)
	var waves [3][]string
	for i := range n {
		waves[i%3] = append(waves[i%3], fmt.Sprintf("t%d", i))
	}
	r := newRun("ex", "tl", waves[:]...).create(t, s)
	_, gotWaves, err := s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	requireProtos(t, r.waves, gotWaves)
	var all []*store.Assignment
	for offset := 0; ; {
		as, next, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 500, Offset: offset})
		require.NoError(t, err)
		all = append(all, as...)
		if next == 0 {
			break
		}
		offset = next
	}
	requireAssignments(t, r.as, all)
}

func testExecutionNotFound(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	newRun("ex", "tl", []string{"t0"}).create(t, s)

	r := newRun("ex-x", "nope", []string{"t0"})
	require.ErrorIs(t, s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries), store.ErrNotFound)
	_, _, err := s.GetExecution(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Execution(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AssignmentExecution(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ExecutionIDByRequest(ctx, "tl", "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, _, err = s.ReadLog(ctx, store.LogQuery{ExecutionID: "nope", Limit: 10})
	require.ErrorIs(t, err, store.ErrNotFound)
	called := false
	err = s.UpdateExecution(ctx, "nope", func(store.ExecTx) error { called = true; return nil })
	require.ErrorIs(t, err, store.ErrNotFound)
	require.False(t, called)

	// Inside a transaction, another execution's rows and unknown rows are not found.
	other := newRun("ex-2", "tl", []string{"t0"}).create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		_, err := tx.Assignment(other.as[0].Id)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, tx.PutAssignment(other.as[0]), store.ErrNotFound)
		require.ErrorIs(t, tx.PutWave(other.waves[0]), store.ErrNotFound)
		require.ErrorIs(t, tx.SetTaskStatus("nope", commonv1.TaskStatus_TASK_STATUS_COMPLETED), store.ErrNotFound)
		require.ErrorIs(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, other.as[0].Id, 1), store.ErrNotFound)
		require.ErrorIs(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ai",
			Kind: kindIntegration, WaveId: other.waves[0].Id}, Position: -1}), store.ErrNotFound)
		// ErrNotFound leaves the transaction usable.
		return tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "still fine"})
	})
	_, last := readAll(t, s, "ex")
	require.EqualValues(t, 2, last)
}

func testExecutionRunNumbers(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "a", 1)
	newList(t, s, "b", 1)
	for i := 1; i <= 3; i++ {
		r := newRun(fmt.Sprintf("a-%d", i), "a", []string{"t0"}).create(t, s)
		require.EqualValues(t, i, r.e.RunNumber)
	}
	r := newRun("b-1", "b", []string{"t0"}).create(t, s)
	require.EqualValues(t, 1, r.e.RunNumber)

	// Concurrent starts of one list take distinct numbers.
	newList(t, s, "c", 1)
	const n = 8
	numbers := make([]int32, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			r := newRun(fmt.Sprintf("c-%d", i), "c", []string{"t0"})
			errs[i] = s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries)
			numbers[i] = r.e.RunNumber
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	slices.Sort(numbers)
	require.Equal(t, []int32{1, 2, 3, 4, 5, 6, 7, 8}, numbers)
	tl, err := s.GetTaskList(ctx, "c", store.ViewBasic)
	require.NoError(t, err)
	require.EqualValues(t, n, tl.RunCount)
}

func testExecutionRequestID(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "a", 1)
	newList(t, s, "b", 1)
	r := newRun("ex-1", "a", []string{"t0"})
	r.e.RequestId = "req"
	r.create(t, s)

	again := newRun("ex-2", "a", []string{"t0"})
	again.e.RequestId = "req"
	require.ErrorIs(t, s.CreateExecution(ctx, again.e, again.waves, again.as, again.entries), store.ErrAlreadyExists)
	_, _, err := s.GetExecution(ctx, "ex-2")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing of the duplicate is stored")
	_, err = s.AssignmentExecution(ctx, "ex-2/t0")
	require.ErrorIs(t, err, store.ErrNotFound)
	id, err := s.ExecutionIDByRequest(ctx, "a", "req")
	require.NoError(t, err)
	require.Equal(t, "ex-1", id)

	// Another list may use the same request id; a duplicate execution id is refused.
	other := newRun("ex-3", "b", []string{"t0"})
	other.e.RequestId = "req"
	other.create(t, s)
	dup := newRun("ex-1", "b", []string{"t0"})
	require.ErrorIs(t, s.CreateExecution(ctx, dup.e, dup.waves, dup.as, dup.entries), store.ErrAlreadyExists)
	tl, err := s.GetTaskList(ctx, "a", store.ViewBasic)
	require.NoError(t, err)
	require.EqualValues(t, 1, tl.RunCount)
}

func testListExecutions(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "a", 1)
	newList(t, s, "b", 1)
	var all []*schedulerv1.Execution
	for i, list := range []string{"a", "b", "a", "a", "b"} {
		r := newRun(fmt.Sprintf("ex-%d", i), list, []string{"t0"})
		if i == 2 {
			r.e.Status = exPaused
		}
		if i == 3 {
			r.e.Status, r.e.Outcome = exCompleted, commonv1.Outcome_OUTCOME_CONVERGED
			r.e.FeatureBuildId = "fb-1"
		}
		all = append(all, r.create(t, s).e)
	}
	newest := slices.Clone(all)
	sort.Slice(newest, func(i, j int) bool {
		ti, tj := newest[i].CreateTime.AsTime(), newest[j].CreateTime.AsTime()
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return newest[i].Id > newest[j].Id
	})
	pages := func(q store.ListExecutionsQuery) []string {
		t.Helper()
		var got []string
		for range 10 {
			page, next, err := s.ListExecutions(ctx, q)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), q.PageSize)
			got = append(got, ids(page)...)
			if next == nil {
				return got
			}
			q.After = next
		}
		t.Fatal("too many pages")
		return nil
	}
	require.Equal(t, ids(newest), pages(store.ListExecutionsQuery{PageSize: 2}))
	require.Equal(t, ids(newest), pages(store.ListExecutionsQuery{PageSize: 5}))
	var ofA []string
	for _, e := range newest {
		if e.TaskListId == "a" {
			ofA = append(ofA, e.Id)
		}
	}
	require.Equal(t, ofA, pages(store.ListExecutionsQuery{PageSize: 1, TaskListID: "a"}))
	require.ElementsMatch(t, []string{"ex-2", "ex-3"}, pages(store.ListExecutionsQuery{PageSize: 10,
		Statuses: []schedulerv1.ExecutionStatus{exPaused, exCompleted}}))
	require.Equal(t, []string{"ex-3"}, pages(store.ListExecutionsQuery{PageSize: 10, FeatureBuildID: "fb-1"}))
	require.Empty(t, pages(store.ListExecutionsQuery{PageSize: 10, TaskListID: "b", FeatureBuildID: "fb-1"}))

	// A page read back is what GetExecution reads.
	page, _, err := s.ListExecutions(ctx, store.ListExecutionsQuery{PageSize: 1, TaskListID: "b"})
	require.NoError(t, err)
	e, _, err := s.GetExecution(ctx, page[0].Id)
	require.NoError(t, err)
	require.True(t, proto.Equal(e, page[0]))
}

func testDeleteTaskList(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	r := newRun("ex", "tl", []string{"t0"}).create(t, s)
	require.ErrorIs(t, s.DeleteTaskList(ctx, "tl"), store.ErrActive)
	update(t, s, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.Outcome, e.EndTime = exFailed, commonv1.Outcome_OUTCOME_FAILED, timestamppb.New(tx.Now())
		require.NoError(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, r.as[0].Id, 1))
		require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, Message: "failed"}))
		return tx.PutExecution(e)
	})
	require.NoError(t, s.DeleteTaskList(ctx, "tl"))
	_, _, err := s.GetExecution(ctx, "ex")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AssignmentExecution(ctx, r.as[0].Id)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, _, _, err = s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex", Limit: 1})
	require.ErrorIs(t, err, store.ErrNotFound)
	list, _, err := s.ListExecutions(ctx, store.ListExecutionsQuery{PageSize: 10})
	require.NoError(t, err)
	require.Empty(t, list)
}

// A new (PENDING) run of a list with an open run is refused, naming it, also when the starts race
// (issue 15 part 10).
func testOneOpenRunPerList(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "a", 1)
	open := newRun("a-1", "a", []string{"t0"})
	open.e.Status = exPending
	open.create(t, s)
	next := newRun("a-2", "a", []string{"t0"})
	next.e.Status = exPending
	err := s.CreateExecution(ctx, next.e, next.waves, next.as, next.entries)
	require.ErrorIs(t, err, store.ErrActive)
	require.ErrorContains(t, err, "a-1")
	// CreateOptions.AllowConcurrent opts out of the rule.
	side := newRun("a-side", "a", []string{"t0"})
	side.e.Status = exPending
	require.NoError(t, s.CreateExecution(ctx, side.e, side.waves, side.as, side.entries, store.CreateOptions{AllowConcurrent: true}))
	update(t, s, "a-side", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, commonv1.Outcome_OUTCOME_CANCELLED
		return tx.PutExecution(e)
	})
	update(t, s, "a-1", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status, e.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, commonv1.Outcome_OUTCOME_CANCELLED
		return tx.PutExecution(e)
	})

	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := newRun(fmt.Sprintf("race-%d", i), "a", []string{"t0"})
			r.e.Status = exPending
			errs[i] = s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries)
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, store.ErrActive)
	}
	require.Equal(t, 1, won)
}

// AwaitingSignOff answers the runs that ended COMPLETED with outcome CONVERGED_PENDING_HUMAN
// only, oldest first.
func testAwaitingSignOff(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	newList(t, s, "a", 1)
	end := func(id string, st schedulerv1.ExecutionStatus, o commonv1.Outcome) {
		newRun(id, "a", []string{"t0"}).create(t, s)
		update(t, s, id, func(tx store.ExecTx) error {
			e := tx.Execution()
			e.Status, e.Outcome = st, o
			return tx.PutExecution(e)
		})
	}
	end("x-1", schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN)
	end("x-2", schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, commonv1.Outcome_OUTCOME_CONVERGED)
	end("x-3", schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED)
	end("x-4", schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN)
	newRun("x-5", "a", []string{"t0"}).create(t, s) // running
	got, err := s.AwaitingSignOff(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, []string{"x-1", "x-4"}, ids(got))
	got, err = s.AwaitingSignOff(t.Context(), 1)
	require.NoError(t, err)
	require.Equal(t, []string{"x-1"}, ids(got))
}

// testPlacementsAreTheCallers: every GetExecution answers the placements as created, whatever an
// earlier caller did to the waves it was given (a store may keep decoded placements between
// reads; it must not hand out what it keeps).
func testPlacementsAreTheCallers(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 3)
	r := richRun("ex", "tl", "")
	want := proto.Clone(r.waves[0]).(*schedulerv1.Wave).GetPlacements()
	require.NoError(t, s.CreateExecution(ctx, r.e, r.waves, r.as, r.entries))
	for round := range 3 {
		_, waves, err := s.GetExecution(ctx, "ex")
		require.NoError(t, err)
		require.Len(t, waves, 2)
		requireProtos(t, want, waves[0].GetPlacements())
		require.Empty(t, waves[1].GetPlacements())
		// What a caller does with its copy stays in it.
		ps := waves[0].GetPlacements()
		ps[0].TaskId, ps[0].Message = fmt.Sprintf("changed-%d", round), "changed"
		ps[1].ConflictingPaths = append(ps[1].ConflictingPaths, "other.go")
		ps[1].ConflictingTaskIds[0] = "changed"
		waves[0].Placements = append(ps, &schedulerv1.WavePlacement{TaskId: "added"})
	}
}
