package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Knowledge from failures, end to end on the real suite: the feature loop converges (fix-F2 and
// fix-F3 made F2 and F3 pass), and what fixed them is Knowledge on export.sh, linked to the
// failure signature of iteration 1. A LATER build, whose task changes export.sh, gets it in its
// agent's prompt (the task's agent-cli writes its prompt into the repository); `converge
// knowledge` shows it with the signature, and `converge build status` shows the usage the
// executors reported, summed, beside the iterations and the criteria progress; `converge watch
// fb_…` shows the build.
func TestBuildFeatureFixBecomesKnowledgeForLaterTasks(t *testing.T) {
	t.Parallel()
	data, repo := t.TempDir(), featureLoopRepo(t)
	fixer, err := filepath.Abs(filepath.Join(featureLoop, "fixer.sh"))
	require.NoError(t, err)
	code, out, errOut := cli(t, "build", "inventory-export", featureLoopTasks, "--criteria", featureLoopCriteria, "--repo", repo,
		"--agents", "2", "--agent-cli", "sh "+fixer, "--data-dir", data)
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, out, "## Build Feature - CONVERGED ✅")

	// A later build on the same repository and data: one task on export.sh, whose agent keeps
	// its prompt in notes/prompt.md.
	dir := t.TempDir()
	agent := filepath.Join(dir, "keep-prompt.sh")
	require.NoError(t, os.WriteFile(agent, []byte("set -eu\nmkdir -p notes\ncat > notes/prompt.md\necho '# counted' >> export.sh\n"), 0o644))
	later := filepath.Join(dir, "later.md")
	require.NoError(t, os.WriteFile(later, []byte("# Tasks: export-count\n\n## Phase 1: Count\n\n### Task 1: Count the items\n\n**Status:** 🔴 TODO\n"+
		"**Files:** `export.sh` (modify), `notes/prompt.md` (create)\n\n**Context:** Print the count of items.\n\n- [ ] Count\n"), 0o644))
	criteria := filepath.Join(dir, "later-criteria.md")
	require.NoError(t, os.WriteFile(criteria, []byte("## F1: The prompt was kept\nTag: AUTO_VERIFY\n\n```check\nfile: {path: notes/prompt.md}\n```\n"), 0o644))
	code, out, errOut = cli(t, "build", "export-count", later, "--criteria", criteria, "--repo", repo, "--agents", "1", "--agent-cli", "sh "+agent,
		"--data-dir", data)
	require.Equal(t, exitOK, code, out+errOut)
	commit := gitIn(t, repo, "log", "--all", "-1", "--format=%H", "--", "notes/prompt.md")
	require.NotEmpty(t, commit, "the later task committed its prompt")
	prompt := gitIn(t, repo, "show", commit+":notes/prompt.md")
	for _, want := range []string{"Done-criterion F2 of feature inventory-export failed (failure signature", "fixed in iteration 2 by task fix-F2",
		"Done-criterion F3 of feature inventory-export failed"} {
		require.Contains(t, prompt, want)
	}

	// The suite again, as `converge dev` on the same data: the CLI's views.
	dev := setupDev(t, func(o *devOptions) { o.DataDir = data })
	fb, err := schedulerv1.NewSchedulerServiceClient(dev.conn).GetFeatureBuild(t.Context(),
		&schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_Feature{Feature: "inventory-export"}})
	require.NoError(t, err)
	sig := fb.GetFeatureBuild().GetIterations()[0].GetVerification().GetFailureSignature()
	require.NotEmpty(t, sig)
	require.Contains(t, prompt, "failure signature "+sig)

	code, out, errOut = cli(t, "knowledge", "--server", dev.addr, "--repo", repo, "--signature", sig)
	require.Equal(t, exitOK, code, out+errOut)
	for _, want := range []string{"GOTCHA on export.sh", "Failure signature: " + sig[:12] + " (criterion F2)",
		"Failure signature: " + sig[:12] + " (criterion F3)", "| Done-criterion F2 of feature inventory-export failed (failure signature " + sig} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "provisional")
	code, out, errOut = cli(t, "knowledge", "--server", dev.addr, "--repo", repo, "--file", "export.sh", "--criterion", "F3")
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, out, "(criterion F3)")
	require.NotContains(t, out, "(criterion F2)")
	code, out, _ = cli(t, "knowledge", "--server", dev.addr, "--repo", repo, "--signature", "0123456789ab")
	require.Equal(t, exitOK, code)
	require.True(t, strings.HasPrefix(out, "No knowledge items for "), out)

	// `converge watch fb_…` follows a build (here one that ended: its boot summary and its report),
	// with `converge build`'s exit status.
	code, out, errOut = cli(t, "watch", fb.GetFeatureBuild().GetId(), "--server", dev.addr)
	require.Equal(t, exitOK, code, out+errOut)
	for _, want := range []string{"## Build Feature - Boot Complete", "**Build:** " + fb.GetFeatureBuild().GetId(),
		"## Build Feature - CONVERGED ✅", "| 2 | 3/3 | Fixed F2, F3 |"} {
		require.Contains(t, out, want)
	}

	// fixer.sh reports 1250 tokens (1000 input, 250 output) and $0.01 a task: four tasks.
	code, out, errOut = cli(t, "build", "status", "inventory-export", "--server", dev.addr)
	require.Equal(t, exitOK, code, out+errOut)
	for _, want := range []string{"CONVERGED (SUCCESS)", "Iteration 2 of 5, 100% of the automatic criteria passing (3 passing, 0 failing, 0 pending of 3)",
		"Usage: 5000 tokens (4000 input, 1000 output), cost $0.040000\n", "| 1 | "} {
		require.Contains(t, out, want)
	}
}

// The build's verifying lines mark a result the validation cache reused (nothing its check reads
// changed since the previous report).
func TestCriterionMarkReused(t *testing.T) {
	t.Parallel()
	pass := &verifierv1.CriterionResult{Status: verifierv1.CriterionStatus_CRITERION_STATUS_PASS}
	require.Equal(t, "✅ PASS", criterionMark(pass, ""))
	pass.Reused = true
	require.Equal(t, "✅ PASS (reused)", criterionMark(pass, ""))
	fail := &verifierv1.CriterionResult{Status: verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, Reused: true}
	require.Equal(t, "❌ FAIL (no location column) (reused)", criterionMark(fail, "no location column"))
}
