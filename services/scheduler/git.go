package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/gitexec"
)

// The Scheduler reads a repository in three places only, all through the git CLI: it resolves
// the base ref to a commit when an execution starts (so every agent of the first wave starts from
// the same commit), it checks the run branch out for the Verifier when the Verifier cannot fetch
// it itself (a local path or a non-http(s) URL; an http(s) repository is handed to the Verifier as
// a git source at the run branch's commit: see verifyTarget), and it reads a task's commit for
// GetTaskDiff (taskdiff.go: in place, or fetched into a scratch repository).

// gitTimeout bounds each git command the Scheduler runs.
const gitTimeout = 2 * time.Minute

// repoSource is the path or URL git is given for repo.
func repoSource(repo *schedulerv1.Repository) string {
	if p := repo.GetPath(); p != "" {
		return p
	}
	return repo.GetUrl()
}

// baseRef is the ref an execution starts from: the list's base_ref, HEAD when unset.
func baseRef(repo *schedulerv1.Repository) string {
	if r := repo.GetBaseRef(); r != "" {
		return r
	}
	return "HEAD"
}

// git runs git with args and returns its trimmed standard output.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	out, err := gitexec.Cmd{Dir: dir, Args: args, Timeout: gitTimeout}.Run(ctx)
	if err != nil {
		var ge *gitexec.Error
		if errors.As(err, &ge) {
			return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), ge.Reason())
		}
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// resolveBase resolves the repository's base ref to a commit.
func resolveBase(ctx context.Context, repo *schedulerv1.Repository) (string, error) {
	ref := baseRef(repo)
	if p := repo.GetPath(); p != "" {
		sha, err := git(ctx, p, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
		if err != nil || sha == "" {
			return "", fmt.Errorf("base ref %q does not resolve to a commit in %s", ref, p)
		}
		return sha, nil
	}
	out, err := git(ctx, "", "ls-remote", "--", repo.GetUrl(), ref)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			return f[0], nil
		}
	}
	if len(ref) == 40 || len(ref) == 64 {
		return ref, nil // a commit id: ls-remote does not list it
	}
	return "", fmt.Errorf("base ref %q not found in %s", ref, repo.GetUrl())
}
