package hot_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/hot/hottest"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/internal/redistest"
	"github.com/converge-dev/converge/services/registry/store"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

// epochs answers a durable store of the test's own for fencing epochs. SQLite is enough here:
// the durable store's own suite runs on Postgres too.
func epochs(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestConformance runs the hot-state suite against Redis and in process.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rdb := redistest.Client(t)
		var prefixes sync.Map // backend → its key prefix
		hottest.Run(t, hottest.Harness{
			New: func(t *testing.T) hot.Backend {
				prefix := redistest.Prefix(t, rdb)
				b := redishot.New(rdb, prefix, epochs(t))
				t.Cleanup(func() { _ = b.Close() })
				prefixes.Store(b, prefix)
				return b
			},
			Lose: func(t *testing.T, b hot.Backend) hot.Backend {
				// FLUSHALL, as far as this backend can tell: every key of its prefix is gone.
				prefix, _ := prefixes.Load(b)
				redistest.DeletePrefix(t, rdb, prefix.(string))
				return b
			},
		})
	})
	t.Run("inproc", func(t *testing.T) {
		t.Parallel()
		var stores sync.Map // backend → its durable store
		newBackend := func(t *testing.T, st store.Store) hot.Backend {
			b := inproc.New(st, "inproc")
			t.Cleanup(func() { _ = b.Close() })
			stores.Store(b, st)
			return b
		}
		hottest.Run(t, hottest.Harness{
			New: func(t *testing.T) hot.Backend { return newBackend(t, epochs(t)) },
			Lose: func(t *testing.T, b hot.Backend) hot.Backend {
				// The process restarts: a new backend on the same durable store.
				st, _ := stores.Load(b)
				require.NoError(t, b.Close())
				return newBackend(t, st.(store.Store))
			},
		})
	})
}
