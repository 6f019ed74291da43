package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Identity is the author or committer of the commits the agent makes.
type Identity struct {
	Name  string
	Email string
}

// DefaultIdentity is used where the zero Identity is given.
var DefaultIdentity = Identity{Name: "converge", Email: "converge@localhost"}

// orDefault returns id, or DefaultIdentity when id is the zero value; a half-filled or
// malformed identity is an error.
func (id Identity) orDefault() (Identity, error) {
	if id == (Identity{}) {
		return DefaultIdentity, nil
	}
	if strings.TrimSpace(id.Name) == "" || strings.TrimSpace(id.Email) == "" ||
		strings.ContainsAny(id.Name+id.Email, "<>\n\x00") {
		return Identity{}, fmt.Errorf("workspace: invalid identity %q <%s>", id.Name, id.Email)
	}
	return id, nil
}

// env sets author and committer to id.
func (id Identity) env() []string {
	return []string{
		"GIT_AUTHOR_NAME=" + id.Name, "GIT_AUTHOR_EMAIL=" + id.Email,
		"GIT_COMMITTER_NAME=" + id.Name, "GIT_COMMITTER_EMAIL=" + id.Email,
	}
}

// config passes id as user.name/user.email too, so git never looks for it elsewhere.
func (id Identity) config() []string {
	return []string{"-c", "user.name=" + id.Name, "-c", "user.email=" + id.Email}
}

// Worktree is one assignment's working directory: a detached git worktree of a mirror
// (AddWorktree) or a plain scratch directory (Scratch). Its methods may be called from one
// goroutine at a time; different worktrees are independent.
type Worktree struct {
	// Dir is the absolute path of the working directory.
	Dir string
	// Name is the sanitized name Dir was created under.
	Name string
	// Empty says Dir is known to hold nothing (a scratch directory made or emptied for this
	// task): the next Checkpoint records every path absent without looking (a path's resolution
	// was a no-op task's lstat of every element of Dir, issue 17), and clears it.
	Empty bool

	repo *Repo // nil for a scratch directory
}

// HasRepository reports whether w is a git worktree (false for a scratch directory).
func (w *Worktree) HasRepository() bool { return w.repo != nil }

// cmd is a git command inside the worktree, which cannot escape to an enclosing repository.
func (w *Worktree) cmd(args ...string) gitCmd {
	return gitCmd{
		dir:  w.Dir,
		env:  []string{"GIT_CEILING_DIRECTORIES=" + filepath.Dir(w.Dir)},
		args: args,
	}
}

func (w *Worktree) git(ctx context.Context, args ...string) (string, error) {
	return w.cmd(args...).run(ctx)
}

// maxNameLen bounds a sanitized worktree name.
const maxNameLen = 80

// WorktreeName is the directory name AddWorktree and Scratch give a worktree asked for by name.
func WorktreeName(name string) string { return sanitizeName(name) }

// sanitizeName maps name to one path element of [A-Za-z0-9._-], not starting with '.' or '-'.
// A name that had to change gets a hash of the original appended, so distinct names stay
// distinct ("ex/1" and "ex-1" do not collide).
func sanitizeName(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.TrimLeft(b.String(), ".-")
	if s == name && s != "" && len(s) <= maxNameLen {
		return s
	}
	if len(s) > maxNameLen {
		s = s[:maxNameLen]
	}
	sum := sha256.Sum256([]byte(name))
	if s == "" {
		return "wt-" + hex.EncodeToString(sum[:4])
	}
	return s + "-" + hex.EncodeToString(sum[:4])
}

// AddWorktree checks out commit (any rev Resolve accepts) as a detached worktree in
// <root>/worktrees/<sanitized name>. A leftover directory of that name from an earlier
// assignment is removed first as Worktree.Remove would; if it holds unpushed commits it is kept
// and the error wraps ErrUnpushed.
func (r *Repo) AddWorktree(ctx context.Context, name, commit string) (*Worktree, error) {
	sha, err := r.Resolve(ctx, commit)
	if err != nil {
		return nil, err
	}
	safe := sanitizeName(name)
	dir := filepath.Join(r.cache.root, "worktrees", safe)
	if _, err := os.Lstat(dir); err == nil {
		if err := r.cache.removeLeftover(ctx, dir); err != nil {
			return nil, fmt.Errorf("workspace: leftover worktree %s: %w", dir, err)
		}
	}
	r.mu.Lock()
	_, err = git(ctx, r.dir, "worktree", "prune")
	r.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("workspace: add worktree: %w", err)
	}
	r.mu.RLock()
	_, err = git(ctx, r.dir, "worktree", "add", "--quiet", "--detach", dir, sha)
	r.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("workspace: add worktree %s at %s: %w", safe, sha, err)
	}
	return &Worktree{Dir: dir, Name: safe, repo: r}, nil
}

// removeLeftover removes a directory found where a new worktree goes. A worktree of one of this
// cache's mirrors is removed as Worktree.Remove does (refused with ErrUnpushed); a plain or
// broken directory (no .git, or a .git whose administrative files are gone, so no commit can
// be recovered from it) is deleted.
func (c *Cache) removeLeftover(ctx context.Context, dir string) error {
	probe := &Worktree{Dir: dir}
	out, err := probe.git(ctx, "rev-parse", "--git-common-dir")
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return os.RemoveAll(dir)
	}
	common := strings.TrimSpace(out)
	if !filepath.IsAbs(common) {
		common = filepath.Join(dir, common)
	}
	r, err := c.repoByMirror(ctx, filepath.Clean(common))
	if err != nil {
		return err
	}
	return (&Worktree{Dir: dir, repo: r}).Remove(ctx)
}

// Scratch makes an empty plain directory <root>/scratch/<sanitized name> for a task list without
// a repository, deleting whatever a previous attempt left there. On the returned Worktree,
// Checkpoint records file hashes with an empty Commit, Restore empties the directory, Remove
// deletes it, and every other git method returns ErrNoRepository.
func Scratch(root, name string) (*Worktree, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace: scratch root: %w", err)
	}
	safe := sanitizeName(name)
	dir := filepath.Join(abs, "scratch", safe)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("workspace: scratch %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("workspace: scratch %s: %w", dir, err)
	}
	return &Worktree{Dir: dir, Name: safe}, nil
}

// Head returns the sha of the worktree's HEAD commit.
func (w *Worktree) Head(ctx context.Context) (string, error) {
	if w.repo == nil {
		return "", ErrNoRepository
	}
	return revParseCommit(ctx, w.cmd(), "HEAD")
}

// unpushed counts the commits of HEAD that no ref of the mirror reaches (the worktree's own
// and other worktrees' HEADs do not count).
func (w *Worktree) unpushed(ctx context.Context) (int, error) {
	w.repo.mu.RLock()
	defer w.repo.mu.RUnlock()
	out, err := w.git(ctx, "rev-list", "--count", "HEAD", "--not", "--glob=refs/*")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// Remove deletes the worktree (git worktree remove --force, then prune), discarding
// uncommitted changes. If HEAD has commits no mirror ref reaches, the mirror is fetched once
// (they may have been pushed to the origin from elsewhere); if they are still unreached the
// worktree is kept and the error wraps ErrUnpushed. A scratch directory is simply deleted.
func (w *Worktree) Remove(ctx context.Context) error {
	if w.repo == nil {
		return os.RemoveAll(w.Dir)
	}
	r := w.repo
	if _, err := os.Lstat(w.Dir); errors.Is(err, fs.ErrNotExist) {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, err := git(ctx, r.dir, "worktree", "prune")
		return err
	}
	n, err := w.unpushed(ctx)
	if err != nil {
		return fmt.Errorf("workspace: remove %s: %w", w.Dir, err)
	}
	if n > 0 {
		fetchErr := r.Fetch(ctx)
		if fetchErr == nil {
			if n, err = w.unpushed(ctx); err != nil {
				return fmt.Errorf("workspace: remove %s: %w", w.Dir, err)
			}
		}
		if n > 0 {
			if fetchErr != nil {
				return fmt.Errorf("workspace: remove %s: %d commit(s): %w (and the origin could not be checked: %v)", w.Dir, n, ErrUnpushed, fetchErr)
			}
			return fmt.Errorf("workspace: remove %s: %d commit(s): %w", w.Dir, n, ErrUnpushed)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := git(ctx, r.dir, "worktree", "remove", "--force", w.Dir); err != nil {
		return fmt.Errorf("workspace: remove %s: %w", w.Dir, err)
	}
	if _, err := git(ctx, r.dir, "worktree", "prune"); err != nil {
		return fmt.Errorf("workspace: remove %s: %w", w.Dir, err)
	}
	return nil
}
