package workspace

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// ErrOutsideRoots: a local repository (a path, or a file:// URL) resolves outside the agent's
// allowed roots (Roots), or the agent allows no local repository at all.
var ErrOutsideRoots = errors.New("outside the agent's allowed roots")

// Roots are the directories under which an agent may build in and push to local repositories.
// A task list names its repository; without roots any repository of the host the agent can
// write would be built in and pushed to (a task list naming /some/victim). A source is judged
// after resolving every symbolic link of its path, so a link inside a root that points out of it
// is refused. Remote URLs (https, ssh, git, scp-like) are not local: roots do not apply.
//
// The zero Roots (and NewRoots with no directory) allow no local repository; a nil *Roots allows
// every one (for tests and embedders that judge sources themselves).
type Roots struct {
	dirs []string // absolute, symbolic links resolved
}

// NewRoots resolves dirs (made absolute, symbolic links resolved); a directory that does not
// exist is an error: a mistyped root must not silently allow nothing.
func NewRoots(dirs []string) (*Roots, error) {
	r := &Roots{}
	for _, d := range dirs {
		if strings.TrimSpace(d) == "" {
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("workspace: allowed root %q: %w", d, err)
		}
		real, err := filepath.EvalSymlinks(abs)
		if err != nil {
			return nil, fmt.Errorf("workspace: allowed root %s: %w", abs, err)
		}
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("workspace: allowed root %s is not a directory", abs)
		}
		r.dirs = append(r.dirs, real)
	}
	return r, nil
}

// Dirs are the resolved roots.
func (r *Roots) Dirs() []string {
	if r == nil {
		return nil
	}
	return append([]string(nil), r.dirs...)
}

// Check answers nil when source may be used: a remote URL, or a local path or file:// URL that
// resolves inside a root. Otherwise the error wraps ErrOutsideRoots and names the resolved path.
func (r *Roots) Check(source string) error {
	if r == nil {
		return nil
	}
	p, local, err := LocalPath(source)
	if err != nil {
		return err
	}
	if !local {
		return nil
	}
	resolved, err := resolveExisting(p)
	if err != nil {
		return fmt.Errorf("workspace: repository %s: %w", p, err)
	}
	if len(r.dirs) == 0 {
		return fmt.Errorf("workspace: repository %s: %w: this agent allows no local repository (start it with --allowed-root)", resolved, ErrOutsideRoots)
	}
	for _, root := range r.dirs {
		if within(root, resolved) {
			return nil
		}
	}
	return fmt.Errorf("workspace: repository %s: %w (%s): give the agent --allowed-root for it, or use a repository inside one",
		resolved, ErrOutsideRoots, strings.Join(r.dirs, ", "))
}

// LocalPath answers the file system path of source when it is local (a path, or a file:// URL
// with no host or "localhost"); local is false for remote URLs.
func LocalPath(source string) (path string, local bool, err error) {
	if strings.HasPrefix(strings.ToLower(source), "file:") {
		u, err := url.Parse(source)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" {
			return "", false, fmt.Errorf("workspace: %q is not a file URL of this host: %w", source, ErrNotARepository)
		}
		return filepath.Clean(u.Path), true, nil
	}
	if isURL(source) {
		return "", false, nil
	}
	abs, err := filepath.Abs(source)
	if err != nil {
		return "", false, err
	}
	return abs, true, nil
}

// resolveExisting resolves every symbolic link of p; a path that does not exist is resolved up
// to its longest existing prefix (so that it is judged where it would be created).
func resolveExisting(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	parent := filepath.Dir(p)
	if parent == p {
		return p, nil
	}
	rp, err := resolveExisting(parent)
	if err != nil {
		return "", err
	}
	return filepath.Join(rp, filepath.Base(p)), nil
}

// within reports whether path is root or below it.
func within(root, path string) bool {
	if path == root || root == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}
