package storetest

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

func testUpdateCommits(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	r := newRun("ex", "tl", []string{"t0", "t1"}, []string{"t2"})
	r.e.RequestId = "req"
	r.waves[0].Placements = []*schedulerv1.WavePlacement{{TaskId: "t0", Message: "level 0"}, {TaskId: "t1", Message: "level 0"}}
	r.create(t, s)

	var txNow time.Time
	var leaked store.ExecTx
	update(t, s, "ex", func(tx store.ExecTx) error {
		leaked = tx
		txNow = tx.Now()
		e := tx.Execution()
		require.EqualValues(t, 1, e.LastSeq)
		require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "one"}, &commonv1.LogEntry{EventType: evInfo, Message: "two"}))
		require.EqualValues(t, 3, tx.Execution().LastSeq, "Execution sees the appends")
		require.EqualValues(t, 1, e.LastSeq, "Execution returns a copy")

		// The store's fields are kept whatever the put says.
		e.Status, e.CompletedTasks, e.RunningTasks, e.StatusMessage = exPaused, 1, 1, "paused by test"
		e.LastSeq, e.RunNumber, e.RequestId, e.TaskListId, e.CreateTime = 99, 42, "other", "other", at(0)
		require.NoError(t, tx.PutExecution(e))
		got := tx.Execution()
		require.Equal(t, exPaused, got.Status)
		require.EqualValues(t, 3, got.LastSeq)
		require.EqualValues(t, 1, got.RunNumber)
		require.True(t, got.UpdateTime.AsTime().Equal(tx.Now()))
		// A put that changes only columns keeps the detail the last one wrote.
		got.CompletedTasks = 2
		require.NoError(t, tx.PutExecution(got))
		again := tx.Execution()
		require.Truef(t, proto.Equal(got, again), "after a put of columns only: %v, want %v", again, got)
		require.Equal(t, "paused by test", again.StatusMessage)

		waves, err := tx.Waves()
		require.NoError(t, err)
		require.Len(t, waves, 2)
		require.Empty(t, waves[0].Placements, "a transaction reads no placements")
		waves[1].Status, waves[1].BaseCommit, waves[1].ActiveAgents = wvRunning, "abc", 2
		require.NoError(t, tx.PutWave(waves[1]))
		one, err := tx.Wave(1)
		require.NoError(t, err)
		require.Equal(t, waves[0].Id, one.Id)
		require.Empty(t, one.Placements)
		one.ActiveAgents = 3
		require.NoError(t, tx.PutWave(one), "a wave read without its placements is stored without losing them")
		_, err = tx.Wave(3)
		require.ErrorIs(t, err, store.ErrNotFound)

		a, err := tx.Assignment("ex/t1")
		require.NoError(t, err)
		a.Status, a.InstanceId, a.FencingToken, a.LeaseExpireTime = asRunning, "agent-1", 5, timestamppb.New(tx.Now().Add(time.Minute))
		a.ProgressPercent, a.LastReportSeq = 50, 2
		a.PreviousErrors = []*commonv1.ErrorContext{{Code: "X"}}
		require.NoError(t, tx.PutAssignment(a))
		require.NoError(t, tx.SetTaskStatus("t1", commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS))
		require.NoError(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck-1", TaskId: "t1", InstanceId: "agent-1", GitRef: "abc",
			Files: []*commonv1.FileHash{{Path: "a.go"}}, Metadata: map[string]string{"reason": "attempt"}}, "ex/t1", 1))
		require.ErrorIs(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck-1", GitRef: "abc"}, "", 1), store.ErrAlreadyExists)
		return nil
	})
	require.ErrorIs(t, leaked.PutExecution(leaked.Execution()), store.ErrTxDone)
	require.ErrorIs(t, leaked.Append(&commonv1.LogEntry{EventType: evInfo, Message: "late"}), store.ErrTxDone)
	_, err := leaked.Waves()
	require.ErrorIs(t, err, store.ErrTxDone)

	e, waves, err := s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	require.Equal(t, exPaused, e.Status)
	require.Equal(t, "paused by test", e.StatusMessage)
	require.EqualValues(t, 1, e.RunningTasks)
	require.EqualValues(t, 3, e.LastSeq)
	require.EqualValues(t, 1, e.RunNumber)
	require.Equal(t, "req", e.RequestId)
	require.Equal(t, "tl", e.TaskListId)
	require.True(t, proto.Equal(r.e.CreateTime, e.CreateTime))
	require.True(t, e.UpdateTime.AsTime().Equal(txNow), "update time %v, tx now %v", e.UpdateTime.AsTime(), txNow)
	require.Equal(t, wvRunning, waves[1].Status)
	require.EqualValues(t, 2, waves[1].ActiveAgents)
	require.EqualValues(t, 3, waves[0].ActiveAgents)
	require.Len(t, waves[0].Placements, 2, "placements are kept")
	require.Equal(t, "abc", waves[1].BaseCommit)
	as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", TaskID: "t1", PageSize: 5})
	require.NoError(t, err)
	require.Len(t, as, 1)
	require.Equal(t, asRunning, as[0].Status)
	require.EqualValues(t, 50, as[0].ProgressPercent)
	require.EqualValues(t, 2, as[0].LastReportSeq)
	require.Len(t, as[0].PreviousErrors, 1)
	tl, err := s.GetTaskList(ctx, "tl", store.ViewFull)
	require.NoError(t, err)
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS, tl.Spec.Tasks[1].Status)
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_PENDING, tl.Spec.Tasks[0].Status)
	entries, last := readAll(t, s, "ex")
	require.EqualValues(t, 3, last)
	require.Equal(t, []int64{1, 2, 3}, seqs(entries))
	require.True(t, entries[2].Time.AsTime().Equal(txNow))
	if sq, ok := s.(interface{ DB() *sql.DB }); ok {
		var n int
		require.NoError(t, sq.DB().QueryRowContext(ctx, `SELECT count(*) FROM checkpoints WHERE checkpoint_id = 'ck-1' AND assignment_id = 'ex/t1'`).Scan(&n))
		require.Equal(t, 1, n)
	}
}

func testUpdateRollsBack(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	newRun("ex", "tl", []string{"t0", "t1"}).create(t, s)
	beforeE, beforeW, err := s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	beforeA, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)

	err = s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		e := tx.Execution()
		e.Status = exPaused
		require.NoError(t, tx.PutExecution(e))
		require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "lost"}))
		waves, err := tx.Waves()
		require.NoError(t, err)
		waves[0].Status = wvIntegrating
		require.NoError(t, tx.PutWave(waves[0]))
		a, err := tx.Assignment("ex/t0")
		require.NoError(t, err)
		a.Status = asCompleted
		require.NoError(t, tx.PutAssignment(a))
		require.NoError(t, tx.InsertAssignment(&store.Assignment{Assignment: &schedulerv1.Assignment{Id: "ex/i1",
			Kind: kindIntegration, WaveNumber: 1}, Position: -1}))
		require.NoError(t, tx.SetTaskStatus("t0", commonv1.TaskStatus_TASK_STATUS_COMPLETED))
		require.NoError(t, tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, "ex/t0", 1))
		return fmt.Errorf("wave moved on: %w", store.ErrConflict)
	})
	require.ErrorIs(t, err, store.ErrConflict)

	e, waves, err := s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	require.True(t, proto.Equal(beforeE, e), "execution:\n got %v\nwant %v", e, beforeE)
	requireProtos(t, beforeW, waves)
	as, _, err := s.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: "ex", PageSize: 10})
	require.NoError(t, err)
	requireAssignments(t, beforeA, as)
	entries, last := readAll(t, s, "ex")
	require.EqualValues(t, 1, last)
	require.Len(t, entries, 1)
	tl, err := s.GetTaskList(ctx, "tl", store.ViewFull)
	require.NoError(t, err)
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_PENDING, tl.Spec.Tasks[0].Status)
	// The checkpoint id is free again.
	update(t, s, "ex", func(tx store.ExecTx) error {
		return tx.PutCheckpoint(&commonv1.Checkpoint{Id: "ck", GitRef: "abc"}, "", 1)
	})
}
