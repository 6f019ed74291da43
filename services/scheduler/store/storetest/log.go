package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

func testAppendIsDense(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	newRun("ex", "tl", []string{"t0"}).create(t, s)
	newRun("other", "tl", []string{"t0"}).create(t, s)
	want := 1
	for i := 1; i <= 3; i++ {
		update(t, s, "ex", func(tx store.ExecTx) error {
			var batch []*commonv1.LogEntry
			for j := range i {
				batch = append(batch, &commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("serial %d.%d", i, j)})
			}
			require.NoError(t, tx.Append(batch...))
			for j, e := range batch {
				require.EqualValues(t, want+j+1, e.Seq)
			}
			return nil
		})
		want += i
	}
	// Concurrent writers, of this execution and of another.
	const writers, rounds = 8, 4
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds*2)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				id := "ex"
				if w%4 == 3 {
					id = "other"
				}
				errs <- s.UpdateExecution(ctx, id, func(tx store.ExecTx) error {
					return tx.Append(
						&commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("w%d r%d a", w, r), InstanceId: fmt.Sprintf("agent-%d", w)},
						&commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("w%d r%d b", w, r), InstanceId: fmt.Sprintf("agent-%d", w)},
					)
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for id, n := range map[string]int{"ex": want + 6*rounds*2, "other": 1 + 2*rounds*2} {
		entries, last := readAll(t, s, id)
		require.EqualValues(t, n, last, id)
		wantSeqs := make([]int64, n)
		for i := range wantSeqs {
			wantSeqs[i] = int64(i + 1)
		}
		require.Equal(t, wantSeqs, seqs(entries), id)
		// Each transaction's two entries are adjacent: a then b.
		for i, e := range entries {
			if m := e.Message; len(m) > 2 && m[len(m)-2:] == " a" {
				require.Equal(t, m[:len(m)-2]+" b", entries[i+1].Message)
			}
		}
		e, _, err := s.GetExecution(ctx, id)
		require.NoError(t, err)
		require.EqualValues(t, n, e.LastSeq)
	}
}

// A transaction that appends before and after PutExecution, more entries than one statement
// may hold, stores them all in order and the execution's LastSeq as the last; one that fails
// stores none of them.
func testAppendAroundPutExecution(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	newRun("ex", "tl", []string{"t0"}).create(t, s) // seq 1
	var batch []*commonv1.LogEntry
	for i := range 70 {
		batch = append(batch, &commonv1.LogEntry{EventType: evInfo, Message: fmt.Sprintf("after %d", i), InstanceId: "agent-1"})
	}
	update(t, s, "ex", func(tx store.ExecTx) error {
		require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "before"}))
		e := tx.Execution()
		e.StatusMessage = "put between appends"
		require.NoError(t, tx.PutExecution(e))
		require.NoError(t, tx.Append(batch...))
		require.EqualValues(t, 72, tx.Execution().LastSeq)
		return nil
	})
	update(t, s, "ex", func(tx store.ExecTx) error {
		require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "last"}))
		e := tx.Execution()
		e.StatusMessage = "put after the append"
		return tx.PutExecution(e)
	})
	err := s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error {
		require.NoError(t, tx.Append(&commonv1.LogEntry{EventType: evInfo, Message: "lost"}))
		return errors.New("refused")
	})
	require.ErrorContains(t, err, "refused")
	entries, last := readAll(t, s, "ex")
	require.EqualValues(t, 73, last)
	require.Len(t, entries, 73)
	for i, e := range entries {
		require.EqualValues(t, i+1, e.Seq)
	}
	require.Equal(t, "before", entries[1].Message)
	require.Equal(t, "after 0", entries[2].Message)
	require.Equal(t, "after 69", entries[71].Message)
	require.Equal(t, "agent-1", entries[71].InstanceId)
	require.Equal(t, "last", entries[72].Message)
	e, _, err := s.GetExecution(ctx, "ex")
	require.NoError(t, err)
	require.EqualValues(t, 73, e.LastSeq)
	require.Equal(t, "put after the append", e.StatusMessage)
}

func testReadLog(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	newRun("ex", "tl", []string{"t0", "t1"}).create(t, s) // seq 1: execution started
	newRun("empty", "tl", []string{"t0"}).create(t, s)
	update(t, s, "ex", func(tx store.ExecTx) error {
		return tx.Append(
			&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t0", InstanceId: "agent-1", WaveNumber: 1, Message: "2"},
			&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t1", InstanceId: "agent-2", WaveNumber: 1, Message: "3"},
			&commonv1.LogEntry{EventType: evTaskFailed, TaskId: "t0", InstanceId: "agent-1", WaveNumber: 1, Message: "4"},
			&commonv1.LogEntry{EventType: evError, Message: "5"},
			&commonv1.LogEntry{EventType: evTaskStarted, TaskId: "t0", InstanceId: "agent-2", WaveNumber: 1, Message: "6"},
			&commonv1.LogEntry{EventType: evInfo, TaskId: "t1", Message: "7"},
		)
	})
	read := func(q store.LogQuery) ([]int64, bool, int64) {
		t.Helper()
		q.ExecutionID = "ex"
		entries, more, last, err := s.ReadLog(ctx, q)
		require.NoError(t, err)
		return seqs(entries), more, last
	}
	check := func(q store.LogQuery, want []int64, wantMore bool) {
		t.Helper()
		got, more, last := read(q)
		require.Equal(t, want, got, "%+v", q)
		require.Equal(t, wantMore, more, "hasMore of %+v", q)
		require.EqualValues(t, 7, last, "lastSeq is the whole log's")
	}
	check(store.LogQuery{Limit: 100}, []int64{1, 2, 3, 4, 5, 6, 7}, false)
	check(store.LogQuery{Limit: 3}, []int64{1, 2, 3}, true)
	check(store.LogQuery{Limit: 3, AfterSeq: 3}, []int64{4, 5, 6}, true)
	check(store.LogQuery{Limit: 3, AfterSeq: 4}, []int64{5, 6, 7}, false)
	check(store.LogQuery{Limit: 3, AfterSeq: 7}, nil, false)
	check(store.LogQuery{Limit: 3, Tail: true}, []int64{5, 6, 7}, true)
	check(store.LogQuery{Limit: 7, Tail: true}, []int64{1, 2, 3, 4, 5, 6, 7}, false)
	check(store.LogQuery{Limit: 2, Tail: true, AfterSeq: 4}, []int64{6, 7}, true)
	check(store.LogQuery{Limit: 100, TaskID: "t0"}, []int64{2, 4, 6}, false)
	check(store.LogQuery{Limit: 100, InstanceID: "agent-2"}, []int64{3, 6}, false)
	check(store.LogQuery{Limit: 100, TaskID: "t0", InstanceID: "agent-1"}, []int64{2, 4}, false)
	check(store.LogQuery{Limit: 100, EventTypes: []commonv1.EventType{evTaskFailed, evError}}, []int64{4, 5}, false)
	check(store.LogQuery{Limit: 1, Tail: true, EventTypes: []commonv1.EventType{evTaskStarted}}, []int64{6}, true)
	check(store.LogQuery{Limit: 100, TaskID: "t9"}, nil, false)

	entries, more, last, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "empty", Limit: 5, AfterSeq: 1})
	require.NoError(t, err)
	require.Empty(t, entries)
	require.False(t, more)
	require.EqualValues(t, 1, last)
}
