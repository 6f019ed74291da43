package verifier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"strings"

	"google.golang.org/protobuf/proto"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/report"
)

// The validation cache (ours, seed 002 part 9). It lives here, per loop, not in the Scheduler:
// the Verifier is the one that knows what a check reads, and a result is reused only from the
// loop's latest complete report (a partial one is never the verdict, so never a source). A
// command or file check's result depends on the criterion and on the files of the target; the
// key is the criterion's check and the git tree of a clean checkout (the whole tree: a command
// may read any file, so per-file keys would not be sound). http and grpc checks depend on the
// running app and are always run.

// cacheKeys answers each criterion's cache key on dir ("" = run it): none when dir is not a
// clean git checkout.
func cacheKeys(ctx context.Context, dir string, crit []*verifierv1.Criterion) []string {
	keys := make([]string, len(crit))
	tree := cleanTree(ctx, dir)
	if tree == "" {
		return keys
	}
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
		h.Write([]byte(tree))
		keys[i] = hex.EncodeToString(h.Sum(nil))
	}
	return keys
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
