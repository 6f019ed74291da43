package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A cache restricted to roots opens a local repository inside them (by path or file:// URL) and
// refuses one outside them, one reached through a symbolic link out of a root, and any local one
// when it has no root; a remote URL is not judged by roots.
func TestCacheOpenRefusesRepositoriesOutsideTheRoots(t *testing.T) {
	t.Parallel()
	allowed := t.TempDir()
	inside, _ := newOrigin(t)
	insideDir := filepath.Join(allowed, "app")
	require.NoError(t, os.Rename(inside, insideDir))
	victim, _ := newOrigin(t) // another temporary directory: outside the root
	link := filepath.Join(allowed, "link")
	require.NoError(t, os.Symlink(victim, link))

	roots, err := NewRoots([]string{allowed})
	require.NoError(t, err)
	cache, err := NewCache(t.TempDir())
	require.NoError(t, err)
	cache.Restrict(roots)
	ctx := t.Context()

	_, err = cache.Open(ctx, insideDir)
	require.NoError(t, err)
	_, err = cache.Open(ctx, "file://"+insideDir)
	require.NoError(t, err)
	for _, src := range []string{victim, "file://" + victim, link, "file://" + link, filepath.Join(allowed, "..", filepath.Base(filepath.Dir(victim)), "origin")} {
		_, err := cache.Open(ctx, src)
		require.ErrorIs(t, err, ErrOutsideRoots, src)
	}
	_, err = cache.Open(ctx, "file://otherhost"+victim)
	require.ErrorIs(t, err, ErrNotARepository)
	require.NoError(t, roots.Check("https://example.invalid/org/repo.git"), "a remote URL is not local")
	require.NoError(t, roots.Check("git@example.invalid:org/repo.git"))

	none, err := NewRoots(nil)
	require.NoError(t, err)
	cache.Restrict(none)
	_, err = cache.Open(ctx, insideDir)
	require.ErrorIs(t, err, ErrOutsideRoots)
	require.ErrorContains(t, err, "allows no local repository")

	_, err = NewRoots([]string{filepath.Join(allowed, "missing")})
	require.Error(t, err, "a root that does not exist is an error, not a root allowing nothing")
}

// Pushing into a local repository runs none of its receive-side hooks: a pre-receive (or update,
// post-receive, reference-transaction) hook of the origin would otherwise run as the agent.
func TestPushIntoALocalRepositoryRunsNoHooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	marker := filepath.Join(t.TempDir(), "hook-ran")
	hook := "#!/bin/sh\necho ran >> " + marker + "\n"
	for _, name := range []string{"pre-receive", "update", "post-receive", "post-update", "reference-transaction", "proc-receive"} {
		require.NoError(t, os.WriteFile(filepath.Join(b.origin, ".git", "hooks", name), []byte(hook), 0o755))
	}
	// The hooks do run for an ordinary push: the test would prove nothing otherwise.
	other := filepath.Join(t.TempDir(), "clone")
	gitT(t, filepath.Dir(other), "clone", "--quiet", b.origin, other)
	gitT(t, other, "push", "--quiet", "origin", "HEAD:refs/heads/plain")
	_, err := os.Stat(marker)
	require.NoError(t, err, "git runs the origin's hooks for a plain push")
	require.NoError(t, os.Remove(marker))

	w := b.worktree(t, "hooks")
	sha := commitFile(t, w, "src/a.go", "package src\n\nconst A = 3\n", "change")
	require.NoError(t, w.Push(b.ctx, sha, "refs/heads/converge/hooks", false))
	require.Equal(t, sha, gitT(t, b.origin, "rev-parse", "refs/heads/converge/hooks"))
	_, err = os.Stat(marker)
	require.True(t, errors.Is(err, os.ErrNotExist), "no hook of the origin ran")
}
