package postgres_test

import (
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
		_, err := replica.Answer(t.Context(), []int64{x.ID})
		require.NoError(t, err)
	}
	require.Equal(t, int64(2), hitCount(t, replica, x.ID), "the replica reads its own hits at once")
	require.Equal(t, int64(0), hitCount(t, other, x.ID), "not flushed yet")

	require.NoError(t, replica.FlushHits(t.Context()))
	require.Equal(t, int64(2), hitCount(t, other, x.ID))

	_, err := replica.Answer(t.Context(), []int64{x.ID})
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
			ids := []int64{x.ID, y.ID}
			if i >= 2 {
				ids = []int64{y.ID, x.ID}
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
