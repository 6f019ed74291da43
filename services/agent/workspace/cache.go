package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// mirrorRefspecs are the refs a mirror keeps in step with its origin.
var mirrorRefspecs = []string{
	"+refs/heads/*:refs/heads/*",
	"+refs/converge/*:refs/converge/*",
	"+refs/tags/*:refs/tags/*",
}

// Cache keeps mirror clones and worktrees under one root directory. It is safe for concurrent
// use by goroutines; separate processes must use separate roots.
type Cache struct {
	root  string
	roots *Roots // nil: every local repository may be opened

	mu    sync.Mutex
	repos map[string]*Repo // by mirror key
}

// NewCache prepares root (created if missing, made absolute) with its mirrors/, worktrees/ and
// scratch/ directories. It fails when no git binary is on PATH.
func NewCache(root string) (*Cache, error) {
	if root == "" {
		return nil, errors.New("workspace: empty cache root")
	}
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("workspace: git not found: %w", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace: cache root: %w", err)
	}
	for _, d := range []string{"mirrors", "worktrees", "scratch"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("workspace: cache root: %w", err)
		}
	}
	return &Cache{root: abs, repos: map[string]*Repo{}}, nil
}

// Root is the cache's absolute root directory.
func (c *Cache) Root() string { return c.root }

// Restrict makes Open refuse local repositories outside roots (ErrOutsideRoots); nil lifts the
// restriction. Call it before the cache is used.
func (c *Cache) Restrict(roots *Roots) {
	c.mu.Lock()
	c.roots = roots
	c.mu.Unlock()
}

// Repo is one origin repository and its mirror in a Cache.
type Repo struct {
	cache  *Cache
	source string // normalized origin: absolute local path or URL
	dir    string // the bare mirror

	// mu guards the mirror: exclusive for clone, fetch, worktree removal/prune and ref updates,
	// shared for reads and worktree creation.
	mu sync.RWMutex
}

// Source is the origin the mirror was cloned from: an absolute path for a local repository
// (symbolic links resolved), else the URL as given.
func (r *Repo) Source() string { return r.source }

// MirrorDir is the bare mirror's directory.
func (r *Repo) MirrorDir() string { return r.dir }

// Open returns the Repo for source, a local path or a URL of an existing git repository. The
// first Open of a source clones its mirror; later ones fetch. A local path that does not exist
// or is not the top of a git repository (a work tree root or a bare repository) is an error
// wrapping ErrNotARepository.
//
// A cache restricted to roots (Restrict) refuses a local repository outside them before it
// reads anything of it: the error wraps ErrOutsideRoots.
func (c *Cache) Open(ctx context.Context, source string) (*Repo, error) {
	c.mu.Lock()
	roots := c.roots
	c.mu.Unlock()
	if err := roots.Check(source); err != nil {
		return nil, err
	}
	norm, err := normalizeSource(ctx, source)
	if err != nil {
		return nil, err
	}
	if err := roots.Check(norm); err != nil { // what the path resolved to
		return nil, err
	}
	r := c.repo(mirrorKey(norm), norm)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := os.Stat(r.dir); err == nil {
		return r, r.fetchLocked(ctx)
	}
	return r, r.cloneLocked(ctx)
}

// repo returns the registered Repo for key, registering it for source first if needed.
func (c *Cache) repo(key, source string) *Repo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.repos[key]; ok {
		return r
	}
	r := &Repo{cache: c, source: source, dir: filepath.Join(c.root, "mirrors", key+".git")}
	c.repos[key] = r
	return r
}

// repoByMirror returns the Repo of an existing mirror directory of this cache, reading its
// origin from the mirror's config when this process has not opened it.
func (c *Cache) repoByMirror(ctx context.Context, mirror string) (*Repo, error) {
	mirrors := filepath.Join(c.root, "mirrors")
	parent := filepath.Dir(mirror)
	if parent != mirrors {
		// Compare real paths: git may report the mirror through resolved symbolic links.
		realMirrors, err1 := filepath.EvalSymlinks(mirrors)
		realParent, err2 := filepath.EvalSymlinks(parent)
		if err1 != nil || err2 != nil || realMirrors != realParent {
			return nil, fmt.Errorf("workspace: %s is not a mirror of this cache", mirror)
		}
	}
	if !strings.HasSuffix(mirror, ".git") {
		return nil, fmt.Errorf("workspace: %s is not a mirror of this cache", mirror)
	}
	key := strings.TrimSuffix(filepath.Base(mirror), ".git")
	c.mu.Lock()
	r, ok := c.repos[key]
	c.mu.Unlock()
	if ok {
		return r, nil
	}
	out, err := git(ctx, mirror, "config", "--get", "remote.origin.url")
	if err != nil {
		return nil, err
	}
	return c.repo(key, strings.TrimSpace(out)), nil
}

// mirrorKey is the first 16 hex digits of sha256(source).
func mirrorKey(source string) string {
	sum := sha256.Sum256([]byte(source))
	return hex.EncodeToString(sum[:])[:16]
}

// isURL tells a URL (scheme://, or scp-like host:path) from a local path, as git does.
func isURL(s string) bool {
	if strings.Contains(s, "://") {
		return true
	}
	colon := strings.IndexByte(s, ':')
	if colon <= 0 {
		return false
	}
	if colon == 1 && (s[0]|0x20 >= 'a' && s[0]|0x20 <= 'z') { // a Windows drive letter
		return false
	}
	slash := strings.IndexByte(s, '/')
	return slash < 0 || colon < slash
}

// normalizeSource returns the form of source the mirror is keyed by and pushes go to; a local
// path is made absolute, its symbolic links resolved, and checked to be a repository's top.
func normalizeSource(ctx context.Context, source string) (string, error) {
	if strings.TrimSpace(source) == "" || strings.ContainsAny(source, "\x00\n") {
		return "", fmt.Errorf("workspace: source %q: %w", source, ErrNotARepository)
	}
	if isURL(source) {
		return source, nil
	}
	abs, err := filepath.Abs(source)
	if err != nil {
		return "", fmt.Errorf("workspace: source %q: %w", source, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("workspace: source %s does not exist: %w", abs, ErrNotARepository)
		}
		return "", fmt.Errorf("workspace: source %s: %w", abs, err)
	}
	// With the ceiling at the parent, git only looks at real itself (as a work tree root or a
	// git directory), never at an enclosing repository.
	_, err = gitCmd{
		dir:  real,
		env:  []string{"GIT_CEILING_DIRECTORIES=" + filepath.Dir(real)},
		args: []string{"rev-parse", "--git-dir"},
	}.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("workspace: source %s: %w (%w)", real, ErrNotARepository, err)
	}
	return real, nil
}

// cloneLocked creates the mirror in a temporary directory and renames it into place, so a
// crash never leaves a half-cloned mirror. The caller holds r.mu exclusively.
func (r *Repo) cloneLocked(ctx context.Context) error {
	mirrors := filepath.Dir(r.dir)
	base := filepath.Base(r.dir)
	if old, _ := filepath.Glob(filepath.Join(mirrors, base+".tmp-*")); len(old) > 0 {
		for _, o := range old {
			_ = os.RemoveAll(o)
		}
	}
	tmp, err := os.MkdirTemp(mirrors, base+".tmp-")
	if err != nil {
		return fmt.Errorf("workspace: clone %s: %w", r.source, err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	args := []string{"clone", "--bare", "--quiet"}
	// A bare clone brings branches and tags; the converge refs are asked for on top.
	args = append(args, "-c", "remote.origin.fetch=+refs/converge/*:refs/converge/*")
	args = append(args, "--", r.source, tmp)
	if _, err := (gitCmd{dir: mirrors, gc: true, args: args}).run(ctx); err != nil {
		if ge := (*GitError)(nil); errors.As(err, &ge) && strings.Contains(ge.Stderr, "does not appear to be a git repository") {
			return fmt.Errorf("workspace: clone %s: %w (%w)", r.source, ErrNotARepository, err)
		}
		return fmt.Errorf("workspace: clone %s: %w", r.source, err)
	}
	// Record the full refspec set, so that a plain `git fetch` in the mirror does the same.
	if _, err := git(ctx, tmp, "config", "--unset-all", "remote.origin.fetch"); err != nil && exitCode(err) != 5 {
		return fmt.Errorf("workspace: configure mirror: %w", err)
	}
	for _, spec := range mirrorRefspecs {
		if _, err := git(ctx, tmp, "config", "--add", "remote.origin.fetch", spec); err != nil {
			return fmt.Errorf("workspace: configure mirror: %w", err)
		}
	}
	if _, err := git(ctx, tmp, "config", "gc.autoDetach", "false"); err != nil {
		return fmt.Errorf("workspace: configure mirror: %w", err)
	}
	if err := os.Rename(tmp, r.dir); err != nil {
		return fmt.Errorf("workspace: clone %s: %w", r.source, err)
	}
	return nil
}

// Fetch brings the mirror's branches, converge refs and tags in line with the origin (forced
// updates, deleted refs pruned).
func (r *Repo) Fetch(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fetchLocked(ctx)
}

func (r *Repo) fetchLocked(ctx context.Context) error {
	args := append([]string{"fetch", "--quiet", "--prune", "--", r.source}, mirrorRefspecs...)
	if _, err := (gitCmd{dir: r.dir, gc: true, args: args}).run(ctx); err != nil {
		return fmt.Errorf("workspace: fetch %s: %w", r.source, err)
	}
	return nil
}

// Resolve returns the full sha of the commit ref names in the mirror, as of the last fetch:
// a branch ("main", "refs/heads/main"), a converge ref, a tag, a sha, any rev git understands,
// or "HEAD" (the origin's default branch when the mirror was cloned). "origin/<branch>" is
// accepted for "refs/heads/<branch>". A ref naming no commit is an error wrapping ErrUnknownRef.
func (r *Repo) Resolve(ctx context.Context, ref string) (string, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	sha, err := revParseCommit(ctx, gitCmd{dir: r.dir}, ref)
	if errors.Is(err, ErrUnknownRef) {
		if branch, ok := strings.CutPrefix(ref, "origin/"); ok && branch != "" {
			if sha, err2 := revParseCommit(ctx, gitCmd{dir: r.dir}, "refs/heads/"+branch); err2 == nil {
				return sha, nil
			}
		}
	}
	return sha, err
}

// revParseCommit resolves ref to a commit sha with c's directory and environment.
func revParseCommit(ctx context.Context, c gitCmd, ref string) (string, error) {
	if ref == "" || strings.ContainsAny(ref, "\x00\n") {
		return "", fmt.Errorf("workspace: %q: %w", ref, ErrUnknownRef)
	}
	c.args = []string{"rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}"}
	out, err := c.run(ctx)
	if err != nil {
		if exitCode(err) == 1 && ctx.Err() == nil {
			return "", fmt.Errorf("workspace: %q: %w", ref, ErrUnknownRef)
		}
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// Sweep removes the worktrees and scratch directories of the cache whose directory name keep
// does not claim: what a process that died (or stopped without cleaning up) left behind. A
// worktree goes as Worktree.Remove does: one with commits no ref of the mirror (or, after a
// fetch, of the origin) reaches is kept, with an error wrapping ErrUnpushed; a broken one (its
// git administrative files gone) is deleted. It answers the names removed and the errors of
// those it kept.
func (c *Cache) Sweep(ctx context.Context, keep func(name string) bool) ([]string, error) {
	var removed []string
	var errs []error
	for _, kind := range []string{"worktrees", "scratch"} {
		entries, err := os.ReadDir(filepath.Join(c.root, kind))
		if err != nil {
			errs = append(errs, fmt.Errorf("workspace: sweep: %w", err))
			continue
		}
		for _, e := range entries {
			if keep != nil && keep(e.Name()) {
				continue
			}
			dir := filepath.Join(c.root, kind, e.Name())
			if kind == "scratch" || !e.IsDir() {
				err = os.RemoveAll(dir)
			} else {
				err = c.removeLeftover(ctx, dir)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("workspace: sweep %s: %w", dir, err))
				continue
			}
			removed = append(removed, e.Name())
		}
	}
	return removed, errors.Join(errs...)
}
