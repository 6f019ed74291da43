package hottest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/registry/hot"
)

// runBatch is the part of the suite about AcquireAll and ReleaseAll.
func runBatch(t *testing.T, h Harness) {
	t.Run("AcquireAllGrantsEveryLockOrNone", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		files := []string{"server/a.go", "server/b.go", "client/c.ts"}
		locks, conflict, granted, err := b.AcquireAll(ctx, files, "agent-a", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Zero(t, conflict)
		require.Len(t, locks, len(files))
		for i, l := range locks {
			require.Equal(t, files[i], l.Resource, "in the order of the request")
			require.Equal(t, "agent-a", l.Holder)
			require.Equal(t, ttl, l.ExpiresAt.Sub(l.AcquiredAt))
			if i > 0 {
				require.Equal(t, locks[i-1].Token+1, l.Token, "consecutive tokens, in order")
			}
			got, err := b.Get(ctx, l.Resource)
			require.NoError(t, err)
			require.Equal(t, l, got)
		}

		// agent-b's batch overlaps on one file: nothing of it is granted.
		_, conflict, granted, err = b.AcquireAll(ctx, []string{"docs/d.md", "server/b.go", "docs/e.md"}, "agent-b", ttl, 0)
		require.NoError(t, err)
		require.False(t, granted)
		require.Equal(t, hot.Lock{Resource: "server/b.go", Holder: "agent-a", ExpiresAt: locks[1].ExpiresAt}, conflict,
			"the lock in the way, its token withheld")
		for _, r := range []string{"docs/d.md", "docs/e.md"} {
			_, err := b.Get(ctx, r)
			var free *hot.FreeError
			require.ErrorAs(t, err, &free, "%s: a partial conflict acquires nothing", r)
		}
		got, err := b.Get(ctx, "server/b.go")
		require.NoError(t, err)
		require.Equal(t, locks[1], got, "the holder's lock is untouched")
	})
	t.Run("AcquireAllKeepsTheHoldersTokens", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		mine, _, err := b.Acquire(ctx, "b.go", "agent-a", time.Second, 0)
		require.NoError(t, err)
		locks, _, granted, err := b.AcquireAll(ctx, []string{"a.go", "b.go", "c.go"}, "agent-a", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		require.Equal(t, mine.Token, locks[1].Token, "a lock the holder holds is extended with its token")
		require.Equal(t, ttl, locks[1].ExpiresAt.Sub(locks[1].AcquiredAt))
		require.Greater(t, locks[0].Token, mine.Token)
		require.Equal(t, locks[0].Token+1, locks[2].Token, "new grants get consecutive tokens")
	})
	t.Run("AcquireAllTokensStrictlyIncreasePerResource", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		last := map[string]int64{}
		files := []string{"a.go", "b.go", "c.go", "d.go"}
		for i := range 20 {
			batch := files[i%2 : i%2+3]
			holder := fmt.Sprintf("agent-%d", i)
			var got []hot.Lock
			if i%3 == 0 {
				l, granted, err := b.Acquire(ctx, batch[0], holder, ttl, 0)
				require.NoError(t, err)
				require.True(t, granted)
				got = []hot.Lock{l}
			} else {
				locks, _, granted, err := b.AcquireAll(ctx, batch, holder, ttl, 0)
				require.NoError(t, err)
				require.True(t, granted)
				got = locks
			}
			grants := make([]hot.Grant, len(got))
			for j, l := range got {
				require.Greater(t, l.Token, last[l.Resource], "%s: grant %d", l.Resource, i)
				last[l.Resource] = l.Token
				grants[j] = hot.Grant{Resource: l.Resource, Token: l.Token}
			}
			refused, err := b.ReleaseAll(ctx, holder, grants)
			require.NoError(t, err)
			require.Equal(t, make([]error, len(grants)), refused)
		}
	})
	t.Run("AcquireAllWaitsForEveryLockTogether", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		held, _, err := b.Acquire(ctx, "b.go", "agent-a", ttl, 0)
		require.NoError(t, err)
		type result struct {
			locks   []hot.Lock
			granted bool
			err     error
		}
		done := make(chan result, 1)
		go func() {
			locks, _, granted, err := b.AcquireAll(ctx, []string{"a.go", "b.go"}, "agent-b", ttl, 2*ttl)
			done <- result{locks, granted, err}
		}()
		// Holding none while it waits: agent-c takes and gives back a.go meanwhile.
		c, granted, err := b.Acquire(ctx, "a.go", "agent-c", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted, "a waiting batch holds nothing")
		refused, err := b.ReleaseAll(ctx, "agent-c", []hot.Grant{{Resource: "a.go", Token: c.Token}})
		require.NoError(t, err)
		require.Equal(t, []error{nil}, refused)
		require.NoError(t, b.Release(ctx, "b.go", "agent-a", held.Token))
		r := <-done
		require.NoError(t, r.err)
		require.True(t, r.granted, "woken by the release, long before agent-a's expiry")
		require.Greater(t, r.locks[1].Token, held.Token)
	})
	t.Run("AcquireAllWaitEndsWithTheHoldersExpiryOrTheWait", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		short, _, err := b.Acquire(ctx, "b.go", "agent-a", 200*time.Millisecond, 0)
		require.NoError(t, err)
		locks, _, granted, err := b.AcquireAll(ctx, []string{"a.go", "b.go"}, "agent-b", ttl, ttl)
		require.NoError(t, err)
		require.True(t, granted, "agent-a's lock expired while agent-b waited")
		require.Greater(t, locks[1].Token, short.Token)

		_, conflict, granted, err := b.AcquireAll(ctx, []string{"c.go", "a.go"}, "agent-c", ttl, 150*time.Millisecond)
		require.NoError(t, err)
		require.False(t, granted)
		require.Equal(t, "agent-b", conflict.Holder)

		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, _, _, err = b.AcquireAll(cctx, []string{"c.go", "a.go"}, "agent-c", ttl, ttl)
		require.ErrorIs(t, err, context.Canceled)
	})
	t.Run("ReleaseAllReleasesTheCurrentGrantsOnly", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		locks, _, _, err := b.AcquireAll(ctx, []string{"a.go", "b.go", "c.go", "d.go"}, "agent-a", ttl, 0)
		require.NoError(t, err)
		other, _, err := b.Acquire(ctx, "e.go", "agent-b", ttl, 0)
		require.NoError(t, err)
		require.NoError(t, b.Release(ctx, "d.go", "agent-a", locks[3].Token))
		refused, err := b.ReleaseAll(ctx, "agent-a", []hot.Grant{
			{Resource: "a.go", Token: locks[0].Token},
			{Resource: "b.go", Token: locks[1].Token + 1000},
			{Resource: "c.go", Token: locks[2].Token},
			{Resource: "d.go", Token: locks[3].Token},
			{Resource: "e.go", Token: other.Token},
		})
		require.NoError(t, err)
		require.Equal(t, []error{
			nil,
			&hot.WrongTokenError{Resource: "b.go", Token: locks[1].Token + 1000},
			nil,
			&hot.NotHeldError{Resource: "d.go"},
			&hot.HeldByOtherError{Resource: "e.go", Holder: "agent-b"},
		}, refused)
		for _, r := range []string{"a.go", "c.go"} {
			_, err := b.Get(ctx, r)
			var free *hot.FreeError
			require.ErrorAs(t, err, &free, r)
		}
		for _, l := range []hot.Lock{locks[1], other} {
			got, err := b.Get(ctx, l.Resource)
			require.NoError(t, err)
			require.Equal(t, l, got, "a refused grant is left as it was")
		}
		// A stale grant: b.go lost and granted again.
		require.NoError(t, b.Release(ctx, "b.go", "agent-a", locks[1].Token))
		again, _, err := b.Acquire(ctx, "b.go", "agent-c", ttl, 0)
		require.NoError(t, err)
		refused, err = b.ReleaseAll(ctx, "agent-a", []hot.Grant{{Resource: "b.go", Token: locks[1].Token}})
		require.NoError(t, err)
		require.Equal(t, []error{&hot.StaleTokenError{Resource: "b.go", Token: locks[1].Token, Holder: "agent-c"}}, refused)
		_, err = b.Get(ctx, again.Resource)
		require.NoError(t, err)
	})
	t.Run("ReleaseAllWakesTheWaiters", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		locks, _, _, err := b.AcquireAll(ctx, []string{"a.go", "b.go"}, "agent-a", ttl, 0)
		require.NoError(t, err)
		var wg sync.WaitGroup
		got := make([]bool, 2)
		for i, r := range []string{"a.go", "b.go"} {
			wg.Go(func() {
				_, _, granted, err := b.AcquireAll(ctx, []string{r}, fmt.Sprintf("agent-w%d", i), ttl, 2*ttl)
				got[i] = assertNoErr(t, err) && granted
			})
		}
		refused, err := b.ReleaseAll(ctx, "agent-a", []hot.Grant{{Resource: "a.go", Token: locks[0].Token}, {Resource: "b.go", Token: locks[1].Token}})
		require.NoError(t, err)
		require.Equal(t, []error{nil, nil}, refused)
		wg.Wait()
		require.Equal(t, []bool{true, true}, got, "both woken by one batch release, long before the expiry")
	})
	t.Run("AcquireAllTokensKeepIncreasingAfterStateIsLost", func(t *testing.T) {
		t.Parallel()
		b := h.New(t)
		ctx := t.Context()
		before, _, _, err := b.AcquireAll(ctx, []string{"a.go", "b.go"}, "agent-a", ttl, 0)
		require.NoError(t, err)
		b = h.Lose(t, b)
		after, _, granted, err := b.AcquireAll(ctx, []string{"b.go", "a.go", "c.go"}, "agent-a", ttl, 0)
		require.NoError(t, err)
		require.True(t, granted)
		for _, l := range after {
			require.Greater(t, l.Token, before[1].Token, "%s: a token after the loss is greater than every token before it", l.Resource)
		}
	})
	t.Run("RacingBatchesNeverOverlap", func(t *testing.T) {
		t.Parallel()
		requireBatchesExclusive(t, h.New(t))
	})
}

// requireBatchesExclusive runs holders taking overlapping batches of three of six files (each
// holder its own rotation) with waits: no file is ever held by two of them at once, and no two
// holders deadlock.
func requireBatchesExclusive(t *testing.T, b hot.Backend) {
	t.Helper()
	ctx := t.Context()
	files := []string{"f0", "f1", "f2", "f3", "f4", "f5"}
	var (
		mu     sync.Mutex
		inUse  = map[string]string{}
		wg     sync.WaitGroup
		rounds = 15
	)
	for h := range 8 {
		wg.Go(func() {
			holder := fmt.Sprintf("agent-%d", h)
			for i := range rounds {
				batch := []string{files[(h+i)%6], files[(h+i+2)%6], files[(h+i+3)%6]}
				locks, _, granted, err := b.AcquireAll(ctx, batch, holder, ttl, ttl)
				if !assertNoErr(t, err) || !granted {
					t.Errorf("%s round %d: not granted (err %v)", holder, i, err)
					return
				}
				mu.Lock()
				for _, r := range batch {
					if other, ok := inUse[r]; ok {
						t.Errorf("%s and %s hold %s together", holder, other, r)
					}
					inUse[r] = holder
				}
				mu.Unlock()
				grants := make([]hot.Grant, len(locks))
				mu.Lock()
				for j, l := range locks {
					delete(inUse, l.Resource)
					grants[j] = hot.Grant{Resource: l.Resource, Token: l.Token}
				}
				mu.Unlock()
				refused, err := b.ReleaseAll(ctx, holder, grants)
				if !assertNoErr(t, err) {
					return
				}
				for _, r := range refused {
					if r != nil {
						t.Errorf("%s: release refused: %v", holder, r)
					}
				}
			}
		})
	}
	wg.Wait()
}

// assertNoErr reports err to t without stopping the goroutine's test abruptly.
func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
