package executor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/converge-dev/converge/platform/repopath"
)

// safePath resolves the worktree-relative path rel under root and answers the absolute path to
// write. It refuses (CodeUnsafePath) a path platform/repopath refuses — absolute, a drive letter
// or '\', a "..", "." or empty segment, a ".git" segment in any case (hooks and config are code) —
// and a path whose existing part leads out of root through a symlink, dangling ones included.
// The part of rel that does not exist yet is joined as is: creating it cannot leave root.
func safePath(root, rel string) (string, error) {
	if err := repopath.Validate(rel); err != nil {
		return "", newError(CodeUnsafePath, "%q %v", rel, err)
	}
	segs := strings.Split(rel, "/")
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", newError(CodeExecutorFailed, "the worktree %s: %v", root, err)
	}
	cur := realRoot
	for i, seg := range segs {
		next := filepath.Join(cur, seg)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(append([]string{next}, segs[i+1:]...)...), nil
		}
		if err != nil {
			return "", newError(CodeExecutorFailed, "%s: %v", rel, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(next)
			if err != nil || !within(realRoot, target) {
				return "", newError(CodeUnsafePath, "%q leads out of the worktree through the symlink %s", rel, strings.Join(segs[:i+1], "/"))
			}
			next = target
		}
		cur = next
	}
	return cur, nil
}

// within reports whether path is root or inside it (both clean and absolute).
func within(root, path string) bool {
	if path == root {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}

// writeFile replaces path's content atomically: a temporary file in the same directory renamed
// over it (which replaces a symlink rather than writing through it). An existing file keeps its
// mode; a new one gets perm. Parent directories are created.
func writeFile(path string, data []byte, perm fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.IsDir() {
			return errors.New(path + " is a directory")
		}
		if fi.Mode().IsRegular() {
			perm = fi.Mode().Perm()
		}
	}
	f, err := os.CreateTemp(dir, ".converge-write-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp, perm)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
