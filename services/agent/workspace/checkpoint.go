package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/converge-dev/converge/platform/repopath"
)

// FileHash is the state of one file in a Checkpoint.
type FileHash struct {
	// Path is the clean, slash-separated repository-relative path.
	Path string
	// SHA256 is the hex sha256 of the file's content (through symbolic links that stay inside
	// the worktree); empty when the file does not exist.
	SHA256 string
	// Exists is false for a path with no file.
	Exists bool
}

// Checkpoint is what a worktree can be rolled back to: the HEAD commit and the hashes of the
// task's files at that moment (DESIGN §5, the checkpoints table).
type Checkpoint struct {
	// Commit is HEAD's sha; empty for a scratch directory.
	Commit string
	// Files are the checkpointed paths in the order given.
	Files []FileHash
}

// cleanRel checks a caller's repository-relative path and returns its clean slash form. It
// refuses empty, absolute and drive paths, any ".." element, any ".git" element and the root.
func cleanRel(p string) (string, error) {
	c, err := repopath.Clean(p)
	if err != nil {
		return "", fmt.Errorf("workspace: %w: %w", err, ErrUnsafePath)
	}
	return c, nil
}

// maxLinks bounds symbolic link resolution, as the kernel does.
const maxLinks = 40

// resolveInside resolves rel (clean, slash-separated) below dir following symbolic links one
// element at a time, and returns the real path it names. A link that leads out of dir is
// ErrUnsafePath. Elements that do not exist are kept as they are.
func resolveInside(dir, rel string) (string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	given := filepath.Clean(dir)
	cur := root
	pending := strings.Split(rel, "/")
	links := 0
	for len(pending) > 0 {
		el := pending[0]
		pending = pending[1:]
		switch el {
		case "", ".":
			continue
		case "..":
			if cur == root {
				return "", fmt.Errorf("workspace: path %q leaves the worktree through a symbolic link: %w", rel, ErrUnsafePath)
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, el)
		fi, err := os.Lstat(next)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
				cur = next
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("workspace: path %q: too many symbolic links", rel)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			t := filepath.Clean(target)
			inner, ok := below(root, t)
			if !ok {
				inner, ok = below(given, t)
			}
			if !ok {
				return "", fmt.Errorf("workspace: path %q leaves the worktree through a symbolic link: %w", rel, ErrUnsafePath)
			}
			cur = root
			target = inner
		}
		pending = append(strings.Split(filepath.ToSlash(target), "/"), pending...)
	}
	return cur, nil
}

// below returns p relative to dir when p is dir or inside it.
func below(dir, p string) (string, bool) {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// hashPath checks p and hashes the file it names in dir.
func hashPath(dir, p string) (FileHash, error) {
	clean, err := cleanRel(p)
	if err != nil {
		return FileHash{}, err
	}
	real, err := resolveInside(dir, clean)
	if err != nil {
		return FileHash{}, err
	}
	f, err := os.Open(real)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return FileHash{Path: clean}, nil
	}
	if err != nil {
		return FileHash{}, fmt.Errorf("workspace: hash %s: %w", clean, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return FileHash{}, fmt.Errorf("workspace: hash %s: %w", clean, err)
	} else if !fi.Mode().IsRegular() {
		return FileHash{}, fmt.Errorf("workspace: hash %s: not a regular file (%s)", clean, fi.Mode().Type())
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return FileHash{}, fmt.Errorf("workspace: hash %s: %w", clean, err)
	}
	return FileHash{Path: clean, SHA256: hex.EncodeToString(h.Sum(nil)), Exists: true}, nil
}

// Checkpoint records HEAD and the hashes of paths (repository-relative files; a missing file is
// recorded with Exists false). An absolute path, a ".." or ".git" element, or a symbolic link
// out of the worktree is an error wrapping ErrUnsafePath; a directory is an error. On a
// scratch directory Commit is empty and only the hashes are recorded; on one marked Empty every
// path is recorded absent.
func (w *Worktree) Checkpoint(ctx context.Context, paths []string) (Checkpoint, error) {
	var cp Checkpoint
	if w.repo != nil {
		head, err := w.Head(ctx)
		if err != nil {
			return Checkpoint{}, err
		}
		cp.Commit = head
	}
	cp.Files = make([]FileHash, 0, len(paths))
	empty := w.Empty && w.repo == nil
	w.Empty = false
	for _, p := range paths {
		if empty {
			clean, err := cleanRel(p)
			if err != nil {
				return Checkpoint{}, err
			}
			cp.Files = append(cp.Files, FileHash{Path: clean})
			continue
		}
		fh, err := hashPath(w.Dir, p)
		if err != nil {
			return Checkpoint{}, err
		}
		cp.Files = append(cp.Files, fh)
	}
	return cp, nil
}

// Restore rolls the worktree back to cp: git reset --hard cp.Commit, then git clean -ffd
// (untracked files and directories go, nested repositories included; ignored files such as
// build caches stay). Only this worktree is touched. It then re-hashes cp.Files and returns an
// error wrapping ErrCheckpointMismatch naming any file that differs, which happens only when the
// checkpoint was taken with uncommitted changes to it. A scratch directory starts empty, and
// is emptied again: everything in it is deleted, and a file cp records as existing is then a
// mismatch.
func (w *Worktree) Restore(ctx context.Context, cp Checkpoint) error {
	sha := "an empty directory"
	if w.repo == nil {
		entries, err := os.ReadDir(w.Dir)
		if err != nil {
			return fmt.Errorf("workspace: restore: %w", err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(w.Dir, e.Name())); err != nil {
				return fmt.Errorf("workspace: restore: %w", err)
			}
		}
	} else {
		var err error
		if sha, err = revParseCommit(ctx, w.cmd(), cp.Commit); err != nil {
			return fmt.Errorf("workspace: restore: %w", err)
		}
		if _, err := w.git(ctx, "reset", "--quiet", "--hard", sha, "--"); err != nil {
			return fmt.Errorf("workspace: restore: %w", err)
		}
		if _, err := w.git(ctx, "clean", "-ffdq"); err != nil {
			return fmt.Errorf("workspace: restore: %w", err)
		}
	}
	var differ []string
	for _, want := range cp.Files {
		got, err := hashPath(w.Dir, want.Path)
		if err != nil {
			return fmt.Errorf("workspace: restore: %w", err)
		}
		if got.Exists != want.Exists || got.SHA256 != want.SHA256 {
			differ = append(differ, want.Path)
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("workspace: restore to %s: %s: %w", sha, strings.Join(differ, ", "), ErrCheckpointMismatch)
	}
	return nil
}
