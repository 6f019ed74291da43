package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The example of examples/feature-loop, from this package's directory.
const (
	featureLoop         = "../../examples/feature-loop"
	featureLoopTasks    = featureLoop + "/tasks.md"
	featureLoopCriteria = featureLoop + "/done-criteria.md"
)

// featureLoopRepo copies the example's starting point to a new git repository.
func featureLoopRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "inventory")
	require.NoError(t, os.CopyFS(dir, os.DirFS(featureLoop+"/repo")))
	gitIn(t, dir, "init", "-q")
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "inventory: the starting point")
	return dir
}

// buildFeature runs `converge build inventory-export` on a fresh copy of the example with the
// scripted agent (fixer.sh, or one of its misbehaving names) and answers the exit code and output.
func buildFeature(t *testing.T, fixer string, extra ...string) (int, string) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(featureLoop, fixer))
	require.NoError(t, err)
	args := append([]string{"build", "inventory-export", featureLoopTasks, "--criteria", featureLoopCriteria,
		"--repo", featureLoopRepo(t), "--agents", "2", "--agent-cli", "sh " + script}, extra...)
	code, out, errOut := cli(t, args...)
	return code, out + errOut
}

// The feature loop of the seed: iteration 1 builds the list and leaves F2 and F3 failing; the fix
// tasks of iteration 2 (fixer.sh through the agent-cli executor, reading their prompts) make them
// pass: CONVERGED in 2 iterations with the success report, exit 0.
func TestBuildFeatureLoopConvergesInTwoIterations(t *testing.T) {
	t.Parallel()
	code, out := buildFeature(t, "fixer.sh")
	require.Equal(t, exitOK, code, out)
	for _, want := range []string{
		"## Build Feature - Iteration 1 of 5", "### Building", "### Verifying",
		"- F1: The export prints the CSV header... ✅ PASS", "- F2: The export has the location column... ❌ FAIL",
		"**Verdict:** FAILED (2 remaining)", "**Progress:** 1/3 criteria passing (was 0/3)", "### Continuing to iteration 2...",
		"## Build Feature - Iteration 2 of 5", "Task fix-F2: Fix F2", "Task fix-F3: Fix F3",
		"**Progress:** 3/3 criteria passing (was 1/3)",
		"## Build Feature - CONVERGED ✅", "**Iterations:** 2 of 5", "| 1 | 1/3 | Initial build |", "| 2 | 3/3 | Fixed F2, F3 |", "### Next Steps",
	} {
		require.Contains(t, out, want)
	}
}

// An oscillating fixer (F2 fails, then F3, then F2 again: A → B → A) ends ESCALATED STUCK with the
// escalation report, exit 1. Autonomous, so that the regressions on the way do not stop it first.
func TestBuildFeatureLoopOscillatingIsStuck(t *testing.T) {
	t.Parallel()
	code, out := buildFeature(t, "oscillating.sh", "--autonomy", "autonomous")
	require.Equal(t, exitFailure, code, out)
	for _, want := range []string{"## Build Feature - Iteration 3 of 5", "## Build Feature - ESCALATED", "Stuck pattern detected",
		"### Iteration Summary", "### Stuck Point", "### Recommended Human Action", "converge build inventory-export --resume"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "Iteration 4 of 5")
}

// A fixer that breaks a passing criterion ends ESCALATED REGRESSION naming it, exit 1.
func TestBuildFeatureLoopRegressionStops(t *testing.T) {
	t.Parallel()
	code, out := buildFeature(t, "regressing.sh")
	require.Equal(t, exitFailure, code, out)
	// Caught at the wave that caused it: fix-F2 ran in wave 1 of iteration 2, fix-F3 (wave 2) never ran.
	require.Contains(t, out, "**Reason:** Regression detected: F1 passed in iteration 1 and fail after wave 1 of iteration 2")
	require.Contains(t, out, "| 2 | FAILED | 0/3 passing |") // the partial re-verification of F1: it failed
	require.Equal(t, 1, strings.Count(out, "## Build Feature - Boot Complete"))
	require.NotContains(t, out, "Iteration 3 of 5")
}

// The usage fixer.sh reports (its converge-usage line: 1250 tokens a task) passes --max-tokens
// after iteration 1: ESCALATED with exit reason BUDGET and the figures, exit 1, no iteration 2.
func TestBuildFeatureLoopTokenBudgetStops(t *testing.T) {
	t.Parallel()
	code, out := buildFeature(t, "fixer.sh", "--max-tokens", "2000")
	require.Equal(t, exitFailure, code, out)
	require.Contains(t, out, "## Build Feature - ESCALATED")
	require.Contains(t, out, "**Reason:** Budget spent: 2500 tokens (2000 input, 500 output) of max_tokens 2000 after 1 iterations")
	require.NotContains(t, out, "Iteration 2 of 5")
}

// A dry run plans and parses, and builds and stores nothing.
func TestBuildFeatureDryRun(t *testing.T) {
	t.Parallel()
	code, out := buildFeature(t, "fixer.sh", "--dry-run")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "**Criteria loaded:** 3 total")
	require.Contains(t, out, "- wave 1: 1, 2")
	require.Contains(t, out, "Nothing was built or stored (--dry-run).")
	require.NotContains(t, out, "Iteration 1 of")
}

// A scope guard stops the build BLOCKED with the seed's §15.3 report (iteration 1 changes
// export.sh, which needs a person's confirmation); --resume with the path confirmed continues the
// same build from its last iteration and converges (resume_count 1).
func TestBuildFeatureScopeGuardBlocksThenResumeConverges(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	script, err := filepath.Abs(filepath.Join(featureLoop, "fixer.sh"))
	require.NoError(t, err)
	repo := featureLoopRepo(t)
	code, out, errOut := cli(t, "build", "inventory-export", featureLoopTasks, "--criteria", featureLoopCriteria, "--repo", repo,
		"--agents", "2", "--agent-cli", "sh "+script, "--data-dir", data, "--confirm-required", "export.sh")
	require.Equal(t, exitFailure, code, out+errOut)
	for _, want := range []string{"## Scope Guard Triggered", "**Attempted action:** Modify export.sh: it matches the confirm-required glob \"export.sh\"",
		"**Guard:** confirm-required", "**Choosing:** EXIT for human intervention", "converge build inventory-export --resume"} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "Iteration 2 of")

	code, out, errOut = cli(t, "build", "inventory-export", "--resume", "--data-dir", data, "--repo", repo,
		"--confirm-required", "export.sh", "--confirm", "export.sh")
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, out, "**Resuming:** Yes")
	require.Contains(t, out, "## Build Feature - Iteration 2 of 5")
	require.Contains(t, out, "## Build Feature - CONVERGED ✅")
	require.Contains(t, out, "- Created: export.sh")
	require.Contains(t, out, "(was 1/3)")

	code, out, errOut = cli(t, "build", "inventory-export", "--resume", "--data-dir", data, "--repo", repo)
	require.Equal(t, exitFailure, code)
	require.Contains(t, out+errOut, "already converged")

	// The guard that stopped iteration 1 is on its execution's event stream.
	dev := setupDev(t, func(o *devOptions) { o.DataDir = data })
	client := schedulerv1.NewSchedulerServiceClient(dev.conn)
	fb, err := client.GetFeatureBuild(t.Context(), &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_Feature{Feature: "inventory-export"}})
	require.NoError(t, err)
	log, err := client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: fb.GetFeatureBuild().GetIterations()[0].GetExecutionId(), Limit: 500})
	require.NoError(t, err)
	var guards []string
	for _, e := range log.GetEntries() {
		if strings.HasPrefix(e.GetMessage(), "Build Feature - scope guard ") {
			guards = append(guards, e.GetMessage())
		}
	}
	require.Equal(t, []string{`Build Feature - scope guard confirm-required: Modify export.sh: it matches the confirm-required glob "export.sh" and no person confirmed it`}, guards)
}

// The app under test never gets ready (its start command waits for a file a person has not made
// yet): three attempts, each in the recovery log, then BLOCKED with the log in the report. Once
// the blocker is removed, --resume verifies again (nothing left to build), then fixes F2 and F3:
// CONVERGED.
func TestBuildFeatureNeverReadyAppBlocksThenResumeConverges(t *testing.T) {
	t.Parallel()
	data, gate := t.TempDir(), filepath.Join(t.TempDir(), "allow")
	repo := featureLoopRepo(t)
	script, err := filepath.Abs(filepath.Join(featureLoop, "fixer.sh"))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	start := fmt.Sprintf("if test -f %s; then exec python3 -m http.server %d --bind 127.0.0.1; else exec sleep 30; fi", gate, port)
	ready := fmt.Sprintf("http://127.0.0.1:%d/", port)
	args := []string{"build", "inventory-export", featureLoopTasks, "--criteria", featureLoopCriteria, "--repo", repo, "--agents", "2",
		"--agent-cli", "sh " + script, "--data-dir", data, "--app-start", start, "--app-ready", ready, "--app-timeout", "3s"} // python starts slowly on a loaded machine
	code, out, errOut := cli(t, args...)
	require.Equal(t, exitFailure, code, out+errOut)
	for _, want := range []string{"## Build Feature - BLOCKED", "recovery exhausted: the app did not become ready in 3 attempts",
		"### Recovery Log", "| App not running | start: " + start + " | Failed: not ready within 3s |", "converge build inventory-export --resume"} {
		require.Contains(t, out, want)
	}

	// A person removes the blocker and resumes, giving the app the time a loaded machine needs to
	// start Python (1 s was the point of the first run, not of this one).
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	code, out, errOut = cli(t, "build", "inventory-export", "--resume", "--data-dir", data, "--repo", repo,
		"--app-start", start, "--app-ready", ready, "--app-timeout", "60s")
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, out, "## Build Feature - CONVERGED ✅")
	require.Contains(t, out, "| 3 | 3/3 | Fixed F2, F3 |")
}

// A port held by a process converge did not start ends the build BLOCKED naming the port; the
// process is left alone.
func TestBuildFeatureForeignPortBlocks(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	code, out := buildFeature(t, "fixer.sh", "--app-start", "sleep 30", "--app-ready", fmt.Sprintf("http://127.0.0.1:%d/healthz", port), "--app-timeout", "1s")
	require.Equal(t, exitFailure, code, out)
	require.Contains(t, out, fmt.Sprintf("port %d is in use by a process converge did not start", port))
	require.Contains(t, out, fmt.Sprintf("| Port %d in use | none: the process holding it was not started by converge, and converge never kills one | Blocked |", port))
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err, "the foreign process still listens")
	require.NoError(t, c.Close())
}
