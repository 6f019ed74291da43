package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// ReadFile reads at most max bytes of the repository-relative file p of the worktree (the
// project files Prime loads: AGENTS.md, a spec). A path that leaves the worktree (absolute, "..",
// ".git", a symbolic link out of it) is an error wrapping ErrUnsafePath: a repository must not
// get a file of the agent's host into a prompt that may be sent to a remote endpoint. A missing
// file answers ok false. truncated says the file is longer than max.
func (w *Worktree) ReadFile(p string, max int) (content string, ok, truncated bool, err error) {
	clean, err := cleanRel(p)
	if err != nil {
		return "", false, false, err
	}
	real, err := resolveInside(w.Dir, clean)
	if err != nil {
		return "", false, false, err
	}
	f, err := os.Open(real)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, fmt.Errorf("workspace: read %s: %w", clean, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", false, false, fmt.Errorf("workspace: read %s: not a regular file", clean)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return "", false, false, fmt.Errorf("workspace: read %s: %w", clean, err)
	}
	if len(b) > max {
		return string(b[:max]), true, true, nil
	}
	return string(b), true, false, nil
}

// Diff answers what the worktree changed against HEAD, at most max bytes: git's patch of the
// tracked files, then the untracked files by name (what a failed try did, before it is rolled
// back). A scratch directory has no diff.
func (w *Worktree) Diff(ctx context.Context, max int) (string, error) {
	if w.repo == nil {
		return "", ErrNoRepository
	}
	out, err := w.git(ctx, "diff", "HEAD", "--no-renames", "--no-ext-diff", "--no-color", "--")
	if err != nil {
		return "", err
	}
	untracked, err := w.git(ctx, "ls-files", "--others", "--exclude-standard", "-z")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(out)
	for _, name := range strings.Split(strings.TrimRight(untracked, "\x00"), "\x00") {
		if name != "" {
			fmt.Fprintf(&b, "new untracked file: %s\n", name)
		}
	}
	s := b.String()
	if len(s) > max {
		s = s[:max] + fmt.Sprintf("\n[… %d more bytes of diff]\n", len(s)-max)
	}
	return strings.ToValidUTF8(s, "\uFFFD"), nil
}
