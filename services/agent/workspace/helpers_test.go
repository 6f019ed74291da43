package workspace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixtureID makes the fixture's commits; tests check that agent commits do not use it.
var fixtureID = Identity{Name: "Fixture", Email: "fixture@example.com"}

// agentID is the identity the tests commit with.
var agentID = Identity{Name: "Agent Smith", Email: "agent@converge.test"}

// gitT runs git in dir with the package's hermetic environment and the fixture identity.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := gitCmd{
		dir:  dir,
		env:  append(fixtureID.env(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir)),
		args: append(fixtureID.config(), args...),
	}.run(context.Background())
	require.NoError(t, err)
	return strings.TrimSpace(out)
}

// writeFile writes content to dir/rel, creating parent directories.
func writeFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func readFile(t testing.TB, dir, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(b)
}

// newOrigin makes a non-bare repository whose only branch is "trunk" (no default-branch name is
// assumed anywhere) with one commit, and returns its path and head.
func newOrigin(t testing.TB) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "origin")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	gitT(t, dir, "init", "--quiet", "--initial-branch=trunk")
	writeFile(t, dir, "README.md", "hello\n")
	writeFile(t, dir, "src/a.go", "package src\n\nconst A = 1\n")
	writeFile(t, dir, "src/b.go", "package src\n\nconst B = 2\n")
	writeFile(t, dir, "docs/guide.md", "line one\nline two\nline three\n")
	writeFile(t, dir, ".gitignore", "*.cache\n")
	gitT(t, dir, "add", "--all")
	gitT(t, dir, "commit", "--quiet", "-m", "base")
	return dir, gitT(t, dir, "rev-parse", "HEAD")
}

// bundle is what most tests start from: an origin, a cache and the origin opened in it.
type bundle struct {
	ctx    context.Context
	origin string
	base   string // the origin's first commit
	cache  *Cache
	repo   *Repo
}

func setup(t testing.TB) *bundle {
	t.Helper()
	origin, base := newOrigin(t)
	cache, err := NewCache(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	repo, err := cache.Open(ctx, origin)
	require.NoError(t, err)
	return &bundle{ctx: ctx, origin: origin, base: base, cache: cache, repo: repo}
}

// worktree adds a worktree at the base commit.
func (b *bundle) worktree(t testing.TB, name string) *Worktree {
	t.Helper()
	w, err := b.repo.AddWorktree(b.ctx, name, b.base)
	require.NoError(t, err)
	return w
}

// commitFile writes one file in w and commits it.
func commitFile(t testing.TB, w *Worktree, rel, content, msg string) string {
	t.Helper()
	writeFile(t, w.Dir, rel, content)
	sha, _, err := w.Commit(context.Background(), msg, []string{rel}, agentID)
	require.NoError(t, err)
	return sha
}
