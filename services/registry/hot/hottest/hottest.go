// Package hottest is the conformance suite of the Registry's hot state: every hot.Backend (Redis,
// in process) runs it (see ../conformance_test.go) and must pass it unchanged.
package hottest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/registry/hot"
)

// Harness makes backends for the suite.
type Harness struct {
	// New answers a new, empty backend for one test, with fencing epochs of its own, closed
	// when the test ends.
	New func(t *testing.T) hot.Backend
	// Lose makes b lose its state the way the backend can in production (Redis flushed; the
	// `converge dev` process restarted) and answers the backend to use from then on, on the
	// same durable epochs.
	Lose func(t *testing.T, b hot.Backend) hot.Backend
}

// ttl is a lock TTL longer than any test: locks expire only where a test wants them to.
const ttl = time.Minute

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	runBatch(t, h)
	t.Run("AcquireGrantsOrNamesTheHolder", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()

		a, granted, err := b.Acquire(ctx, "server/routes/habits.ts", "agent-a", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Equal(t, "server/routes/habits.ts", a.Resource)
		require.Equal(t, "agent-a", a.Holder)
		require.Positive(t, a.Token)
		require.Equal(t, ttl, a.ExpiresAt.Sub(a.AcquiredAt), "expires ttl after the grant")

		other, granted, err := b.Acquire(ctx, "server/routes/habits.ts", "agent-b", ttl, 0)
		require.NoError(t, err)
		require.False(t, granted)
		require.Equal(t, hot.Lock{Resource: "server/routes/habits.ts", Holder: "agent-a", ExpiresAt: a.ExpiresAt}, other,
			"the holder and its expiry, token withheld")

		got, err := b.Get(ctx, "server/routes/habits.ts")
		require.NoError(t, err)
		require.Equal(t, a, got, "Get answers the lock with its token")

		_, err = b.Get(ctx, "server/routes/users.ts")
		var free *hot.FreeError
		require.ErrorAs(t, err, &free)
	})
	t.Run("SameHolderReacquiresWithTheSameToken", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		first, granted, err := b.Acquire(t.Context(), "a.go", "agent-a", time.Second, 0)
		require.NoError(t, err)
		require.True(t, granted)
		again, granted, err := b.Acquire(t.Context(), "a.go", "agent-a", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Equal(t, first.Token, again.Token)
		require.False(t, again.AcquiredAt.Before(first.AcquiredAt))
		require.Equal(t, ttl, again.ExpiresAt.Sub(again.AcquiredAt), "extended to now + ttl")
	})
	t.Run("TokensStrictlyIncrease", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		var last int64
		for i := range 50 {
			resource := []string{"a.go", "b.go"}[i%2]
			l, granted, err := b.Acquire(t.Context(), resource, fmt.Sprintf("agent-%d", i), ttl, 0)
			require.NoError(t, err)
			require.True(t, granted)
			require.Greater(t, l.Token, last)
			last = l.Token
			require.NoError(t, b.Release(t.Context(), resource, l.Holder, l.Token))
		}
	})
	t.Run("RenewAndReleaseOnlyForTheCurrentGrant", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		old, _, err := b.Acquire(ctx, "a.go", "agent-a", ttl, 0)
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, "a.go", "agent-a", old.Token))
		cur, granted, err := b.Acquire(ctx, "a.go", "agent-a", time.Second, 0)
		require.NoError(t, err)
		require.True(t, granted)

		renewed, err := b.Renew(ctx, "a.go", "agent-a", cur.Token, ttl)
		require.NoError(t, err)
		require.Equal(t, cur.Token, renewed.Token)
		require.Equal(t, cur.AcquiredAt, renewed.AcquiredAt, "a renewal is not a new grant")
		require.False(t, renewed.ExpiresAt.Before(cur.ExpiresAt.Add(ttl-time.Second)))

		for _, tc := range []struct {
			holder string
			token  int64
			want   error
		}{
			{"agent-a", old.Token, &hot.StaleTokenError{Resource: "a.go", Token: old.Token, Holder: "agent-a"}},
			{"agent-b", old.Token, &hot.StaleTokenError{Resource: "a.go", Token: old.Token, Holder: "agent-a"}},
			{"agent-a", cur.Token + 1, &hot.WrongTokenError{Resource: "a.go", Token: cur.Token + 1}},
			{"agent-b", cur.Token, &hot.HeldByOtherError{Resource: "a.go", Holder: "agent-a"}},
		} {
			_, err := b.Renew(ctx, "a.go", tc.holder, tc.token, ttl)
			require.Equal(t, tc.want, err, "renew by %s with %d", tc.holder, tc.token)
			require.Equal(t, tc.want, b.Release(ctx, "a.go", tc.holder, tc.token), "release by %s with %d", tc.holder, tc.token)
		}
		still, err := b.Get(ctx, "a.go")
		require.NoError(t, err)
		require.Equal(t, renewed, still, "refused calls change nothing")

		require.NoError(t, b.Release(ctx, "a.go", "agent-a", cur.Token))
		notHeld := &hot.NotHeldError{Resource: "a.go"}
		require.Equal(t, notHeld, b.Release(ctx, "a.go", "agent-a", cur.Token))
		_, err = b.Renew(ctx, "a.go", "agent-a", cur.Token, ttl)
		require.Equal(t, notHeld, err)
	})
	t.Run("AnExpiredLockIsFree", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		a, _, err := b.Acquire(ctx, "a.go", "agent-a", 100*time.Millisecond, 0)
		require.NoError(t, err)
		waitPast(a.ExpiresAt)

		_, err = b.Get(ctx, "a.go")
		var free *hot.FreeError
		require.ErrorAs(t, err, &free)
		_, err = b.Renew(ctx, "a.go", "agent-a", a.Token, ttl)
		require.Equal(t, &hot.NotHeldError{Resource: "a.go"}, err, "an expired lock cannot be renewed")
		locks, _, err := b.List(ctx, hot.ListQuery{Limit: 10})
		require.NoError(t, err)
		require.Empty(t, locks)

		bl, granted, err := b.Acquire(ctx, "a.go", "agent-b", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Greater(t, bl.Token, a.Token)

		// The stale holder wakes up: its renewal and release are refused.
		stale := &hot.StaleTokenError{Resource: "a.go", Token: a.Token, Holder: "agent-b"}
		_, err = b.Renew(ctx, "a.go", "agent-a", a.Token, ttl)
		require.Equal(t, stale, err)
		require.Equal(t, stale, b.Release(ctx, "a.go", "agent-a", a.Token))
		// Re-acquiring gets it nothing while agent-b holds the lock.
		_, granted, err = b.Acquire(ctx, "a.go", "agent-a", ttl, 0)
		require.NoError(t, err)
		require.False(t, granted)
	})
	t.Run("ListLocks", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		held := map[string]string{
			"server/routes/habits.ts": "agent-a",
			"server/routes/users.ts":  "agent-b",
			"server/db.ts":            "agent-a",
			"serverless.yml":          "agent-a",
			"client/app.ts":           "agent-b",
			"Z.md":                    "agent-a",
		}
		for r, holder := range held {
			_, granted, err := b.Acquire(ctx, r, holder, ttl, 0)
			require.NoError(t, err)
			require.True(t, granted)
		}
		gone, _, err := b.Acquire(ctx, "server/gone.ts", "agent-a", ttl, 0)
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, gone.Resource, gone.Holder, gone.Token))
		short, _, err := b.Acquire(ctx, "server/expired.ts", "agent-a", 100*time.Millisecond, 0)
		require.NoError(t, err)
		waitPast(short.ExpiresAt)

		require.Equal(t, []string{"Z.md", "client/app.ts", "server/db.ts", "server/routes/habits.ts", "server/routes/users.ts", "serverless.yml"},
			listAll(t, b, hot.ListQuery{}, 4), "every held lock, in byte order")
		require.Equal(t, []string{"server/db.ts", "server/routes/habits.ts", "server/routes/users.ts"}, listAll(t, b, hot.ListQuery{Prefix: "server/"}, 2))
		require.Equal(t, []string{"server/db.ts", "server/routes/habits.ts", "server/routes/users.ts", "serverless.yml"}, listAll(t, b, hot.ListQuery{Prefix: "server"}, 1))
		require.Equal(t, []string{"Z.md", "server/db.ts", "server/routes/habits.ts", "serverless.yml"}, listAll(t, b, hot.ListQuery{Holder: "agent-a"}, 3))
		require.Equal(t, []string{"server/routes/users.ts"}, listAll(t, b, hot.ListQuery{Prefix: "server/", Holder: "agent-b"}, 1))
		require.Empty(t, listAll(t, b, hot.ListQuery{Prefix: "docs/"}, 10))

		locks, next, err := b.List(ctx, hot.ListQuery{Prefix: "server/routes/", Limit: 10})
		require.NoError(t, err)
		require.Empty(t, next)
		require.Len(t, locks, 2)
		habits, err := b.Get(ctx, "server/routes/habits.ts")
		require.NoError(t, err)
		require.Equal(t, habits, locks[0], "listed with token and times")
	})
	t.Run("WaitEndsWithTheRelease", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		a, _, err := b.Acquire(ctx, "a.go", "agent-a", ttl, 0)
		require.NoError(t, err)
		type result struct {
			lock    hot.Lock
			granted bool
			err     error
		}
		done := make(chan result, 1)
		go func() {
			l, granted, err := b.Acquire(ctx, "a.go", "agent-b", ttl, 2*ttl)
			done <- result{l, granted, err}
		}()
		// The waiter cannot be granted before the release: agent-a holds the lock for a minute.
		require.NoError(t, b.Release(ctx, "a.go", "agent-a", a.Token))
		r := <-done
		require.NoError(t, r.err)
		require.True(t, r.granted, "woken by the release, long before agent-a's expiry")
		require.Equal(t, "agent-b", r.lock.Holder)
		require.Greater(t, r.lock.Token, a.Token)
	})
	t.Run("WaitEndsWithTheHoldersExpiry", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		a, _, err := b.Acquire(t.Context(), "a.go", "agent-a", 200*time.Millisecond, 0)
		require.NoError(t, err)
		l, granted, err := b.Acquire(t.Context(), "a.go", "agent-b", ttl, ttl)
		require.NoError(t, err)
		require.True(t, granted, "agent-a's lock expired while agent-b waited")
		require.Greater(t, l.Token, a.Token)
	})
	t.Run("WaitEndsWithTheWait", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		a, _, err := b.Acquire(t.Context(), "a.go", "agent-a", ttl, 0)
		require.NoError(t, err)
		l, granted, err := b.Acquire(t.Context(), "a.go", "agent-b", ttl, 150*time.Millisecond)
		require.NoError(t, err)
		require.False(t, granted)
		require.Equal(t, "agent-a", l.Holder)
		require.Equal(t, a.ExpiresAt, l.ExpiresAt)
		require.Zero(t, l.Token)

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _, err = b.Acquire(ctx, "a.go", "agent-b", ttl, ttl)
		require.ErrorIs(t, err, context.Canceled)
	})
	t.Run("RacingHoldersNeverOverlap", func(t *testing.T) {
		t.Parallel()
		RequireExclusive(t, h.New(t), 16, 25)
	})
	t.Run("TokensKeepIncreasingAfterStateIsLost", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		var last hot.Lock
		for i := range 5 {
			l, granted, err := b.Acquire(ctx, "a.go", fmt.Sprintf("agent-%d", i), ttl, 0)
			require.NoError(t, err)
			require.True(t, granted)
			require.NoError(t, b.Release(ctx, "a.go", l.Holder, l.Token))
			last = l
		}
		held, _, err := b.Acquire(ctx, "b.go", "agent-x", ttl, 0)
		require.NoError(t, err)

		b = h.Lose(t, b)
		_, err = b.Get(ctx, "b.go")
		var free *hot.FreeError
		require.ErrorAs(t, err, &free, "the lost state held nothing")
		for _, r := range []string{"a.go", "b.go"} {
			l, granted, err := b.Acquire(ctx, r, "agent-y", ttl, 0)
			require.NoError(t, err)
			require.True(t, granted)
			require.Greater(t, l.Token, max(last.Token, held.Token), "a token after the loss is greater than every token before it")
			lastEpoch, _ := hot.SplitToken(max(last.Token, held.Token))
			epoch, counter := hot.SplitToken(l.Token)
			require.Greater(t, epoch, lastEpoch, "a new epoch")
			require.Positive(t, counter)
		}
		_, err = b.Stale(ctx, time.Now(), 0, 10)
		require.ErrorIs(t, err, hot.ErrIndexLost)
	})
	t.Run("Liveness", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		_, err := b.Stale(ctx, time.Now(), 0, 10)
		require.ErrorIs(t, err, hot.ErrIndexLost, "a new backend's index is not known complete")
		require.NoError(t, b.MarkIndexed(ctx))

		base := time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)
		at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
		seen := func(id string, at time.Time) hot.Seen { return hot.Seen{InstanceID: id, At: at} }
		require.NoError(t, b.Beat(ctx, "a", at(10), ttl))
		require.NoError(t, b.Beat(ctx, "b", at(5), ttl))
		require.NoError(t, b.Beat(ctx, "c", at(20), ttl))
		require.NoError(t, b.Beat(ctx, "d", at(5), ttl))
		require.NoError(t, b.Beat(ctx, "c", at(1), ttl), "an older time does not move an entry back")

		stale, err := b.Stale(ctx, at(20), 0, 10)
		require.NoError(t, err)
		require.Equal(t, []hot.Seen{seen("b", at(5)), seen("d", at(5)), seen("a", at(10))}, stale, "oldest first, before the bound only")
		stale, err = b.Stale(ctx, at(21), 1, 2)
		require.NoError(t, err)
		require.Equal(t, []hot.Seen{seen("d", at(5)), seen("a", at(10))}, stale, "offset and limit")

		alive, err := b.Alive(ctx, "a")
		require.NoError(t, err)
		require.True(t, alive)
		require.NoError(t, b.Forget(ctx, "a"))
		alive, err = b.Alive(ctx, "a")
		require.NoError(t, err)
		require.False(t, alive)
		stale, err = b.Stale(ctx, at(100), 0, 10)
		require.NoError(t, err)
		require.Equal(t, []hot.Seen{seen("b", at(5)), seen("d", at(5)), seen("c", at(20))}, stale)

		require.NoError(t, b.Beat(ctx, "short", at(30), 100*time.Millisecond))
		time.Sleep(200 * time.Millisecond)
		alive, err = b.Alive(ctx, "short")
		require.NoError(t, err)
		require.False(t, alive, "the TTL key expired")

		require.NoError(t, b.Reindex(ctx, []hot.Seen{seen("b", at(50)), seen("c", at(2)), seen("e", at(3))}))
		stale, err = b.Stale(ctx, at(100), 0, 10)
		require.NoError(t, err)
		require.Equal(t, []hot.Seen{seen("e", at(3)), seen("d", at(5)), seen("c", at(20)), seen("short", at(30)), seen("b", at(50))}, stale,
			"a rebuild keeps the later of two times")
	})
	t.Run("ReleaseHolderFreesEveryLockOfTheHolder", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		var mine []hot.Lock
		for i := range 7 {
			l, granted, err := b.Acquire(ctx, fmt.Sprintf("src/%02d.go", i), "agent-a", ttl, 0)
			require.NoError(t, err)
			require.True(t, granted)
			mine = append(mine, l)
		}
		other, _, err := b.Acquire(ctx, "src/other.go", "agent-b", ttl, 0)
		require.NoError(t, err)

		released, err := hot.ReleaseHolder(ctx, b, "agent-a")
		require.NoError(t, err)
		require.ElementsMatch(t, mine, released, "every lock of the holder, with its token")
		require.Equal(t, []string{"src/other.go"}, listAll(t, b, hot.ListQuery{}, 10), "another holder's lock is kept")
		got, err := b.Get(ctx, "src/other.go")
		require.NoError(t, err)
		require.Equal(t, other, got)

		// Fencing holds: the old tokens are refused, and the next grant has a greater token.
		_, err = b.Renew(ctx, mine[0].Resource, "agent-a", mine[0].Token, ttl)
		require.Equal(t, &hot.NotHeldError{Resource: mine[0].Resource}, err)
		again, granted, err := b.Acquire(ctx, mine[0].Resource, "agent-a", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Greater(t, again.Token, mine[len(mine)-1].Token)
		_, err = b.Renew(ctx, mine[0].Resource, "agent-a", mine[0].Token, ttl)
		require.Equal(t, &hot.StaleTokenError{Resource: mine[0].Resource, Token: mine[0].Token, Holder: "agent-a"}, err)

		released, err = hot.ReleaseHolder(ctx, b, "nobody")
		require.NoError(t, err)
		require.Empty(t, released)
	})
	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, h.New(t).Ping(t.Context()))
	})
}

// waitPast sleeps until t has passed on every clock involved (the backend's and this
// process's are the same machine's).
func waitPast(t time.Time) {
	time.Sleep(time.Until(t) + 20*time.Millisecond)
}

// listAll pages through List with pages of size and answers the resources.
func listAll(t *testing.T, b hot.Backend, q hot.ListQuery, size int) []string {
	t.Helper()
	q.Limit = size
	var out []string
	for {
		locks, next, err := b.List(t.Context(), q)
		require.NoError(t, err)
		require.LessOrEqual(t, len(locks), size)
		for _, l := range locks {
			out = append(out, l.Resource)
		}
		if next == "" {
			return out
		}
		q.After = next
	}
}

// grant is one holder's record of holding the lock: [start, end) by this process's monotonic
// clock, under token.
type grant struct {
	holder     string
	token      int64
	start, end time.Time
}

// RequireExclusive races holders goroutines for one resource on b until each was granted it
// rounds times, each holder recording when it held the lock; then checks from those records
// that no two held it at once, that tokens strictly increase in the order of the grants, and
// that a holder's renewal and release with its token after its own release are refused.
func RequireExclusive(t *testing.T, b hot.Backend, holders, rounds int) {
	t.Helper()
	const resource = "server/routes/habits.ts"
	var (
		mu      sync.Mutex
		records []grant
		inside  atomic.Int32
		wg      sync.WaitGroup
	)
	for i := range holders {
		holder := fmt.Sprintf("agent-%02d", i)
		wg.Go(func() {
			for round := range rounds {
				l, granted, err := b.Acquire(t.Context(), resource, holder, ttl, 5*ttl)
				if err != nil || !granted {
					t.Errorf("%s: acquire: granted %v, %v", holder, granted, err)
					return
				}
				g := grant{holder: holder, token: l.Token, start: time.Now()}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%s holds the lock with %d others", holder, n-1)
				}
				time.Sleep(time.Duration(round%3) * 100 * time.Microsecond) // hold it a little
				inside.Add(-1)
				g.end = time.Now()
				if err := b.Release(t.Context(), resource, holder, l.Token); err != nil {
					t.Errorf("%s: release: %v", holder, err)
					return
				}
				mu.Lock()
				records = append(records, g)
				mu.Unlock()

				// The holder's token is stale now: nothing may succeed with it.
				if _, err := b.Renew(t.Context(), resource, holder, l.Token, ttl); !refused(err) {
					t.Errorf("%s: renewal after release: %v", holder, err)
				}
				if err := b.Release(t.Context(), resource, holder, l.Token); !refused(err) {
					t.Errorf("%s: second release: %v", holder, err)
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, records, holders*rounds)
	slices.SortFunc(records, func(a, b grant) int { return a.start.Compare(b.start) })
	for i := 1; i < len(records); i++ {
		prev, cur := records[i-1], records[i]
		require.False(t, cur.start.Before(prev.end), "%s held the lock from %v while %s held it until %v", cur.holder, cur.start, prev.holder, prev.end)
		require.Greater(t, cur.token, prev.token, "tokens increase in the order of the grants")
	}
}

// refused reports whether err is one of the refusals of a renewal or release.
func refused(err error) bool {
	var (
		notHeld *hot.NotHeldError
		stale   *hot.StaleTokenError
		other   *hot.HeldByOtherError
		wrong   *hot.WrongTokenError
	)
	return errors.As(err, &notHeld) || errors.As(err, &stale) || errors.As(err, &other) || errors.As(err, &wrong)
}
