package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/registry/store"
)

// runEpochs checks the fencing epochs of lock backends.
func runEpochs(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("LockEpochsIncrementPerName", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for want := int64(1); want <= 3; want++ {
			got, err := s.NextLockEpoch(t.Context(), "redis:a")
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
		got, err := s.NextLockEpoch(t.Context(), "redis:b")
		require.NoError(t, err)
		require.Equal(t, int64(1), got, "each lock backend has its own epoch")
	})
	t.Run("LockEpochsAreUniqueUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const n = 16
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			seen = map[int64]bool{}
		)
		for range n {
			wg.Go(func() {
				e, err := s.NextLockEpoch(t.Context(), "redis:a")
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				require.False(t, seen[e], "epoch %d answered twice", e)
				seen[e] = true
			})
		}
		wg.Wait()
		for e := int64(1); e <= n; e++ {
			require.True(t, seen[e], "epoch %d missing", e)
		}
	})
	t.Run("Now", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a, err := s.Now(t.Context())
		require.NoError(t, err)
		b, err := s.Now(t.Context())
		require.NoError(t, err)
		require.False(t, a.IsZero())
		require.False(t, b.Before(a), "the store's clock went back: %v then %v", a, b)
	})
}

// runOwnership checks SetOwner, OwnerOf, ReleaseOwner and ListOwners.
func runOwnership(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("SetOwnerAnswersThePreviousOwner", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()

		own, prev, err := s.SetOwner(ctx, "db/**", "loop-db")
		require.NoError(t, err)
		require.Empty(t, prev)
		require.Equal(t, "db/**", own.Pattern)
		require.Equal(t, "loop-db", own.Owner)
		require.False(t, own.CreatedAt.IsZero())
		require.Equal(t, own.CreatedAt, own.UpdatedAt)

		// The same owner again changes nothing, not even the update time.
		again, prev, err := s.SetOwner(ctx, "db/**", "loop-db")
		require.NoError(t, err)
		require.Equal(t, "loop-db", prev)
		require.Equal(t, own, again)

		moved, prev, err := s.SetOwner(ctx, "db/**", "loop-api")
		require.NoError(t, err)
		require.Equal(t, "loop-db", prev)
		require.Equal(t, "loop-api", moved.Owner)
		require.Equal(t, own.CreatedAt, moved.CreatedAt)
		require.False(t, moved.UpdatedAt.Before(own.UpdatedAt))
	})
	t.Run("ConcurrentSetOwnerOfANewPattern", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		const n = 8
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			empty int
		)
		for i := range n {
			wg.Go(func() {
				_, prev, err := s.SetOwner(t.Context(), "server/**", fmt.Sprintf("owner-%d", i))
				require.NoError(t, err)
				if prev == "" {
					mu.Lock()
					empty++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Equal(t, 1, empty, "exactly one SetOwner created the pattern; the others replaced an owner")
	})
	t.Run("OwnerOfAnswersTheMostSpecificPattern", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		for pattern, owner := range map[string]string{
			"**":                      "everyone",
			"**/*.ts":                 "typescript",
			"server/**":               "loop-server",
			"server/routes/*.ts":      "loop-routes",
			"server/routes/habits.ts": "alice",
			"server/routes/h*":        "loop-h",
			"db/migrations/*.sql":     "loop-db",
			"{docs,examples}/**":      "writers",
			`weird\*name/*`:           "escaped",
		} {
			_, _, err := s.SetOwner(ctx, pattern, owner)
			require.NoError(t, err)
		}
		for path, want := range map[string]string{
			"server/routes/habits.ts":        "server/routes/habits.ts", // the literal path
			"server/routes/hello.ts":         "server/routes/h*",        // the longer literal prefix
			"server/routes/users.ts":         "server/routes/*.ts",      //
			"server/routes/users.go":         "server/**",               //
			"server":                         "server/**",               // '**' matches no directory too
			"client/app.ts":                  "**",                      // '**' has fewer wildcards than '**/*.ts'
			"db/migrations/001_habits.sql":   "db/migrations/*.sql",     //
			"db/migrations/nested/x.sql":     "**",                      // '*' does not cross '/'
			"docs/registry.md":               "{docs,examples}/**",      //
			"weird*name/x":                   `weird\*name/*`,           //
			"examples/habits/tasks.md":       "{docs,examples}/**",      //
			"server/routes/habits.ts.backup": "server/routes/h*",        //
		} {
			got, err := s.OwnerOf(ctx, path)
			require.NoError(t, err, path)
			require.Equal(t, want, got.Pattern, "owner of %s", path)
		}
	})
	t.Run("OwnerOfWithoutAMatch", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, _, err := s.SetOwner(t.Context(), "server/**", "loop-server")
		require.NoError(t, err)
		_, err = s.OwnerOf(t.Context(), "client/app.ts")
		var nf *store.NotFoundError
		require.ErrorAs(t, err, &nf)
	})
	t.Run("ReleaseOwner", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		var nf *store.NotFoundError
		require.ErrorAs(t, s.ReleaseOwner(ctx, "db/**", "loop-db"), &nf)

		_, _, err := s.SetOwner(ctx, "db/**", "loop-db")
		require.NoError(t, err)
		var wrong *store.WrongOwnerError
		require.ErrorAs(t, s.ReleaseOwner(ctx, "db/**", "loop-api"), &wrong)
		require.Equal(t, "loop-db", wrong.Owner, "the error names the owner")

		require.NoError(t, s.ReleaseOwner(ctx, "db/**", "loop-db"))
		require.ErrorAs(t, s.ReleaseOwner(ctx, "db/**", "loop-db"), &nf)
		_, err = s.OwnerOf(ctx, "db/x.sql")
		require.ErrorAs(t, err, &nf)
	})
	t.Run("ListOwnersPagesInByteOrder", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		patterns := []string{"B/**", "a/**", "a/b", "b/*", "c/**", "Z"}
		for i, p := range patterns {
			owner := "even"
			if i%2 == 1 {
				owner = "odd"
			}
			_, _, err := s.SetOwner(ctx, p, owner)
			require.NoError(t, err)
		}
		var (
			got   []string
			after string
		)
		for {
			page, err := s.ListOwners(ctx, store.ListOwnersQuery{After: after, Limit: 4})
			require.NoError(t, err)
			for _, o := range page {
				got = append(got, o.Pattern)
			}
			if len(page) < 4 {
				break
			}
			after = page[len(page)-1].Pattern
		}
		require.Equal(t, []string{"B/**", "Z", "a/**", "a/b", "b/*", "c/**"}, got)

		odd, err := s.ListOwners(ctx, store.ListOwnersQuery{Owner: "odd", Limit: 100})
		require.NoError(t, err)
		require.Len(t, odd, 3)
		for _, o := range odd {
			require.Equal(t, "odd", o.Owner)
		}
	})
}

// isNotFound reports whether err is a *store.NotFoundError.
func isNotFound(err error) bool {
	var nf *store.NotFoundError
	return errors.As(err, &nf)
}
