package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/clustertest"
)

// stopRulesRun runs examples/stop-rules/<name>.md (a copy) with converge run in-process and
// answers the execution as the JSON summary shows it, and the task list as written back.
func stopRulesRun(t *testing.T, name string, o runOptions) (map[string]any, string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "stop-rules", name+".md"))
	require.NoError(t, err)
	tasks := filepath.Join(t.TempDir(), "tasks.md")
	require.NoError(t, os.WriteFile(tasks, src, 0o644))
	o.TasksFile, o.Repo, o.JSON, o.DataDir = tasks, clustertest.GitRepo(t), true, t.TempDir()
	var out, errOut bytes.Buffer
	err = runRun(context.Background(), o, runEnv{stdout: &out, stderr: &errOut, rerun: "converge run"})
	var ee exitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", errOut.String())
	require.Equal(t, exitFailure, ee.code)
	var sum struct {
		Execution map[string]any `json:"execution"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &sum), out.String())
	written, err := os.ReadFile(tasks)
	require.NoError(t, err)
	return sum.Execution, string(written)
}

// Issue 15 (done when): examples/stop-rules shows, with converge run, a run ending FAILED by
// max_failed_tasks and one ending FAILED by a critical phase. Each failing task is one failed
// task (not one per try), so the rules are reached before any agent counts as STUCK.
func TestStopRulesExamples(t *testing.T) {
	t.Parallel()
	t.Run("max_failed_tasks", func(t *testing.T) {
		t.Parallel()
		one, zero := 1, 0
		ex, doc := stopRulesRun(t, "max-failed-tasks", runOptions{Agents: 2, MaxFailedTasks: &one, MaxRetries: &zero})
		require.Equal(t, "EXECUTION_STATUS_FAILED", ex["status"])
		require.Equal(t, "OUTCOME_FAILED", ex["outcome"])
		require.Equal(t, "2 failed tasks (more than 1)", ex["status_message"])
		require.Contains(t, doc, "### Task 1.2: Always fails\n\n**Status:** ❌ FAILED\n")
		require.Contains(t, doc, "### Task 1.3: Always fails too\n\n**Status:** ❌ FAILED\n")
		require.Contains(t, doc, "### Task 2.1: Needs everything\n\n**Status:** 🔴 TODO\n", "wave 2 never started")
	})
	t.Run("critical phase", func(t *testing.T) {
		t.Parallel()
		zero := 0
		ex, doc := stopRulesRun(t, "critical-phase", runOptions{Agents: 1, MaxRetries: &zero})
		require.Equal(t, "EXECUTION_STATUS_FAILED", ex["status"])
		require.Equal(t, "OUTCOME_FAILED", ex["outcome"])
		require.Equal(t, "critical phase Database failed: task 1.1", ex["status_message"])
		require.Contains(t, doc, "### Task 1.1: Migrate the schema\n\n**Status:** ❌ FAILED\n")
		require.Contains(t, doc, "### Task 2.1: Routes\n\n**Status:** 🔴 TODO\n")
	})
}
