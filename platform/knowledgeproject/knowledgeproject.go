// Package knowledgeproject names the Knowledge project of a repository: its identity, so that what
// is learned on one repository never reaches the prompts of another (issue 14 finding 10). The
// agents name it when they Prime and record, the Scheduler when it records what fixed a feature
// build's criterion, the CLI when it shows a repository's items: one function, so they agree.
//
//   - a clone URL: host and path, lower-case host, without scheme, credentials, port, trailing
//     "/" or ".git" ("https://u:p@GitHub.com/acme/shop.git" and "git@github.com:acme/shop" are
//     both "github.com/acme/shop");
//   - a local repository: its cleaned absolute path;
//   - no repository (a scratch task list): "tasklist:" and the task list's id.
//
// Knowledge takes at most 512 bytes without control characters: a longer or odd identity is
// named by its hash instead (the same repository, the same name).
package knowledgeproject

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"unicode"
)

// Of answers the project of a repository given by clone URL or local path (the first that is
// not empty), or of a task list without one.
func Of(cloneURL, path, taskListID string) string {
	p := identity(cloneURL, path, taskListID)
	if len(p) > 512 || strings.ContainsFunc(p, unicode.IsControl) {
		sum := sha256.Sum256([]byte(p))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return p
}

func identity(cloneURL, path, taskListID string) string {
	switch {
	case cloneURL != "":
		return URLIdentity(cloneURL)
	case path != "":
		if abs, err := filepath.Abs(path); err == nil {
			return filepath.Clean(abs)
		}
		return filepath.Clean(path)
	default:
		return "tasklist:" + taskListID
	}
}

// URLIdentity is host/path of a clone URL (see the package comment).
func URLIdentity(raw string) string {
	host, path := "", raw
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		host, path = u.Hostname(), u.Path
	} else if at, rest, ok := strings.Cut(raw, "@"); ok && !strings.Contains(at, "/") {
		// scp-like: git@host:org/repo
		host, path, _ = strings.Cut(rest, ":")
	} else if u != nil && u.Scheme == "file" {
		path = u.Path
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if host == "" {
		return path
	}
	return strings.ToLower(host) + "/" + path
}
