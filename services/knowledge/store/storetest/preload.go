package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/knowledge/store"
)

// runPreload checks that a store answers after Preload as before it: the whole items, their hits
// counted, a change made since read, a deleted item left out.
func runPreload(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("Preload", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		x := b.record(t, "*.sql", "x", t0)
		y := b.record(t, "*.sql", "y", t0)
		z := b.record(t, "*.sql", "z", t0)
		for range 2 {
			_, err := b.store.Answer(b.ctx, byIDs(x.ID, y.ID))
			require.NoError(t, err)
		}
		_, err := b.store.Answer(b.ctx, byIDs(x.ID))
		require.NoError(t, err)
		require.NoError(t, b.store.FlushHits(b.ctx))
		require.NoError(t, b.store.Preload(b.ctx))

		answer := func(c store.Candidate) store.Item {
			t.Helper()
			items, err := b.store.Answer(b.ctx, []store.Candidate{c})
			require.NoError(t, err)
			require.Len(t, items, 1)
			return items[0]
		}
		want := x
		want.HitCount = 4
		require.Equal(t, want, answer(byIDs(x.ID)[0]), "the whole item, its hits and this one")

		confirmed, err := b.store.Confirm(b.ctx, y.ID, "again", "", t0)
		require.NoError(t, err)
		got := answer(store.Candidate{ID: y.ID, Revision: confirmed.Revision()})
		require.Equal(t, int64(1), got.ConfirmCount, "read at its new revision")
		require.Equal(t, "again", got.Evidence)
		require.Equal(t, int64(3), got.HitCount)

		require.Equal(t, int64(1), answer(byIDs(z.ID)[0]).HitCount, "an item without hits")

		require.NoError(t, b.store.Delete(b.ctx, x.ID))
		items, err := b.store.Answer(b.ctx, byIDs(x.ID))
		require.NoError(t, err)
		require.Empty(t, items, "deleted after the preload")
	})
}
