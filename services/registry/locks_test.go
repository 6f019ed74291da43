package registry_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/internal/redistest"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

func acquire(resource, holder string, ttl, wait time.Duration) *registryv1.AcquireLockRequest {
	req := &registryv1.AcquireLockRequest{Resource: resource, Holder: holder, Ttl: durationpb.New(ttl)}
	if wait > 0 {
		req.Wait = durationpb.New(wait)
	}
	return req
}

func TestLockLifecycle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()

		res, err := c.AcquireLock(ctx, acquire("server/routes/habits.ts", "agent-1", time.Minute, 0))
		require.NoError(t, err)
		require.True(t, res.GetGranted())
		mine := res.GetLock()
		require.Equal(t, "server/routes/habits.ts", mine.GetResource())
		require.Equal(t, "agent-1", mine.GetHolder())
		require.Positive(t, mine.GetToken())
		require.Equal(t, time.Minute, mine.GetExpireTime().AsTime().Sub(mine.GetAcquireTime().AsTime()))

		res, err = c.AcquireLock(ctx, acquire("server/routes/habits.ts", "agent-2", time.Minute, 0))
		require.NoError(t, err)
		require.False(t, res.GetGranted())
		require.Equal(t, "agent-1", res.GetLock().GetHolder(), "names the holder")
		require.Equal(t, mine.GetExpireTime().AsTime(), res.GetLock().GetExpireTime().AsTime(), "and its expiry")
		require.Zero(t, res.GetLock().GetToken(), "the token is withheld")

		got, err := c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "server/routes/habits.ts"})
		require.NoError(t, err)
		require.Equal(t, mine.GetToken(), got.GetLock().GetToken())

		list, err := c.ListLocks(ctx, &registryv1.ListLocksRequest{Prefix: "server/"})
		require.NoError(t, err)
		require.Len(t, list.GetLocks(), 1)
		require.Empty(t, list.GetNextPageToken())

		renewed, err := c.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: "server/routes/habits.ts", Holder: "agent-1", Token: mine.GetToken(), Ttl: durationpb.New(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, mine.GetToken(), renewed.GetLock().GetToken())
		require.True(t, renewed.GetLock().GetExpireTime().AsTime().After(mine.GetExpireTime().AsTime()))

		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "server/routes/habits.ts", Holder: "agent-2", Token: mine.GetToken()})
		requireCode(t, codes.FailedPrecondition, err)
		require.ErrorContains(t, err, `held by "agent-1"`)

		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "server/routes/habits.ts", Holder: "agent-1", Token: mine.GetToken()})
		require.NoError(t, err)
		_, err = c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "server/routes/habits.ts"})
		requireCode(t, codes.NotFound, err)
		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "server/routes/habits.ts", Holder: "agent-1", Token: mine.GetToken()})
		requireCode(t, codes.FailedPrecondition, err)
		require.ErrorContains(t, err, "not held")

		// agent-2 takes it; agent-1's old token is stale from now on.
		res, err = c.AcquireLock(ctx, acquire("server/routes/habits.ts", "agent-2", time.Minute, 0))
		require.NoError(t, err)
		require.True(t, res.GetGranted())
		require.Greater(t, res.GetLock().GetToken(), mine.GetToken())
		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "server/routes/habits.ts", Holder: "agent-1", Token: mine.GetToken()})
		requireCode(t, codes.Aborted, err)
		require.ErrorContains(t, err, "stale")
		_, err = c.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: "server/routes/habits.ts", Holder: "agent-1", Token: mine.GetToken(), Ttl: durationpb.New(time.Minute)})
		requireCode(t, codes.Aborted, err)
	})
}

func TestListLocksPages(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		var want []string
		for i := range 7 {
			r := fmt.Sprintf("server/f%d.go", i)
			want = append(want, r)
			_, err := c.AcquireLock(ctx, acquire(r, fmt.Sprintf("agent-%d", i%2), time.Minute, 0))
			require.NoError(t, err)
		}
		_, err := c.AcquireLock(ctx, acquire("client/app.ts", "agent-0", time.Minute, 0))
		require.NoError(t, err)

		var got []string
		req := &registryv1.ListLocksRequest{Prefix: "server/", PageSize: 3}
		for {
			res, err := c.ListLocks(ctx, req)
			require.NoError(t, err)
			require.LessOrEqual(t, len(res.GetLocks()), 3)
			for _, l := range res.GetLocks() {
				got = append(got, l.GetResource())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			req.PageToken = res.GetNextPageToken()
		}
		require.Equal(t, want, got)

		res, err := c.ListLocks(ctx, &registryv1.ListLocksRequest{Holder: "agent-1"})
		require.NoError(t, err)
		require.Len(t, res.GetLocks(), 3)

		first, err := c.ListLocks(ctx, &registryv1.ListLocksRequest{Prefix: "server/", PageSize: 1})
		require.NoError(t, err)
		_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{Prefix: "client/", PageSize: 1, PageToken: first.GetNextPageToken()})
		requireInvalid(t, err, "page_token")
	})
}

func TestAcquireWaitsForTheRelease(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		first, err := c.AcquireLock(ctx, acquire("a.go", "agent-1", time.Hour, 0))
		require.NoError(t, err)
		done := make(chan *registryv1.AcquireLockResponse, 1)
		go func() {
			res, err := c.AcquireLock(ctx, acquire("a.go", "agent-2", time.Minute, 5*time.Minute))
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "a.go", Holder: "agent-1", Token: first.GetLock().GetToken()})
		require.NoError(t, err)
		res := <-done
		require.True(t, res.GetGranted(), "granted on the release, long before agent-1's hour was up")
		require.Equal(t, "agent-2", res.GetLock().GetHolder())
	})
}

// Two agents racing for one file through the gRPC API on Redis: from the holders' own records,
// exactly one holds it at any time, tokens increase with every grant, and a holder's token is
// refused once it has released.
func TestRacingAgentsThroughTheAPI(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		const (
			agents = 12
			rounds = 10
		)
		type held struct {
			token      int64
			start, end time.Time
		}
		var (
			mu      sync.Mutex
			records []held
			inside  atomic.Int32
			wg      sync.WaitGroup
		)
		for i := range agents {
			holder := fmt.Sprintf("agent-%02d", i)
			wg.Go(func() {
				for range rounds {
					res, err := c.AcquireLock(t.Context(), acquire("server/routes/habits.ts", holder, time.Minute, 5*time.Minute))
					if err != nil || !res.GetGranted() {
						t.Errorf("%s: %v %v", holder, res, err)
						return
					}
					h := held{token: res.GetLock().GetToken(), start: time.Now()}
					if inside.Add(1) != 1 {
						t.Errorf("%s holds the lock with someone else", holder)
					}
					inside.Add(-1)
					h.end = time.Now()
					release := &registryv1.ReleaseLockRequest{Resource: "server/routes/habits.ts", Holder: holder, Token: h.token}
					if _, err := c.ReleaseLock(t.Context(), release); err != nil {
						t.Errorf("%s: release: %v", holder, err)
						return
					}
					mu.Lock()
					records = append(records, h)
					mu.Unlock()
					if _, err := c.ReleaseLock(t.Context(), release); !slices.Contains([]codes.Code{codes.Aborted, codes.FailedPrecondition}, statusCode(err)) {
						t.Errorf("%s: a second release answered %v", holder, err)
					}
				}
			})
		}
		wg.Wait()
		require.Len(t, records, agents*rounds)
		slices.SortFunc(records, func(a, b held) int { return a.start.Compare(b.start) })
		for i := 1; i < len(records); i++ {
			require.False(t, records[i].start.Before(records[i-1].end), "two holders at once")
			require.Greater(t, records[i].token, records[i-1].token)
		}
	})
}

// A flushed Redis never hands out a smaller token, seen through the API; the same for a
// restarted dev process.
func TestTokensIncreaseWhenHotStateIsLost(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot).client
		res, err := c.AcquireLock(t.Context(), acquire("a.go", "agent-1", time.Minute, 0))
		require.NoError(t, err)
		before := res.GetLock().GetToken()

		after := serve(t, e, e.lose(t)).client
		_, err = after.GetLock(t.Context(), &registryv1.GetLockRequest{Resource: "a.go"})
		requireCode(t, codes.NotFound, err)
		res, err = after.AcquireLock(t.Context(), acquire("a.go", "agent-2", time.Minute, 0))
		require.NoError(t, err)
		require.True(t, res.GetGranted())
		require.Greater(t, res.GetLock().GetToken(), before)
	})
}

func TestUnreachableRedisAnswersUnavailable(t *testing.T) {
	t.Parallel()
	st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	srv := redistest.StartServer(t)
	hb := redishot.New(srv.Client(), "", st)
	c := serve(t, &env{store: st, hot: hb}, hb).client
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = c.AcquireLock(ctx, acquire("a.go", "agent-1", time.Minute, 0))
	requireCode(t, codes.Unavailable, err)
	_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{})
	requireCode(t, codes.Unavailable, err)
}
