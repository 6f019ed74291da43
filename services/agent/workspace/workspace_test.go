package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOpenResolveFetch(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// The mirror sits under mirrors/<sha256(source)[:16]>.git and is bare.
	require.Equal(t, filepath.Join(b.cache.Root(), "mirrors", mirrorKey(b.repo.Source())+".git"), b.repo.MirrorDir())
	require.Equal(t, "true", gitT(t, b.repo.MirrorDir(), "rev-parse", "--is-bare-repository"))

	for _, ref := range []string{"trunk", "refs/heads/trunk", "origin/trunk", "HEAD", b.base, b.base[:10]} {
		sha, err := b.repo.Resolve(b.ctx, ref)
		require.NoError(t, err, ref)
		require.Equal(t, b.base, sha, ref)
	}
	for _, ref := range []string{"main", "origin/nope", "refs/converge/x/y", "", "-v", strings.Repeat("a", 40)} {
		_, err := b.repo.Resolve(b.ctx, ref)
		require.ErrorIs(t, err, ErrUnknownRef, ref)
	}

	// New work in the origin is invisible until a fetch.
	writeFile(t, b.origin, "src/a.go", "package src\n\nconst A = 10\n")
	gitT(t, b.origin, "commit", "--quiet", "-am", "second")
	second := gitT(t, b.origin, "rev-parse", "HEAD")
	gitT(t, b.origin, "update-ref", "refs/converge/ex1/t1", second)
	gitT(t, b.origin, "tag", "v1", b.base)
	sha, err := b.repo.Resolve(b.ctx, "trunk")
	require.NoError(t, err)
	require.Equal(t, b.base, sha)

	require.NoError(t, b.repo.Fetch(b.ctx))
	for ref, want := range map[string]string{"trunk": second, "refs/converge/ex1/t1": second, "v1": b.base} {
		sha, err := b.repo.Resolve(b.ctx, ref)
		require.NoError(t, err, ref)
		require.Equal(t, want, sha, ref)
	}

	// A later Open of the same source (any spelling) is the same Repo and fetches; deleted refs are pruned.
	gitT(t, b.origin, "update-ref", "-d", "refs/converge/ex1/t1")
	again, err := b.cache.Open(b.ctx, b.origin+"/./")
	require.NoError(t, err)
	require.Same(t, b.repo, again)
	_, err = again.Resolve(b.ctx, "refs/converge/ex1/t1")
	require.ErrorIs(t, err, ErrUnknownRef)

	// converge refs already in the origin come with the first clone.
	gitT(t, b.origin, "update-ref", "refs/converge/ex2/t9", b.base)
	other, err := NewCache(t.TempDir())
	require.NoError(t, err)
	r2, err := other.Open(b.ctx, b.origin)
	require.NoError(t, err)
	sha, err = r2.Resolve(b.ctx, "refs/converge/ex2/t9")
	require.NoError(t, err)
	require.Equal(t, b.base, sha)

	// A file:// URL is a URL: cloned as given, keyed separately.
	r3, err := other.Open(b.ctx, "file://"+b.origin)
	require.NoError(t, err)
	require.NotEqual(t, r2.MirrorDir(), r3.MirrorDir())
	sha, err = r3.Resolve(b.ctx, "trunk")
	require.NoError(t, err)
	require.Equal(t, second, sha)
}

func TestOpenBareOrigin(t *testing.T) {
	t.Parallel()
	origin, base := newOrigin(t)
	bare := filepath.Join(t.TempDir(), "bare.git")
	gitT(t, filepath.Dir(bare), "clone", "--quiet", "--bare", origin, bare)
	cache, err := NewCache(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	repo, err := cache.Open(ctx, bare)
	require.NoError(t, err)
	w, err := repo.AddWorktree(ctx, "bare-task", "trunk")
	require.NoError(t, err)
	sha := commitFile(t, w, "new.txt", "x\n", "Task 1: new")
	require.NoError(t, w.Push(ctx, sha, "refs/heads/trunk", false)) // a bare origin has no checked-out branch
	require.Equal(t, sha, gitT(t, bare, "rev-parse", "refs/heads/trunk"))
	require.NotEqual(t, base, sha)
}

func TestNotARepository(t *testing.T) {
	t.Parallel()
	origin, _ := newOrigin(t)
	cache, err := NewCache(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	plain := t.TempDir()
	for _, src := range []string{
		plain,                                 // a plain directory
		filepath.Join(plain, "missing"),       // nothing at all
		filepath.Join(origin, "src"),          // inside a repository, not its top
		"",                                    // empty
		"file://" + filepath.Join(plain, "x"), // a URL git cannot read
	} {
		_, err := cache.Open(ctx, src)
		require.ErrorIs(t, err, ErrNotARepository, src)
	}
	entries, err := os.ReadDir(filepath.Join(cache.Root(), "mirrors"))
	require.NoError(t, err)
	require.Empty(t, entries, "a failed clone leaves nothing behind")
}

func TestAddWorktree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writeFile(t, b.origin, "README.md", "changed later\n")
	gitT(t, b.origin, "commit", "--quiet", "-am", "later")
	require.NoError(t, b.repo.Fetch(b.ctx))

	w := b.worktree(t, "ex1/task 1.2")
	require.Equal(t, filepath.Join(b.cache.Root(), "worktrees"), filepath.Dir(w.Dir))
	require.NotContains(t, w.Name, "/")
	require.NotContains(t, w.Name, " ")
	require.True(t, w.HasRepository())
	head, err := w.Head(b.ctx)
	require.NoError(t, err)
	require.Equal(t, b.base, head, "at the commit asked for, not at the branch tip")
	require.Equal(t, "hello\n", readFile(t, w.Dir, "README.md"))
	_, err = gitCmd{dir: w.Dir, args: []string{"symbolic-ref", "-q", "HEAD"}}.run(b.ctx)
	require.Error(t, err, "HEAD is detached")

	// Names that sanitize alike stay apart.
	w2 := b.worktree(t, "ex1-task-1.2")
	require.NotEqual(t, w.Dir, w2.Dir)
	require.Equal(t, "ex1-task-1.2", w2.Name)
	for _, n := range []string{"..", ".", "", "../../etc", strings.Repeat("x", 300)} {
		s := sanitizeName(n)
		require.NotEmpty(t, s, n)
		require.NotContains(t, s, "/", n)
		require.False(t, strings.HasPrefix(s, "."), n)
		require.LessOrEqual(t, len(s), maxNameLen+9, n)
	}

	_, err = b.repo.AddWorktree(b.ctx, "bad", "no-such-branch")
	require.ErrorIs(t, err, ErrUnknownRef)

	// A leftover of the same name without unpushed work is replaced.
	writeFile(t, w.Dir, "junk.txt", "leftover\n")
	again, err := b.repo.AddWorktree(b.ctx, "ex1/task 1.2", "trunk")
	require.NoError(t, err)
	require.Equal(t, w.Dir, again.Dir)
	require.NoFileExists(t, filepath.Join(again.Dir, "junk.txt"))
	require.Equal(t, "changed later\n", readFile(t, again.Dir, "README.md"))

	// A leftover with an unpushed commit is kept.
	sha := commitFile(t, again, "src/c.go", "package src\n", "Task 1.2: c")
	_, err = b.repo.AddWorktree(b.ctx, "ex1/task 1.2", "trunk")
	require.ErrorIs(t, err, ErrUnpushed)
	head, err = again.Head(b.ctx)
	require.NoError(t, err)
	require.Equal(t, sha, head)

	// A plain directory in the way (no git) is simply replaced.
	plain := filepath.Join(b.cache.Root(), "worktrees", "plain")
	writeFile(t, plain, "x", "y")
	wp, err := b.repo.AddWorktree(b.ctx, "plain", b.base)
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(wp.Dir, "x"))

	// A worktree whose directory vanished is pruned and can be re-added.
	require.NoError(t, os.RemoveAll(wp.Dir))
	_, err = b.repo.AddWorktree(b.ctx, "plain", b.base)
	require.NoError(t, err)
}

func TestCheckpointRestore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worktree(t, "cp")
	writeFile(t, w.Dir, "build.cache", "ignored cache\n")
	paths := []string{"src/a.go", "README.md", "src/new.go", "docs/guide.md"}

	// Paths are checked by platform/repopath: an unclean one is refused, never rewritten.
	_, err := w.Checkpoint(b.ctx, []string{"./docs//guide.md"})
	require.ErrorIs(t, err, ErrUnsafePath)

	cp, err := w.Checkpoint(b.ctx, paths)
	require.NoError(t, err)
	require.Equal(t, b.base, cp.Commit)
	require.Len(t, cp.Files, 4)
	require.Equal(t, FileHash{Path: "src/new.go"}, cp.Files[2])
	require.Equal(t, "docs/guide.md", cp.Files[3].Path)
	for _, i := range []int{0, 1, 3} {
		require.True(t, cp.Files[i].Exists)
		require.Len(t, cp.Files[i].SHA256, 64)
	}

	// An executor's mess: modifications, deletions, untracked files and directories, staged
	// changes, a commit.
	writeFile(t, w.Dir, "src/a.go", "package src\n\nconst A = 99\n")
	require.NoError(t, os.Remove(filepath.Join(w.Dir, "README.md")))
	writeFile(t, w.Dir, "src/new.go", "package src\n")
	writeFile(t, w.Dir, "tmp/deep/out.txt", "untracked\n")
	writeFile(t, w.Dir, "docs/guide.md", "rewritten\n")
	gitT(t, w.Dir, "add", "docs/guide.md")
	writeFile(t, w.Dir, "src/b.go", "package src\n\nconst B = 3\n")
	_, _, err = w.Commit(b.ctx, "oops", []string{"src/b.go"}, agentID)
	require.NoError(t, err)

	changed, err := w.Checkpoint(b.ctx, paths)
	require.NoError(t, err)
	require.NotEqual(t, cp, changed)

	require.NoError(t, w.Restore(b.ctx, cp))
	after, err := w.Checkpoint(b.ctx, paths)
	require.NoError(t, err)
	require.Equal(t, cp, after)
	require.NoDirExists(t, filepath.Join(w.Dir, "tmp"))
	require.Equal(t, "package src\n\nconst B = 2\n", readFile(t, w.Dir, "src/b.go"))
	require.Equal(t, "ignored cache\n", readFile(t, w.Dir, "build.cache"), "ignored caches survive")
	changes, err := w.Changes(b.ctx)
	require.NoError(t, err)
	require.Empty(t, changes)

	// A checkpoint of an uncommitted change cannot come back from git: Restore says so.
	writeFile(t, w.Dir, "README.md", "dirty at checkpoint\n")
	dirty, err := w.Checkpoint(b.ctx, []string{"README.md"})
	require.NoError(t, err)
	require.ErrorIs(t, w.Restore(b.ctx, dirty), ErrCheckpointMismatch)

	_, err = w.Checkpoint(b.ctx, []string{"src"})
	require.Error(t, err, "a directory is not a file")
	require.Error(t, w.Restore(b.ctx, Checkpoint{}))
}

func TestRestoreOnlyThisWorktree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w1 := b.worktree(t, "lane1")
	w2 := b.worktree(t, "lane2")
	cp, err := w1.Checkpoint(b.ctx, []string{"src/a.go"})
	require.NoError(t, err)
	writeFile(t, w1.Dir, "src/a.go", "lane 1\n")
	writeFile(t, w2.Dir, "src/a.go", "lane 2\n")
	writeFile(t, w2.Dir, "untracked.txt", "lane 2\n")
	require.NoError(t, w1.Restore(b.ctx, cp))
	require.Equal(t, "lane 2\n", readFile(t, w2.Dir, "src/a.go"))
	require.Equal(t, "lane 2\n", readFile(t, w2.Dir, "untracked.txt"))
}

func TestChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worktree(t, "changes")
	writeFile(t, w.Dir, "src/a.go", "modified\n")
	require.NoError(t, os.Remove(filepath.Join(w.Dir, "README.md")))
	writeFile(t, w.Dir, "new dir/new file.txt", "untracked\n")
	writeFile(t, w.Dir, "staged.txt", "staged\n")
	gitT(t, w.Dir, "add", "staged.txt")
	writeFile(t, w.Dir, "x.cache", "ignored\n")
	writeFile(t, w.Dir, "src/b.go", "package src\n\nconst B = 2\n") // same content: no change
	changes, err := w.Changes(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []Change{
		{Path: "README.md", Kind: ChangeDeleted},
		{Path: "new dir/new file.txt", Kind: ChangeAdded},
		{Path: "src/a.go", Kind: ChangeModified},
		{Path: "staged.txt", Kind: ChangeAdded},
	}, changes)
}

func TestCommitStagesOnlyGivenPaths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worktree(t, "commit")
	writeFile(t, w.Dir, "src/a.go", "package src\n\nconst A = 42\n")     // 1 line changed: +1 -1
	writeFile(t, w.Dir, "src/b.go", "package src\n\nconst B = 42\n")     // not part of the task
	writeFile(t, w.Dir, "src/c.go", "package src\n\nconst C = 3\n")      // new: +3
	require.NoError(t, os.Remove(filepath.Join(w.Dir, "docs/guide.md"))) // deleted: -3
	writeFile(t, w.Dir, "other.txt", "not mine\n")
	gitT(t, w.Dir, "add", "other.txt") // staged by an executor, still not part of the task

	sha, lines, err := w.Commit(b.ctx, "Task 1.1: constants", []string{"src/a.go", "src/c.go", "docs/guide.md", "never/existed.go"}, agentID)
	require.NoError(t, err)
	require.Equal(t, 8, lines)
	head, err := w.Head(b.ctx)
	require.NoError(t, err)
	require.Equal(t, sha, head)
	require.Equal(t, b.base, gitT(t, w.Dir, "rev-parse", "HEAD^"))
	require.Equal(t, "D\tdocs/guide.md\nM\tsrc/a.go\nA\tsrc/c.go", gitT(t, w.Dir, "diff-tree", "--no-commit-id", "--name-status", "-r", "HEAD"))
	require.Equal(t, "Agent Smith <agent@converge.test>|Agent Smith <agent@converge.test>|Task 1.1: constants",
		gitT(t, w.Dir, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%B"))

	changes, err := w.Changes(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []Change{{Path: "other.txt", Kind: ChangeAdded}, {Path: "src/b.go", Kind: ChangeModified}}, changes)
	require.Equal(t, "package src\n\nconst B = 42\n", readFile(t, w.Dir, "src/b.go"))

	writeFile(t, w.Dir, "src/a.go", "package src\n\nconst A = 43\n")
	_, _, err = w.Commit(b.ctx, "#12: keep the hash\n# and this line\n\n", []string{"src/a.go"}, agentID)
	require.NoError(t, err)
	require.Equal(t, "#12: keep the hash\n# and this line", gitT(t, w.Dir, "log", "-1", "--format=%B"))

	_, _, err = w.Commit(b.ctx, "again", []string{"src/a.go"}, agentID)
	require.ErrorIs(t, err, ErrNothingToCommit)
	_, _, err = w.Commit(b.ctx, "none", nil, agentID)
	require.ErrorIs(t, err, ErrNothingToCommit)
	_, _, err = w.Commit(b.ctx, "ghost", []string{"never/existed.go"}, agentID)
	require.ErrorIs(t, err, ErrNothingToCommit)
	_, _, err = w.Commit(b.ctx, "", []string{"src/b.go"}, agentID)
	require.Error(t, err)
	_, _, err = w.Commit(b.ctx, "half", []string{"src/b.go"}, Identity{Name: "x"})
	require.Error(t, err)

	// Pathspec magic is taken literally, and a directory commits what is inside it.
	writeFile(t, w.Dir, "lit/*.go", "star\n")
	writeFile(t, w.Dir, "lit/real.go", "real\n")
	_, _, err = w.Commit(b.ctx, "literal", []string{"lit/*.go"}, Identity{})
	require.NoError(t, err)
	require.Equal(t, "lit/*.go", gitT(t, w.Dir, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD"))
	require.Equal(t, "converge <converge@localhost>", gitT(t, w.Dir, "log", "-1", "--format=%an <%ae>"))
	_, _, err = w.Commit(b.ctx, "dir", []string{"lit"}, agentID)
	require.NoError(t, err)
	require.Equal(t, "lit/real.go", gitT(t, w.Dir, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD"))
}

func TestPush(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worktree(t, "push")
	sha := commitFile(t, w, "src/c.go", "package src\n", "Task 1: c")

	require.NoError(t, w.Push(b.ctx, sha, "refs/converge/x/y", false))
	require.NoError(t, w.Push(b.ctx, sha, "refs/heads/converge/x", false))
	require.Equal(t, sha, gitT(t, b.origin, "rev-parse", "refs/converge/x/y"))
	require.Equal(t, sha, gitT(t, b.origin, "rev-parse", "refs/heads/converge/x"))
	require.Equal(t, "trunk", gitT(t, b.origin, "symbolic-ref", "--short", "HEAD"), "the origin's checkout is untouched")
	require.Equal(t, b.base, gitT(t, b.origin, "rev-parse", "HEAD"))

	// The pushing cache sees the refs without a fetch; another cache after its clone.
	for _, ref := range []string{"refs/converge/x/y", "converge/x"} {
		got, err := b.repo.Resolve(b.ctx, ref)
		require.NoError(t, err, ref)
		require.Equal(t, sha, got, ref)
	}
	other, err := NewCache(t.TempDir())
	require.NoError(t, err)
	r2, err := other.Open(b.ctx, b.origin)
	require.NoError(t, err)
	for _, ref := range []string{"refs/converge/x/y", "refs/heads/converge/x"} {
		got, err := r2.Resolve(b.ctx, ref)
		require.NoError(t, err, ref)
		require.Equal(t, sha, got, ref)
	}

	// A diverging commit: refused without force, on a branch and on a task ref alike.
	w2 := b.worktree(t, "push2")
	diverged := commitFile(t, w2, "src/d.go", "package src\n", "Task 1 (retry): d")
	for _, ref := range []string{"refs/heads/converge/x", "refs/converge/x/y"} {
		err := w2.Push(b.ctx, diverged, ref, false)
		require.ErrorIs(t, err, ErrPushRejected, ref)
		require.Contains(t, err.Error(), "rejected")
		require.Equal(t, sha, gitT(t, b.origin, "rev-parse", ref))
		require.NoError(t, w2.Push(b.ctx, diverged, ref, true), ref)
		require.Equal(t, diverged, gitT(t, b.origin, "rev-parse", ref))
	}
	// A fast-forward needs no force.
	next := commitFile(t, w2, "src/e.go", "package src\n", "Task 2: e")
	require.NoError(t, w2.Push(b.ctx, next, "refs/heads/converge/x", false))

	// The origin's checked-out branch is refused by the origin itself.
	err = w2.Push(b.ctx, next, "refs/heads/trunk", false)
	require.ErrorIs(t, err, ErrPushRejected)
	require.Equal(t, b.base, gitT(t, b.origin, "rev-parse", "trunk"))

	require.Error(t, w2.Push(b.ctx, next, "converge/x", false), "short ref names are refused")
	require.Error(t, w2.Push(b.ctx, next, "refs/heads/bad..name", false))
	require.ErrorIs(t, w2.Push(b.ctx, "nope", "refs/converge/x/z", false), ErrUnknownRef)
}

func TestCherryPick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	integrator := Identity{Name: "Integrator", Email: "integrator@converge.test"}

	// Two tasks of one wave, in parallel worktrees from the same base, pushed to task refs.
	t1 := b.worktree(t, "ex/t1")
	t2 := b.worktree(t, "ex/t2")
	writeFile(t, t1.Dir, "src/a.go", "package src\n\nconst A = 100\n")
	s1, _, err := t1.Commit(b.ctx, "Task 1: A", []string{"src/a.go"}, Identity{Name: "Agent One", Email: "one@converge.test"})
	require.NoError(t, err)
	writeFile(t, t2.Dir, "src/b.go", "package src\n\nconst B = 200\n")
	writeFile(t, t2.Dir, "src/t2.go", "package src\n")
	s2, _, err := t2.Commit(b.ctx, "Task 2: B\n\nwith a body", []string{"src/b.go", "src/t2.go"}, Identity{Name: "Agent Two", Email: "two@converge.test"})
	require.NoError(t, err)
	require.NoError(t, t1.Push(b.ctx, s1, "refs/converge/ex/t1", false))
	require.NoError(t, t2.Push(b.ctx, s2, "refs/converge/ex/t2", false))

	// Another agent integrates after a fetch.
	other, err := NewCache(t.TempDir())
	require.NoError(t, err)
	r2, err := other.Open(b.ctx, b.origin)
	require.NoError(t, err)
	integ, err := r2.AddWorktree(b.ctx, "ex/integration", b.base)
	require.NoError(t, err)
	head, err := integ.CherryPick(b.ctx, []string{"refs/converge/ex/t1", s2}, integrator)
	require.NoError(t, err)
	log := gitT(t, integ.Dir, "log", "--reverse", "--format=%an|%cn|%s", b.base+"..HEAD")
	require.Equal(t, "Agent One|Integrator|Task 1: A\nAgent Two|Integrator|Task 2: B", log, "one commit per task, in order")
	require.Equal(t, "Task 2: B\n\nwith a body", gitT(t, integ.Dir, "log", "-1", "--format=%B"))
	require.Equal(t, gitT(t, integ.Dir, "log", "-1", "--format=%ad", s2), gitT(t, integ.Dir, "log", "-1", "--format=%ad"), "author date kept")
	require.Equal(t, "package src\n\nconst A = 100\n", readFile(t, integ.Dir, "src/a.go"))
	require.Equal(t, "package src\n\nconst B = 200\n", readFile(t, integ.Dir, "src/b.go"))
	require.NoError(t, integ.Push(b.ctx, head, "refs/heads/converge/ex", false))

	// Picking an already applied commit is skipped.
	again, err := integ.CherryPick(b.ctx, []string{s1}, integrator)
	require.NoError(t, err)
	require.Equal(t, head, again)

	// A conflict: a third task edited the same line as task 1. All-or-nothing.
	t3 := b.worktree(t, "ex/t3")
	writeFile(t, t3.Dir, "src/a.go", "package src\n\nconst A = 300\n")
	s3, _, err := t3.Commit(b.ctx, "Task 3: A again", []string{"src/a.go"}, agentID)
	require.NoError(t, err)
	require.NoError(t, t3.Push(b.ctx, s3, "refs/converge/ex/t3", false))
	require.NoError(t, r2.Fetch(b.ctx))
	t4 := b.worktree(t, "ex/t4")
	s4 := commitFile(t, t4, "docs/new.md", "fine\n", "Task 4: docs")
	require.NoError(t, t4.Push(b.ctx, s4, "refs/converge/ex/t4", false))
	require.NoError(t, r2.Fetch(b.ctx))

	_, err = integ.CherryPick(b.ctx, []string{s4, s3}, integrator)
	var ce *ConflictError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, ErrConflict)
	require.Equal(t, s3, ce.Commit)
	require.Equal(t, []string{"src/a.go"}, ce.Paths)
	now, err := integ.Head(b.ctx)
	require.NoError(t, err)
	require.Equal(t, head, now, "back at the HEAD before the call")
	changes, err := integ.Changes(b.ctx)
	require.NoError(t, err)
	require.Empty(t, changes)
	require.NoFileExists(t, filepath.Join(integ.Dir, "docs/new.md"))

	// The worktree is usable afterwards.
	_, err = integ.CherryPick(b.ctx, []string{s4}, integrator)
	require.NoError(t, err)

	writeFile(t, integ.Dir, "README.md", "dirty\n")
	_, err = integ.CherryPick(b.ctx, []string{s3}, integrator)
	require.ErrorIs(t, err, ErrDirty)
	_, err = integ.CherryPick(b.ctx, []string{"refs/converge/ex/none"}, integrator)
	require.ErrorIs(t, err, ErrUnknownRef)
}

func TestRemove(t *testing.T) {
	t.Parallel()
	b := setup(t)

	clean := b.worktree(t, "clean")
	writeFile(t, clean.Dir, "scratch.txt", "uncommitted work is not protected\n")
	require.NoError(t, clean.Remove(b.ctx))
	require.NoDirExists(t, clean.Dir)
	require.NotContains(t, gitT(t, b.repo.MirrorDir(), "worktree", "list", "--porcelain"), clean.Dir)

	w := b.worktree(t, "work")
	sha := commitFile(t, w, "src/c.go", "package src\n", "Task 1: c")
	require.ErrorIs(t, w.Remove(b.ctx), ErrUnpushed)
	require.DirExists(t, w.Dir)
	require.NoError(t, w.Push(b.ctx, sha, "refs/converge/ex/t1", false))
	require.NoError(t, w.Remove(b.ctx))
	require.NoDirExists(t, w.Dir)
	require.NotContains(t, gitT(t, b.repo.MirrorDir(), "worktree", "list", "--porcelain"), w.Dir)
	require.NoError(t, w.Remove(b.ctx), "removing twice is fine")

	// Pushed from another cache to the origin: Remove finds it there.
	other, err := NewCache(t.TempDir())
	require.NoError(t, err)
	r2, err := other.Open(b.ctx, b.origin)
	require.NoError(t, err)
	w2 := b.worktree(t, "elsewhere")
	sha2 := commitFile(t, w2, "src/d.go", "package src\n", "Task 2: d")
	// Make the commit known to the second cache's mirror by pushing it there, then to the origin.
	gitT(t, w2.Dir, "push", "--quiet", r2.MirrorDir(), sha2+":refs/converge/ex/t2")
	w3, err := r2.AddWorktree(b.ctx, "relay", sha2)
	require.NoError(t, err)
	require.NoError(t, w3.Push(b.ctx, sha2, "refs/converge/ex/t2", false))
	require.NoError(t, w2.Remove(b.ctx))
	require.NoDirExists(t, w2.Dir)
}

func TestUnsafePaths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worktree(t, "unsafe")
	outside := t.TempDir()
	writeFile(t, outside, "secret.txt", "secret\n")
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(w.Dir, "abs-out")))
	require.NoError(t, os.Symlink("../../../../../../../../"+outside+"/secret.txt", filepath.Join(w.Dir, "rel-out")))
	require.NoError(t, os.Symlink(outside, filepath.Join(w.Dir, "dir-out")))
	require.NoError(t, os.Symlink("..", filepath.Join(w.Dir, "src", "up")))
	require.NoError(t, os.Symlink("../..", filepath.Join(w.Dir, "src", "upup")))
	require.NoError(t, os.Symlink("src/a.go", filepath.Join(w.Dir, "in-rel")))
	require.NoError(t, os.Symlink(filepath.Join(w.Dir, "src", "b.go"), filepath.Join(w.Dir, "in-abs")))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(w.Dir, "dangling")))
	require.NoError(t, os.Symlink("loop", filepath.Join(w.Dir, "loop")))

	for _, p := range []string{
		"/etc/passwd", filepath.Join(w.Dir, "src/a.go"), "../x", "src/../../x", "src/../a.go", "", ".",
		".git/config", "src/.GIT/x", "abs-out", "rel-out", "dir-out/secret.txt", "dir-out/new.txt",
		"src/upup/x", "src/upup/" + filepath.Base(filepath.Dir(w.Dir)),
	} {
		_, err := w.Checkpoint(b.ctx, []string{"README.md", p})
		require.ErrorIs(t, err, ErrUnsafePath, "checkpoint %q", p)
		_, _, err = w.Commit(b.ctx, "unsafe", []string{p}, agentID)
		require.ErrorIs(t, err, ErrUnsafePath, "commit %q", p)
	}

	cp, err := w.Checkpoint(b.ctx, []string{"in-rel", "in-abs", "src/up/README.md", "dangling", "src/up/src/new.go"})
	require.NoError(t, err)
	direct, err := w.Checkpoint(b.ctx, []string{"src/a.go", "src/b.go", "README.md"})
	require.NoError(t, err)
	require.Equal(t, direct.Files[0].SHA256, cp.Files[0].SHA256)
	require.Equal(t, direct.Files[1].SHA256, cp.Files[1].SHA256)
	require.Equal(t, direct.Files[2].SHA256, cp.Files[2].SHA256)
	require.False(t, cp.Files[3].Exists)
	require.False(t, cp.Files[4].Exists)
	_, err = w.Checkpoint(b.ctx, []string{"loop"})
	require.Error(t, err)
}

func TestScratch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	w, err := Scratch(root, "ex/t1")
	require.NoError(t, err)
	require.False(t, w.HasRepository())
	require.Equal(t, filepath.Join(root, "scratch"), filepath.Dir(w.Dir))
	require.DirExists(t, w.Dir)
	writeFile(t, w.Dir, "out.txt", "result\n")

	cp, err := w.Checkpoint(ctx, []string{"out.txt", "missing"})
	require.NoError(t, err)
	require.Empty(t, cp.Commit)
	require.True(t, cp.Files[0].Exists)
	require.False(t, cp.Files[1].Exists)
	_, err = w.Checkpoint(ctx, []string{"../x"})
	require.ErrorIs(t, err, ErrUnsafePath)

	_, err = w.Head(ctx)
	require.ErrorIs(t, err, ErrNoRepository)
	writeFile(t, w.Dir, "later/more.txt", "more\n")
	require.ErrorIs(t, w.Restore(ctx, cp), ErrCheckpointMismatch, "out.txt existed at the checkpoint")
	entries, err := os.ReadDir(w.Dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a scratch directory is restored empty")
	empty, err := w.Checkpoint(ctx, []string{"out.txt"})
	require.NoError(t, err)
	writeFile(t, w.Dir, "out.txt", "a failed try\n")
	require.NoError(t, w.Restore(ctx, empty))
	require.NoFileExists(t, filepath.Join(w.Dir, "out.txt"))
	_, err = w.Changes(ctx)
	require.ErrorIs(t, err, ErrNoRepository)
	_, _, err = w.Commit(ctx, "m", []string{"out.txt"}, agentID)
	require.ErrorIs(t, err, ErrNoRepository)
	require.ErrorIs(t, w.Push(ctx, "x", "refs/heads/x", false), ErrNoRepository)
	_, err = w.CherryPick(ctx, nil, agentID)
	require.ErrorIs(t, err, ErrNoRepository)

	again, err := Scratch(root, "ex/t1")
	require.NoError(t, err)
	require.Equal(t, w.Dir, again.Dir)
	require.NoFileExists(t, filepath.Join(again.Dir, "out.txt"), "a new attempt starts empty")
	require.NoError(t, again.Remove(ctx))
	require.NoDirExists(t, again.Dir)
}

// TestCheckpointOfAnEmptyScratchDirectoryDoesNotLook: a scratch directory marked Empty (made
// or emptied for its task) records every path absent without resolving it, still refuses an
// unsafe path, and looks again at the next checkpoint.
func TestCheckpointOfAnEmptyScratchDirectoryDoesNotLook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, err := Scratch(t.TempDir(), "ex/t1")
	require.NoError(t, err)
	w.Empty = true
	// Not the case for a real Empty directory: written here to show the checkpoint did not look.
	writeFile(t, w.Dir, "out.txt", "result\n")
	_, err = w.Checkpoint(ctx, []string{"../x"})
	require.ErrorIs(t, err, ErrUnsafePath)
	w.Empty = true
	cp, err := w.Checkpoint(ctx, []string{"out.txt", "sub/missing"})
	require.NoError(t, err)
	require.Equal(t, []FileHash{{Path: "out.txt"}, {Path: "sub/missing"}}, cp.Files)
	require.False(t, w.Empty, "a checkpoint clears Empty: the task writes after it")
	cp, err = w.Checkpoint(ctx, []string{"out.txt"})
	require.NoError(t, err)
	require.True(t, cp.Files[0].Exists)
}

func TestConcurrentAddWorktree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 8
	var wg sync.WaitGroup
	trees := make([]*Worktree, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := b.repo.AddWorktree(b.ctx, fmt.Sprintf("ex/t%d", i), "trunk")
			if err == nil {
				_, err = b.repo.Resolve(b.ctx, "trunk")
			}
			if err == nil && i%2 == 0 {
				err = b.repo.Fetch(b.ctx)
			}
			if err == nil {
				// Work in parallel lanes: every task commits its own file.
				writeFile(t, w.Dir, fmt.Sprintf("task%d.txt", i), "done\n")
				_, _, err = w.Commit(b.ctx, fmt.Sprintf("Task %d", i), []string{fmt.Sprintf("task%d.txt", i)}, agentID)
			}
			trees[i], errs[i] = w, err
		}()
	}
	wg.Wait()
	dirs := map[string]bool{}
	for i := range n {
		require.NoError(t, errs[i], i)
		require.False(t, dirs[trees[i].Dir])
		dirs[trees[i].Dir] = true
		require.Equal(t, b.base, gitT(t, trees[i].Dir, "rev-parse", "HEAD^"))
		require.Equal(t, "task"+fmt.Sprint(i)+".txt", gitT(t, trees[i].Dir, "diff-tree", "--no-commit-id", "--name-only", "-r", "HEAD"))
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = trees[i].Remove(b.ctx)
		}()
	}
	wg.Wait()
	for i := range n {
		require.ErrorIs(t, errs[i], ErrUnpushed, i)
	}
}

func TestContextCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	err := b.repo.Fetch(ctx)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), err)
}

func TestGitErrorKeepsStderr(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.worktree(t, "stderr")
	sha := commitFile(t, w, "x.txt", "x\n", "x")
	err := w.Push(b.ctx, sha, "refs/heads/trunk", true)
	var ge *GitError
	require.ErrorAs(t, err, &ge)
	require.Contains(t, ge.Stderr, "refusing to update checked out branch")
	require.Equal(t, "push", ge.Args[0])
	require.NotZero(t, ge.ExitCode)
}

func BenchmarkAddWorktree(b *testing.B) {
	bb := setup(b)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w, err := bb.repo.AddWorktree(bb.ctx, fmt.Sprintf("bench-%d", i), bb.base)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := w.Remove(bb.ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
