package redishot_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/hot/hottest"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/internal/redistest"
	"github.com/converge-dev/converge/services/registry/store"
	"github.com/converge-dev/converge/services/registry/store/postgres"
)

// bundle is a Redis backend on a private redis-server, with its epochs in Postgres: the
// production combination, on a Redis the test may flush and restart.
type bundle struct {
	server  *redistest.Server
	rdb     *redis.Client
	backend *redishot.Backend
	store   store.Store
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	srv := redistest.StartServer(t)
	rdb := srv.Client()
	b := redishot.New(rdb, "", st)
	t.Cleanup(func() { _ = b.Close() })
	return &bundle{server: srv, rdb: rdb, backend: b, store: st}
}

// grantSome grants and releases n locks on a few resources and answers the greatest token.
func grantSome(t *testing.T, b hot.Backend, n int) int64 {
	t.Helper()
	var last int64
	for i := range n {
		r := fmt.Sprintf("file-%d.go", i%3)
		l, granted, err := b.Acquire(t.Context(), r, "agent-a", time.Minute, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Greater(t, l.Token, last)
		last = l.Token
		require.NoError(t, b.Release(t.Context(), r, "agent-a", l.Token))
	}
	return last
}

// requireGreater grants every resource grantSome used and checks that each token is greater
// than before, with a new epoch.
func requireGreater(t *testing.T, b hot.Backend, before int64) {
	t.Helper()
	beforeEpoch, _ := hot.SplitToken(before)
	for i := range 3 {
		l, granted, err := b.Acquire(t.Context(), fmt.Sprintf("file-%d.go", i), "agent-b", time.Minute, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Greater(t, l.Token, before, "a token after the loss must be greater than every token before it")
		epoch, _ := hot.SplitToken(l.Token)
		require.Greater(t, epoch, beforeEpoch)
	}
}

func TestTokensIncreaseAcrossFlushall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := grantSome(t, b.backend, 10)
	require.NoError(t, b.rdb.FlushAll(t.Context()).Err())
	requireGreater(t, b.backend, before)
}

func TestTokensIncreaseAcrossRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := grantSome(t, b.backend, 10)
	b.server.Restart() // nothing saved: Redis comes back empty
	requireGreater(t, b.backend, before)
}

// Redis restarted from a snapshot older than its last grants comes back with an epoch and a
// counter behind tokens already handed out. The epoch records the run_id of the Redis process
// it was installed under, so the restarted process (a new run_id) takes a new epoch.
func TestTokensIncreaseAcrossRestartFromAnOldSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	grantSome(t, b.backend, 5)
	held, granted, err := b.backend.Acquire(ctx, "held.go", "agent-a", time.Hour, 0)
	require.NoError(t, err)
	require.True(t, granted)
	require.NoError(t, b.rdb.Save(ctx).Err())
	snapshotCounter, err := b.rdb.HGet(ctx, "{"+redishot.DefaultPrefix+"}:epoch", "c").Int64()
	require.NoError(t, err)
	before := grantSome(t, b.backend, 10) // handed out after the snapshot
	runBefore, err := redistest.RunID(ctx, b.rdb)
	require.NoError(t, err)

	b.server.Restart()
	runAfter, err := redistest.RunID(ctx, b.rdb)
	require.NoError(t, err)
	require.NotEqual(t, runBefore, runAfter)
	restored, err := b.rdb.HGet(ctx, "{"+redishot.DefaultPrefix+"}:epoch", "c").Int64()
	require.NoError(t, err)
	require.Equal(t, snapshotCounter, restored, "the snapshot's counter is back, behind the last tokens")
	_, counterBefore := hot.SplitToken(before)
	require.Less(t, restored, counterBefore)

	requireGreater(t, b.backend, before)

	// The snapshot's lock is back too; its holder re-acquiring it gets a token of the new
	// epoch, not the old one.
	got, err := b.backend.Get(ctx, "held.go")
	require.NoError(t, err)
	require.Equal(t, held.Token, got.Token)
	again, granted, err := b.backend.Acquire(ctx, "held.go", "agent-a", time.Hour, 0)
	require.NoError(t, err)
	require.True(t, granted)
	require.Greater(t, again.Token, before)
	_, err = b.backend.Renew(ctx, "held.go", "agent-a", held.Token, time.Hour)
	require.ErrorAs(t, err, new(*hot.StaleTokenError), "the old grant's token is stale")

	// The staleness index of the old snapshot is not trusted either.
	_, err = b.backend.Stale(ctx, time.Now(), 0, 10)
	require.ErrorIs(t, err, hot.ErrIndexLost)
}

// Tokens keep increasing on the shared test Redis, and the epoch is per prefix: two backends
// with their own prefixes do not disturb each other.
func TestEpochPerPrefix(t *testing.T) {
	t.Parallel()
	st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	rdb := redistest.Client(t)
	a := redishot.New(rdb, redistest.Prefix(t, rdb), st)
	b := redishot.New(rdb, redistest.Prefix(t, rdb), st)
	la, _, err := a.Acquire(t.Context(), "x.go", "agent-a", time.Minute, 0)
	require.NoError(t, err)
	lb, granted, err := b.Acquire(t.Context(), "x.go", "agent-b", time.Minute, 0)
	require.NoError(t, err)
	require.True(t, granted, "another prefix, another lock space")
	require.Equal(t, hot.Token(1, 1), la.Token)
	require.Equal(t, hot.Token(1, 1), lb.Token)
}

func TestUnreachableRedisIsUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.server.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var unavailable *store.UnavailableError
	_, _, err := b.backend.Acquire(ctx, "a.go", "agent-a", time.Minute, 0)
	require.ErrorAs(t, err, &unavailable)
	require.ErrorAs(t, b.backend.Ping(ctx), &unavailable)
	_, err = b.backend.Get(ctx, "a.go")
	require.ErrorAs(t, err, &unavailable)
}

// The race of the conformance suite, with more holders, on the production combination.
func TestRacingHoldersOnRedisAndPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hottest.RequireExclusive(t, b.backend, 32, 20)
}
