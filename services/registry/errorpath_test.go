package registry_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr/grpcerrtest"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/internal/redistest"
	"github.com/converge-dev/converge/services/registry/store"
	"github.com/converge-dev/converge/services/registry/store/postgres"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

// withInproc is st with in-process hot state, closed when t ends.
func withInproc(t *testing.T, st store.Store) *env {
	hb := inproc.New(st, "inproc")
	t.Cleanup(func() { _ = hb.Close() })
	return &env{store: st, hot: hb}
}

// TestUnexpectedErrorIsInternal: a table dropped under the Registry is a bug, not bad input nor
// an outage: Internal with the request id, no SQL text.
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, db *sql.DB) {
		e := withInproc(t, st)
		c := serve(t, e, e.hot).client
		_, err := c.ListOwners(t.Context(), &registryv1.ListOwnersRequest{})
		require.NoError(t, err)
		_, err = db.ExecContext(t.Context(), "DROP TABLE file_ownership")
		require.NoError(t, err)
		_, err = c.ListOwners(t.Context(), &registryv1.ListOwnersRequest{})
		grpcerrtest.RequireInternal(t, err)
		_, err = c.SetOwner(t.Context(), &registryv1.SetOwnerRequest{Pattern: "src/**", Owner: "a"})
		grpcerrtest.RequireInternal(t, err)
	})
}

// TestStoreOutageIsUnavailable: a closed durable store (Postgres pool, SQLite database) and a
// stopped Redis answer Unavailable, without the driver's text.
func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, _ *sql.DB) {
		e := withInproc(t, st)
		c := serve(t, e, e.hot).client
		_, err := c.ListOwners(t.Context(), &registryv1.ListOwnersRequest{})
		require.NoError(t, err)
		require.NoError(t, e.store.Close())
		_, err = c.ListOwners(t.Context(), &registryv1.ListOwnersRequest{})
		grpcerrtest.RequireUnavailable(t, err)
		_, err = c.SetOwner(t.Context(), &registryv1.SetOwnerRequest{Pattern: "src/**", Owner: "a"})
		grpcerrtest.RequireUnavailable(t, err)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		srv := redistest.StartServer(t)
		hb := redishot.New(srv.Client(), "", st)
		c := serve(t, &env{store: st, hot: hb}, hb).client
		_, err = c.ListLocks(t.Context(), &registryv1.ListLocksRequest{})
		require.NoError(t, err)
		srv.Kill()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{})
		grpcerrtest.RequireUnavailable(t, err)
		_, err = c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "a.go"})
		grpcerrtest.RequireUnavailable(t, err)
	})
}

// TestRedisErrorsAreUnavailable: go-redis' errors for a Redis that cannot serve now (a LOADING
// reply, a closed client) are recognised by platform/database; another error reply is not.
func TestRedisErrorsAreUnavailable(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	err := rdb.Eval(t.Context(), "return redis.error_reply('LOADING Redis is loading the dataset in memory')", nil).Err()
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "%v", err)
	err = rdb.Eval(t.Context(), "return redis.error_reply('ERR something else')", nil).Err()
	require.Error(t, err)
	require.False(t, database.IsUnavailable(err), "%v", err)

	require.NoError(t, rdb.Close())
	err = rdb.Ping(t.Context()).Err()
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "%v", err)

	// A pool whose one connection is busy (a blocking pop) times out.
	opts, err := redis.ParseURL(redistest.URL())
	require.NoError(t, err)
	opts.PoolSize, opts.PoolTimeout, opts.MinIdleConns = 1, 20*time.Millisecond, 0
	small := redis.NewClient(opts)
	t.Cleanup(func() { _ = small.Close() })
	go small.BLPop(context.WithoutCancel(t.Context()), 3*time.Second, fmt.Sprintf("converge-test-no-such-list-%d", time.Now().UnixNano()))
	require.Eventually(t, func() bool {
		err = small.Ping(t.Context()).Err()
		return errors.Is(err, redis.ErrPoolTimeout)
	}, 10*time.Second, 5*time.Millisecond)
	require.True(t, database.IsUnavailable(err), "%v", err)
}
