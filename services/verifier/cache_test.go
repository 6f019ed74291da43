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

	commitFile(t, repo, "VERSION", "3.0.0\n")
	third := verify()
	require.False(t, third.GetReused(), "a changed file invalidates it")
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, third.GetStatus())
	require.Equal(t, 2, count())
}

// commitFile writes name in the git repository repo and commits it.
func commitFile(t *testing.T, repo, name, content string) {
	t.Helper()
	writeFile(t, filepath.Join(repo, name), content)
	for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", "change " + name}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
}

// The cache keys a check on the files it reads when they are known: a file check's path or glob,
// a command check's declared reads. A commit that changes an unrelated file leaves those results
// reused, while the command check that declares nothing (it may read any file) runs again; a
// commit that changes a file they read invalidates them. Each command counts its runs in a file
// outside the repository.
func TestVerifyCachePerFiles(t *testing.T) {
	t.Parallel()
	repo, _ := gitRepo(t) // VERSION (2.0.0) and svc/main.go
	url := gitServer(t, repo)
	b := setup(t, backends[0])
	runs := t.TempDir()
	counting := func(name, shell string) string { return "echo run >> " + filepath.Join(runs, name) + "; " + shell }
	auto := verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY
	set := &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
		{Id: "R1", Name: "reads VERSION", Tag: auto, Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{
			Shell: counting("R1", "grep -q 2.0.0 VERSION"), Reads: []string{"VERSION"}}}},
		{Id: "R2", Name: "reads svc", Tag: auto, Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{
			Shell: counting("R2", "grep -q main svc/main.go"), Reads: []string{"svc/**/*.go"}}}},
		{Id: "T1", Name: "reads anything", Tag: auto, Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{
			Shell: counting("T1", "cat VERSION")}}},
		{Id: "P1", Name: "VERSION file", Tag: auto, Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{
			Target: &verifierv1.FileCheck_Path{Path: "VERSION"}, Expect: &verifierv1.FileExpectation{Content: &verifierv1.TextExpectation{Contains: []string{"2.0.0"}}}}}},
		{Id: "G1", Name: "Go files", Tag: auto, Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{
			Target: &verifierv1.FileCheck_Glob{Glob: "svc/*.go"}, Expect: &verifierv1.FileExpectation{Content: &verifierv1.TextExpectation{NotContains: []string{"TODO"}}}}}},
	}}
	verify := func() map[string]*verifierv1.CriterionResult {
		r := b.verify(t, &verifierv1.VerifyRequest{CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: set}, LoopKey: "per-files", MaxAttempts: 1,
			Target: &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: url, Ref: "main"}}}})
		out := map[string]*verifierv1.CriterionResult{}
		for _, res := range r.GetResults() {
			out[res.GetCriterionId()] = res
		}
		return out
	}
	count := func(name string) int {
		b, err := os.ReadFile(filepath.Join(runs, name))
		require.NoError(t, err)
		return len(b) / len("run\n")
	}
	reused := func(res map[string]*verifierv1.CriterionResult) (ids []string) {
		for _, id := range []string{"R1", "R2", "T1", "P1", "G1"} {
			if res[id].GetReused() {
				ids = append(ids, id)
			}
		}
		return ids
	}
	pass := verifierv1.CriterionStatus_CRITERION_STATUS_PASS

	first := verify()
	require.Empty(t, reused(first))
	for id, r := range first {
		require.Equal(t, pass, r.GetStatus(), "%s: %v", id, r)
		require.Len(t, r.GetCacheKey(), 64, id)
	}
	require.Equal(t, []string{"R1", "R2", "T1", "P1", "G1"}, reused(verify()), "nothing changed: all reused")

	// An unrelated file: only the check that may read anything runs again.
	commitFile(t, repo, "NOTES.md", "unrelated\n")
	second := verify()
	require.Equal(t, []string{"R1", "R2", "P1", "G1"}, reused(second))
	require.Equal(t, first["R1"].GetCacheKey(), second["R1"].GetCacheKey())
	require.NotEqual(t, first["T1"].GetCacheKey(), second["T1"].GetCacheKey())
	require.Equal(t, []int{1, 1, 2}, []int{count("R1"), count("R2"), count("T1")})

	// A new Go file under svc/ is read by R2's glob and G1's: they run again, the VERSION ones not.
	commitFile(t, repo, "svc/util.go", "package main // TODO\n")
	third := verify()
	require.Equal(t, []string{"R1", "P1"}, reused(third))
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, third["G1"].GetStatus(), "the new file has a TODO")
	require.Equal(t, []int{1, 2, 3}, []int{count("R1"), count("R2"), count("T1")})

	// VERSION changes: what reads it runs again and now fails.
	commitFile(t, repo, "VERSION", "3.0.0\n")
	fourth := verify()
	require.Equal(t, []string{"R2", "G1"}, reused(fourth))
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, fourth["G1"].GetStatus(), "a reused failure stays a failure")
	for _, id := range []string{"R1", "P1"} {
		require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, fourth[id].GetStatus(), id)
	}
	require.Equal(t, []int{2, 2, 4}, []int{count("R1"), count("R2"), count("T1")})
}
