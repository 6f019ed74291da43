package postgres_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

// open returns two stores on one new database: a replica that answers queries and another.
func open(t *testing.T) (replica, other *postgres.Store) {
	t.Helper()
	url := dbtest.Postgres(t)
	replica, err := postgres.New(t.Context(), url, database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Close() })
	other, err = postgres.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	return replica, other
}

func record(t *testing.T, st store.Store, content string) store.Item {
	t.Helper()
	it, _, err := st.Record(t.Context(), store.NewItem{
		Type: store.TypeGotcha, Content: content, FilePattern: "*.sql", Confidence: 0.5,
	}, time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	return it
}

func hitCount(t *testing.T, st store.Store, id int64) int64 {
	t.Helper()
	it, err := st.Get(t.Context(), id)
	require.NoError(t, err)
	return it.HitCount
}

// A query's hits are written by the next flush, and by Close: another replica reads them then.
func TestHitsWrittenByFlushAndClose(t *testing.T) {
	t.Parallel()
	replica, other := open(t)
	x := record(t, replica, "x")

	for range 2 {
		_, err := replica.Answer(t.Context(), []store.Candidate{{ID: x.ID}})
		require.NoError(t, err)
	}
	require.Equal(t, int64(2), hitCount(t, replica, x.ID), "the replica reads its own hits at once")
	require.Equal(t, int64(0), hitCount(t, other, x.ID), "not flushed yet")

	require.NoError(t, replica.FlushHits(t.Context()))
	require.Equal(t, int64(2), hitCount(t, other, x.ID))

	_, err := replica.Answer(t.Context(), []store.Candidate{{ID: x.ID}})
	require.NoError(t, err)
	require.NoError(t, replica.Close())
	require.Equal(t, int64(3), hitCount(t, other, x.ID), "Close flushes")
	require.NoError(t, replica.Close(), "twice")
}

// Answers racing flushes, on two replicas, lose and duplicate no hit.
func TestHitsExactUnderConcurrentFlushes(t *testing.T) {
	t.Parallel()
	replica, other := open(t)
	x, y := record(t, replica, "x"), record(t, replica, "y")

	const answers = 50
	var wg sync.WaitGroup
	for i := range 4 {
		st := replica
		if i%2 == 1 {
			st = other
		}
		wg.Go(func() {
			ids := []store.Candidate{{ID: x.ID}, {ID: y.ID}}
			if i >= 2 {
				ids = []store.Candidate{{ID: y.ID}, {ID: x.ID}}
			}
			for range answers {
				_, err := st.Answer(t.Context(), ids)
				require.NoError(t, err)
			}
		})
		wg.Go(func() {
			for range answers / 5 {
				require.NoError(t, st.FlushHits(t.Context()))
			}
		})
	}
	wg.Wait()
	require.NoError(t, replica.FlushHits(t.Context()))
	require.NoError(t, other.FlushHits(t.Context()))
	for _, st := range []*postgres.Store{replica, other} {
		require.Equal(t, int64(4*answers), hitCount(t, st, x.ID))
		require.Equal(t, int64(4*answers), hitCount(t, st, y.ID))
	}
}

// An item answered is held at its revision: answered again without a read while the candidates
// carry that revision, read again once it changes (on any replica); another replica's hits reach
// a held item with this replica's next flush.
func TestAnsweredItemsHeldAtTheirRevision(t *testing.T) {
	t.Parallel()
	replica, other := open(t)
	x := record(t, replica, "x")
	candidate := func() store.Candidate {
		t.Helper()
		cands, err := replica.Candidates(t.Context(), store.CandidateQuery{Path: "a.sql", MinRank: math.MinInt64, Limit: 10})
		require.NoError(t, err)
		require.Len(t, cands, 1)
		return cands[0]
	}
	answer := func(c store.Candidate) store.Item {
		t.Helper()
		items, err := replica.Answer(t.Context(), []store.Candidate{c})
		require.NoError(t, err)
		require.Len(t, items, 1)
		return items[0]
	}

	c := candidate()
	require.Equal(t, int64(0), c.Revision)
	require.Equal(t, int64(1), answer(c).HitCount)
	require.NoError(t, replica.FlushHits(t.Context()))

	// A change that bypasses the store (and so the revision) shows which answers read the row.
	_, err := replica.Pool().Exec(t.Context(), `UPDATE knowledge_items SET content = 'changed' WHERE id = $1`, x.ID)
	require.NoError(t, err)
	got := answer(c)
	require.Equal(t, "x", got.Content, "held: answered without a read")
	require.Equal(t, int64(2), got.HitCount)

	confirmed, err := other.Confirm(t.Context(), x.ID, "seen again", "", time.Date(2026, 1, 17, 10, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	c = candidate()
	require.Equal(t, int64(1), c.Revision, "a confirmation on another replica")
	got = answer(c)
	require.Equal(t, "changed", got.Content, "read at the new revision")
	require.Equal(t, confirmed.Confidence, got.Confidence)
	require.Equal(t, "seen again", got.Evidence)
	require.Equal(t, int64(1), got.ConfirmCount)
	require.Equal(t, int64(3), got.HitCount)

	for range 2 {
		_, err := other.Answer(t.Context(), []store.Candidate{c})
		require.NoError(t, err)
	}
	require.NoError(t, other.FlushHits(t.Context()))
	require.Equal(t, int64(4), answer(c).HitCount, "the other's hits are not seen yet")
	require.NoError(t, replica.FlushHits(t.Context()))
	require.Equal(t, int64(7), answer(c).HitCount, "seen after this replica's flush")
	require.Equal(t, int64(6), hitCount(t, other, x.ID), "one hit not flushed")

	// A deleted item is no longer held.
	require.NoError(t, replica.Delete(t.Context(), x.ID))
	items, err := replica.Answer(t.Context(), []store.Candidate{c})
	require.NoError(t, err)
	require.Empty(t, items)
}
