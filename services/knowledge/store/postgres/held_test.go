package postgres_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

// The items answered again stay held through a stream of items answered once, longer than the
// store holds; items answered more often are held in place of others, and among the protected
// the least recently answered go first.
func TestHeldItemsAnsweredAgainStay(t *testing.T) {
	t.Parallel()
	st, _ := open(t)
	postgres.HoldAtMost(st, 10) // 8 protected

	var hot, once []store.Candidate
	for i := range 8 {
		it := record(t, st, fmt.Sprintf("hot %d", i))
		hot = append(hot, store.Candidate{ID: it.ID, Revision: it.Revision()})
	}
	for i := range 30 {
		it := record(t, st, fmt.Sprintf("once %d", i))
		once = append(once, store.Candidate{ID: it.ID, Revision: it.Revision()})
	}
	// read answers c and tells whether it read the table.
	read := func(c store.Candidate) bool {
		t.Helper()
		before := st.AnswerReads()
		items, err := st.Answer(t.Context(), []store.Candidate{c})
		require.NoError(t, err)
		require.Len(t, items, 1)
		return st.AnswerReads() > before
	}

	for _, c := range hot {
		require.True(t, read(c), "first answer")
	}
	for _, c := range hot {
		require.False(t, read(c), "held")
	}
	for _, c := range once {
		require.True(t, read(c), "first answer")
	}
	for i, c := range hot {
		require.False(t, read(c), "hot item %d was evicted by items answered once", i)
	}
	require.True(t, read(once[len(once)-1]), "the set was full of items answered more: the last item answered once was not held")

	// Items answered more often than those on probation are held in their place, and, answered
	// again, protected: each sends the least recently answered protected item back on
	// probation, hot[0] first, where the next such item evicts it.
	for i := range 3 {
		w := record(t, st, fmt.Sprintf("w %d", i))
		cw := store.Candidate{ID: w.ID, Revision: w.Revision()}
		reads := 0
		for read(cw) {
			reads++
			require.Less(t, reads, 16, "never held")
		}
	}
	for i, c := range hot[1:] {
		require.False(t, read(c), "hot item %d", i+1)
	}
	require.True(t, read(hot[0]), "the least recently answered went first")
}

// Preload holds the items with most hits, as many as may be protected, with their hits: a
// restarted replica answers them without reading them.
func TestPreloadHoldsTheMostHitItems(t *testing.T) {
	t.Parallel()
	st, other := open(t)
	postgres.HoldAtMost(st, 3) // 2 protected
	var cands []store.Candidate
	for i := range 4 {
		it := record(t, other, fmt.Sprintf("item %d", i))
		c := store.Candidate{ID: it.ID, Revision: it.Revision()}
		cands = append(cands, c)
		for range 4 - i { // item 0 has 4 hits, item 3 one
			_, err := other.Answer(t.Context(), []store.Candidate{c})
			require.NoError(t, err)
		}
	}
	require.NoError(t, other.FlushHits(t.Context()))

	require.NoError(t, st.Preload(t.Context()))
	for i, c := range cands[:2] {
		items, err := st.Answer(t.Context(), []store.Candidate{c})
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.Equal(t, int64(4-i+1), items[0].HitCount, "item %d: its hits and this answer", i)
	}
	require.Zero(t, st.AnswerReads(), "the two most hit were held")
	_, err := st.Answer(t.Context(), []store.Candidate{cands[2]})
	require.NoError(t, err)
	require.Equal(t, int64(1), st.AnswerReads(), "the third was not")
	require.NoError(t, st.Preload(t.Context()), "a second preload evicts none")
}
