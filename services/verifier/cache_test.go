package verifier_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// The validation cache: in one loop, a command check on an unchanged tree is not run again (its
// result is the previous report's, marked reused); a changed file invalidates it. The command
// appends to a file outside the repository, so the runs are counted.
func TestVerifyCacheReusesUnchangedAndRerunsChanged(t *testing.T) {
	t.Parallel()
	repo, _ := gitRepo(t)
	url := gitServer(t, repo)
	b := setup(t, backends[1])
	runs := filepath.Join(t.TempDir(), "runs")
	set := &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
		{Id: "F1", Name: "version", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Argv: []string{"sh", "-c", "echo run >> " + runs + "; cat VERSION"},
				Expect: &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{Contains: []string{"2.0.0"}}}}}},
	}}
	verify := func() *verifierv1.CriterionResult {
		r := b.verify(t, &verifierv1.VerifyRequest{CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: set}, LoopKey: "cache", MaxAttempts: 1,
			Target: &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: url, Ref: "main"}}}})
		require.Len(t, r.GetResults(), 1)
		return r.GetResults()[0]
	}
	count := func() int {
		b, err := os.ReadFile(runs)
		require.NoError(t, err)
		return len(b) / len("run\n")
	}
	first := verify()
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_PASS, first.GetStatus())
	require.Len(t, first.GetCacheKey(), 64)
	require.False(t, first.GetReused())
	second := verify()
	require.True(t, second.GetReused(), "nothing changed: reused")
	require.Equal(t, first.GetCacheKey(), second.GetCacheKey())
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_PASS, second.GetStatus())
	require.Equal(t, 1, count(), "the check ran once")

	writeFile(t, filepath.Join(repo, "VERSION"), "3.0.0\n")
	for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", "three"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	third := verify()
	require.False(t, third.GetReused(), "a changed file invalidates it")
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, third.GetStatus())
	require.Equal(t, 2, count())
}
