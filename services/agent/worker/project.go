package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"unicode"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// projectOf is the Knowledge project of an assignment: its repository's identity, so that what
// is learned on one repository never reaches the prompts of another (issue 14 finding 10).
//
//   - a clone URL: host and path, lower-case host, without scheme, credentials, port, trailing
//     "/" or ".git" ("https://u:p@GitHub.com/acme/shop.git" and "git@github.com:acme/shop" are
//     both "github.com/acme/shop");
//   - a local repository: its cleaned absolute path;
//   - no repository (a scratch task list): "tasklist:" and the task list's id.
func projectOf(ca *schedulerv1.ClaimedAssignment) string {
	p := repositoryIdentity(ca)
	// Knowledge takes at most 512 bytes without control characters: a longer or odd identity
	// is named by its hash instead (the same repository, the same name).
	if len(p) > 512 || strings.ContainsFunc(p, unicode.IsControl) {
		sum := sha256.Sum256([]byte(p))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return p
}

// repositoryIdentity is the identity projectOf names (see there).
func repositoryIdentity(ca *schedulerv1.ClaimedAssignment) string {
	repo := ca.GetRepository()
	switch {
	case repo.GetUrl() != "":
		return urlIdentity(repo.GetUrl())
	case repo.GetPath() != "":
		if abs, err := filepath.Abs(repo.GetPath()); err == nil {
			return filepath.Clean(abs)
		}
		return filepath.Clean(repo.GetPath())
	default:
		return "tasklist:" + ca.GetTaskListId()
	}
}

// urlIdentity is host/path of a clone URL (see projectOf).
func urlIdentity(raw string) string {
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
