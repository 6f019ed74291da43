package verifier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"os/exec"
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"google.golang.org/protobuf/proto"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/report"
)

// The validation cache (ours, seed 002 part 9). It lives here, per loop, not in the Scheduler:
// the Verifier is the one that knows what a check reads, and a result is reused only from the
// loop's latest complete report (a partial one is never the verdict, so never a source). A
// command or file check's result depends on the criterion and on the files of the target it
// reads; the key is the criterion's check and, in a clean checkout:
//
//   - for a file check, the git entries (path, mode, blob) its path or glob matches: a change to
//     any other file leaves it valid;
//   - for a command check that declares the files it reads (CommandCheck.reads), the entries its
//     globs match, likewise;
//   - for any other command check, HEAD's whole tree (it may read any file).
//
// An entry matches when the glob (a path: the path) matches it or a directory above it, so a
// match that is a directory covers what is under it. A symbolic link or submodule may lead
// anywhere, so the key is the whole tree's when one is on a path's way (the path, under it or
// above it) or, for globs, anywhere in the tree. http and grpc checks depend on the running app
// and are always run.

// cacheKeys answers each criterion's cache key on dir ("" = run it): none when dir is not a
// clean git checkout.
func cacheKeys(ctx context.Context, dir string, crit []*verifierv1.Criterion) []string {
	keys := make([]string, len(crit))
	tree := cleanTree(ctx, dir)
	if tree == "" {
		return keys
	}
	var (
		entries []treeEntry
		listed  bool
	)
	for i, c := range crit {
		if c.GetCommand() == nil && c.GetFile() == nil {
			continue
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
		if err != nil {
			continue
		}
		h := sha256.New()
		h.Write(b)
		h.Write([]byte{0})
		files := false
		if r, ok := readsOf(c); ok {
			if !listed {
				entries, listed = lsTree(ctx, dir), true
			}
			if entries != nil {
				files = hashEntries(h, entries, r)
			}
		}
		if !files {
			h.Write([]byte(tree))
		}
		keys[i] = hex.EncodeToString(h.Sum(nil))
	}
	return keys
}

// reads says which files of the tree a check reads.
type reads struct {
	// match reports whether the check reads the file (or what is under the directory) name.
	match func(name string) bool
	// link reports whether a symbolic link or submodule at name may change what it reads.
	link func(name string) bool
}

// readsOf answers what c's check reads, ok false when it is not known (a command check without
// reads: the whole tree).
func readsOf(c *verifierv1.Criterion) (r reads, ok bool) {
	var globs []string
	switch {
	case c.GetFile().GetPath() != "":
		p := strings.Trim(path.Clean("/"+c.GetFile().GetPath()), "/")
		r.match = func(name string) bool { return p == "" || name == p || strings.HasPrefix(name, p+"/") }
		r.link = func(name string) bool { return r.match(name) || strings.HasPrefix(p, name+"/") }
		return r, true
	case c.GetFile() != nil:
		globs = []string{c.GetFile().GetGlob()}
	case len(c.GetCommand().GetReads()) > 0:
		globs = c.GetCommand().GetReads()
	default:
		return r, false
	}
	r.match = func(name string) bool {
		for _, g := range globs {
			// The name and each directory above it.
			for p := name; p != "" && p != "."; p = path.Dir(p) {
				if ok, err := doublestar.Match(g, p); err == nil && ok {
					return true
				}
			}
		}
		return false
	}
	r.link = func(string) bool { return true }
	return r, true
}

// treeEntry is one file of HEAD's tree.
type treeEntry struct{ mode, oid, path string }

// hashEntries writes the entries r reads into h: false (nothing written) when a symbolic link
// or a submodule may change what it reads.
func hashEntries(h hash.Hash, entries []treeEntry, r reads) bool {
	var sel []treeEntry
	for _, e := range entries {
		if e.mode == "120000" || e.mode == "160000" {
			if r.link(e.path) {
				return false
			}
			continue
		}
		if r.match(e.path) {
			sel = append(sel, e)
		}
	}
	h.Write([]byte("files\x00"))
	for _, e := range sel {
		h.Write([]byte(e.path + "\x00" + e.mode + " " + e.oid + "\x00"))
	}
	return true
}

// lsTree answers the files of HEAD's tree in dir, nil when git cannot list them.
func lsTree(ctx context.Context, dir string) []treeEntry {
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "ls-tree", "-r", "-z", "--full-tree", "HEAD").Output()
	if err != nil {
		return nil
	}
	entries := []treeEntry{}
	for _, rec := range strings.Split(string(out), "\x00") {
		meta, name, ok := strings.Cut(rec, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta) // mode type oid
		if len(f) != 3 {
			continue
		}
		entries = append(entries, treeEntry{mode: f[0], oid: f[2], path: name})
	}
	return entries
}

// cleanTree answers HEAD's tree of the git checkout dir, "" when dir is not one or has changes
// (tracked or untracked) that the tree does not hold.
func cleanTree(ctx context.Context, dir string) string {
	if dir == "" {
		return ""
	}
	git := func(args ...string) (string, bool) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err == nil
	}
	if st, ok := git("status", "--porcelain", "--untracked-files=all"); !ok || st != "" {
		return ""
	}
	tree, ok := git("rev-parse", "HEAD^{tree}")
	if !ok {
		return ""
	}
	return tree
}

// cachedResult is a reusable result of the loop's latest complete report, with its failure's
// location.
type cachedResult struct {
	result *verifierv1.CriterionResult
	loc    report.Location
}

// cachedResults answers the reusable (PASS or FAIL, keyed) results of loopKey's latest complete
// report by criterion id.
func (s *Server) cachedResults(ctx context.Context, loopKey string) map[string]cachedResult {
	out := map[string]cachedResult{}
	latest, err := s.store.LatestReports(ctx, loopKey, 1)
	if err != nil || len(latest) == 0 {
		return out
	}
	r := latest[0]
	locs := map[string]report.Location{}
	for _, f := range r.GetFailures() {
		locs[f.GetCriterionId()] = report.Location{File: f.GetFile(), Line: f.GetLine()}
	}
	for _, res := range r.GetResults() {
		st := res.GetStatus()
		if res.GetCacheKey() != "" && (st == verifierv1.CriterionStatus_CRITERION_STATUS_PASS || st == verifierv1.CriterionStatus_CRITERION_STATUS_FAIL) {
			out[res.GetCriterionId()] = cachedResult{result: res, loc: locs[res.GetCriterionId()]}
		}
	}
	return out
}

// reuse answers the cached result for c under key, marked reused, or nil.
func reuse(cached map[string]cachedResult, c *verifierv1.Criterion, key string) (*verifierv1.CriterionResult, report.Location, bool) {
	hit, ok := cached[c.GetId()]
	if key == "" || !ok || hit.result.GetCacheKey() != key {
		return nil, report.Location{}, false
	}
	r := proto.CloneOf(hit.result)
	r.Reused = true
	return r, hit.loc, true
}
