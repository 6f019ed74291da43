package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ChangeKind says how a path differs from HEAD.
type ChangeKind string

// The kinds of Change.
const (
	ChangeAdded    ChangeKind = "added"    // not in HEAD: untracked or newly staged
	ChangeModified ChangeKind = "modified" // content, mode or type differs from HEAD
	ChangeDeleted  ChangeKind = "deleted"  // in HEAD, gone from the worktree
)

// Change is one repository-relative path that differs from HEAD.
type Change struct {
	Path string
	Kind ChangeKind
}

// Changes lists the files of the worktree that differ from HEAD, untracked files included and
// ignored files excluded, sorted by path: git diff HEAD --name-status -z (working tree against
// HEAD, whatever is staged) plus git ls-files --others --exclude-standard -z. On a scratch
// directory it returns ErrNoRepository.
func (w *Worktree) Changes(ctx context.Context) ([]Change, error) {
	if w.repo == nil {
		return nil, ErrNoRepository
	}
	out, err := w.git(ctx, "diff", "HEAD", "--no-renames", "--no-ext-diff", "--name-status", "-z", "--")
	if err != nil {
		return nil, fmt.Errorf("workspace: changes: %w", err)
	}
	var changes []Change
	fields := strings.Split(out, "\x00")
	for i := 0; i+1 < len(fields); i += 2 {
		status, p := fields[i], fields[i+1]
		kind := ChangeModified
		switch {
		case strings.HasPrefix(status, "A"):
			kind = ChangeAdded
		case strings.HasPrefix(status, "D"):
			kind = ChangeDeleted
		}
		changes = append(changes, Change{Path: p, Kind: kind})
	}
	out, err = w.git(ctx, "ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return nil, fmt.Errorf("workspace: changes: %w", err)
	}
	for _, p := range strings.Split(out, "\x00") {
		if p != "" {
			changes = append(changes, Change{Path: p, Kind: ChangeAdded})
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	return changes, nil
}

// Commit commits exactly paths (concrete repository-relative files or directories, taken
// literally, not as patterns) on top of HEAD: additions, modifications and deletions. The index
// is first reset to HEAD, so anything else an executor staged is unstaged, not committed; the
// working tree is never touched, so other changed files stay as they are. A path that neither
// exists nor is tracked is skipped. author is author and committer (the zero Identity means
// DefaultIdentity), passed through the environment and -c, never read from git config; hooks and
// signing are off. The message is kept as given but for surrounding whitespace (lines starting
// with '#' stay). It returns the new HEAD and the lines added plus deleted. Nothing to commit
// is an error wrapping ErrNothingToCommit; an unsafe path one wrapping ErrUnsafePath. On a
// scratch directory it returns ErrNoRepository.
func (w *Worktree) Commit(ctx context.Context, message string, paths []string, author Identity) (string, int, error) {
	if w.repo == nil {
		return "", 0, ErrNoRepository
	}
	if strings.TrimSpace(message) == "" {
		return "", 0, errors.New("workspace: commit: empty message")
	}
	id, err := author.orDefault()
	if err != nil {
		return "", 0, err
	}
	var present, missing []string
	for _, p := range paths {
		clean, err := cleanRel(p)
		if err != nil {
			return "", 0, err
		}
		if _, err := resolveInside(w.Dir, clean); err != nil {
			return "", 0, err
		}
		if _, err := os.Lstat(filepath.Join(w.Dir, filepath.FromSlash(clean))); err == nil {
			present = append(present, clean)
		} else {
			missing = append(missing, clean)
		}
	}
	if _, err := w.git(ctx, "reset", "--quiet"); err != nil {
		return "", 0, fmt.Errorf("workspace: commit: %w", err)
	}
	if len(missing) > 0 { // deletions: keep only the missing paths git tracks
		c := w.cmd(append([]string{"ls-files", "-z", "--"}, missing...)...)
		c.env = append(c.env, "GIT_LITERAL_PATHSPECS=1")
		out, err := c.run(ctx)
		if err != nil {
			return "", 0, fmt.Errorf("workspace: commit: %w", err)
		}
		tracked := strings.Split(out, "\x00")
		for _, m := range missing {
			for _, t := range tracked {
				if t == m || strings.HasPrefix(t, m+"/") {
					present = append(present, m)
					break
				}
			}
		}
	}
	if len(present) == 0 {
		return "", 0, fmt.Errorf("workspace: commit: %w", ErrNothingToCommit)
	}
	add := w.cmd(append([]string{"add", "--all", "--"}, present...)...)
	add.env = append(add.env, "GIT_LITERAL_PATHSPECS=1")
	if _, err := add.run(ctx); err != nil {
		return "", 0, fmt.Errorf("workspace: commit: stage: %w", err)
	}
	if _, err := w.git(ctx, "diff", "--cached", "--quiet", "--no-ext-diff"); err == nil {
		return "", 0, fmt.Errorf("workspace: commit: %w", ErrNothingToCommit)
	} else if exitCode(err) != 1 {
		return "", 0, fmt.Errorf("workspace: commit: %w", err)
	}
	commit := w.cmd(append(id.config(), "commit", "--quiet", "--no-verify", "--cleanup=whitespace", "--file=-")...)
	commit.env = append(commit.env, id.env()...)
	commit.stdin = strings.NewReader(message)
	if _, err := commit.run(ctx); err != nil {
		return "", 0, fmt.Errorf("workspace: commit: %w", err)
	}
	sha, err := w.Head(ctx)
	if err != nil {
		return "", 0, err
	}
	lines, err := w.linesChanged(ctx, sha)
	if err != nil {
		return "", 0, err
	}
	return sha, lines, nil
}

// linesChanged sums the added and deleted lines of commit against its first parent (binary
// files count 0).
func (w *Worktree) linesChanged(ctx context.Context, commit string) (int, error) {
	out, err := w.git(ctx, "diff-tree", "--numstat", "-r", "-z", "--no-renames", "--root", "--no-commit-id", commit)
	if err != nil {
		return 0, fmt.Errorf("workspace: lines changed: %w", err)
	}
	total := 0
	for _, rec := range strings.Split(out, "\x00") {
		added, rest, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		deleted, _, _ := strings.Cut(rest, "\t")
		a, _ := strconv.Atoi(added) // "-" for binary files
		d, _ := strconv.Atoi(deleted)
		total += a + d
	}
	return total, nil
}

// Push sets ref (a full ref name such as refs/converge/<execution>/<task> or
// refs/heads/converge/<execution>) in the origin to sha, a commit of this worktree, by
// `git push <origin> <sha>:<ref>` straight to the origin the mirror was cloned from, then
// updates the same ref in the mirror so Resolve and Remove see it without a fetch. Without
// force, git refuses a non-fast-forward update of an existing ref (a branch, and any other ref
// too: a retried task pushing a new commit to its task ref must pass force); with force the ref
// is overwritten. A refusal by the origin wraps ErrPushRejected; for a local non-bare origin
// that includes pushing to the branch it has checked out, while any other ref works. On a
// scratch directory it returns ErrNoRepository.
func (w *Worktree) Push(ctx context.Context, sha, ref string, force bool) error {
	if w.repo == nil {
		return ErrNoRepository
	}
	if !strings.HasPrefix(ref, "refs/") {
		return fmt.Errorf("workspace: push: ref %q is not a full ref name (refs/...)", ref)
	}
	if _, err := w.git(ctx, "check-ref-format", ref); err != nil {
		return fmt.Errorf("workspace: push: invalid ref %q: %w", ref, err)
	}
	full, err := revParseCommit(ctx, w.cmd(), sha)
	if err != nil {
		return fmt.Errorf("workspace: push: %w", err)
	}
	spec := full + ":" + ref
	if force {
		spec = "+" + spec
	}
	args := []string{"push", "--quiet", "--no-verify"}
	if _, local, _ := LocalPath(w.repo.source); local {
		// git runs the receiving side of a push into a local repository itself, as this
		// process's user, with the origin's configuration: its pre-receive, update,
		// post-receive and reference-transaction hooks would run a program of the origin's
		// choosing. receive-pack is told to run none (the -c of this command does not reach it:
		// git clears GIT_CONFIG_PARAMETERS for a local transport).
		args = append(args, "--receive-pack=git -c core.hooksPath=/dev/null -c receive.denyCurrentBranch=refuse receive-pack")
	}
	args = append(args, "--", w.repo.source, spec)
	if _, err := w.git(ctx, args...); err != nil {
		var ge *GitError
		if errors.As(err, &ge) && strings.Contains(ge.Stderr, "rejected") {
			return fmt.Errorf("workspace: push %s to %s: %w: %w", full, ref, ErrPushRejected, err)
		}
		return fmt.Errorf("workspace: push %s to %s: %w", full, ref, err)
	}
	r := w.repo
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := git(ctx, r.dir, "update-ref", ref, full); err != nil {
		return fmt.Errorf("workspace: pushed %s to %s, but the mirror's ref was not updated: %w", full, ref, err)
	}
	return nil
}

// CherryPick applies commits in order onto HEAD (the integration step): each becomes one new
// commit keeping its message, author and author date, with author as committer (the zero
// Identity means DefaultIdentity). A commit whose changes are already in HEAD is skipped. The
// worktree must have no tracked changes (ErrDirty). A commit that does not apply cleanly stops
// the whole pick: the worktree is reset to the HEAD it had before the call and the error is a
// *ConflictError naming the commit and the unmerged paths. Commits pushed by other agents
// must be in the mirror: Fetch first. It returns the new HEAD. On a scratch directory it
// returns ErrNoRepository.
func (w *Worktree) CherryPick(ctx context.Context, shas []string, author Identity) (string, error) {
	if w.repo == nil {
		return "", ErrNoRepository
	}
	id, err := author.orDefault()
	if err != nil {
		return "", err
	}
	orig, err := w.Head(ctx)
	if err != nil {
		return "", err
	}
	commits := make([]string, len(shas))
	for i, s := range shas {
		if commits[i], err = revParseCommit(ctx, w.cmd(), s); err != nil {
			return "", fmt.Errorf("workspace: cherry-pick: %w", err)
		}
	}
	out, err := w.git(ctx, "status", "--porcelain", "-z", "--untracked-files=no", "--ignore-submodules=none")
	if err != nil {
		return "", fmt.Errorf("workspace: cherry-pick: %w", err)
	}
	if out != "" {
		return "", fmt.Errorf("workspace: cherry-pick: %w", ErrDirty)
	}
	for _, c := range commits {
		if err := w.pickOne(ctx, c, id); err != nil {
			// Back to where we started; the reset also drops any pick state.
			if _, rerr := w.git(context.WithoutCancel(ctx), "reset", "--quiet", "--hard", orig, "--"); rerr != nil {
				return "", fmt.Errorf("%w (and resetting to %s failed: %v)", err, orig, rerr)
			}
			return "", err
		}
	}
	return w.Head(ctx)
}

// pickOne applies one commit with cherry-pick --no-commit and commits it with -C, so no
// sequencer state or editor is involved and an empty result is simply not committed.
func (w *Worktree) pickOne(ctx context.Context, commit string, id Identity) error {
	if _, err := w.git(ctx, "cherry-pick", "--no-commit", commit); err != nil {
		out, lerr := w.git(ctx, "ls-files", "--unmerged", "-z")
		if lerr != nil || out == "" {
			return fmt.Errorf("workspace: cherry-pick %s: %w", commit, err)
		}
		seen := map[string]bool{}
		var paths []string
		for _, rec := range strings.Split(out, "\x00") {
			if _, p, ok := strings.Cut(rec, "\t"); ok && !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		return &ConflictError{Commit: commit, Paths: paths}
	}
	if _, err := w.git(ctx, "diff", "--cached", "--quiet", "--no-ext-diff", "HEAD"); err == nil {
		return nil // already applied: nothing to commit
	} else if exitCode(err) != 1 {
		return fmt.Errorf("workspace: cherry-pick %s: %w", commit, err)
	}
	commitCmd := w.cmd(append(id.config(), "commit", "--quiet", "--no-verify", "--cleanup=verbatim", "--reuse-message="+commit)...)
	commitCmd.env = append(commitCmd.env, "GIT_COMMITTER_NAME="+id.Name, "GIT_COMMITTER_EMAIL="+id.Email)
	if _, err := commitCmd.run(ctx); err != nil {
		return fmt.Errorf("workspace: cherry-pick %s: %w", commit, err)
	}
	return nil
}
