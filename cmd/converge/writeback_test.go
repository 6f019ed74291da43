package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// Issue 15 part 8 (and 14): converge run of a tasks.md writes each task's status back into it by
// precise edits, and the tracking table at its end; every other byte is the example's. A re-run
// of the updated file has nothing left to run; `converge status` shows the tracking table.
func TestRunWritesBackTasksMD(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents, o.AgentDrainTimeout = true, 3, 5*time.Second })
	repo := greeterCopy(t)
	original, err := os.ReadFile(greeterTasks)
	require.NoError(t, err)
	tasks := filepath.Join(t.TempDir(), "tasks.md")
	require.NoError(t, os.WriteFile(tasks, original, 0o640))

	code, out, errOut := cli(t, "run", tasks, "--server", b.addr, "--repo", repo, "--criteria", greeterCriteria)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	id := regexp.MustCompile(`ex_[0-9A-Z]+`).FindString(out)

	got, err := os.ReadFile(tasks)
	require.NoError(t, err)
	fi, err := os.Stat(tasks)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm(), "the file keeps its mode")
	// Up to the tracking table: the example with every marker DONE and every step checked.
	want := strings.ReplaceAll(strings.ReplaceAll(string(original), "**Status:** 🔴 TODO", "**Status:** 🟢 DONE"), "- [ ] ", "- [x] ")
	require.Equal(t, want, string(got[:len(want)]))
	table := string(got[len(want):])
	require.True(t, strings.HasPrefix(table, "\n"+tasklist.TrackingHeading+"\n\nExecution "+id+" (run 1), written by converge run: COMPLETED, outcome CONVERGED — 6/6 completed, 0 failed, 0 skipped.\n\n"), table)
	require.Regexp(t, "(?m)^\\| 1\\.3 \\| Greeting tests \\| 🟢 DONE \\| 2 \\| `[0-9a-f]{12}` \\|  \\|$", table)
	require.Equal(t, 6, strings.Count(table, "🟢 DONE"))
	doc, err := tasklist.ParseTasksMD(got)
	require.NoError(t, err)
	require.Empty(t, doc.Warnings)

	// converge status shows the same table.
	code, out, errOut = cli(t, "status", id, "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `TASK\s+STATUS\s+TRIES\s+COMMIT\s+TITLE / NOTE`, out)
	require.Regexp(t, `(?m)^1\.3\s+🟢 DONE\s+2\s+[0-9a-f]{12}\s+Greeting tests$`, out)

	// Run again: every task is DONE, so nothing runs and the file is left as it is.
	code, _, errOut = cli(t, "run", tasks, "--server", b.addr, "--repo", repo, "--criteria", greeterCriteria)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "already completed or skipped: nothing to run")
	again, err := os.ReadFile(tasks)
	require.NoError(t, err)
	require.Equal(t, string(got), string(again))

	// --no-write-back leaves the file alone.
	fresh := filepath.Join(t.TempDir(), "tasks.md")
	require.NoError(t, os.WriteFile(fresh, original, 0o644))
	code, out, errOut = cli(t, "run", fresh, "--server", b.addr, "--repo", greeterCopy(t), "--criteria", greeterCriteria, "--no-write-back")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	untouched, err := os.ReadFile(fresh)
	require.NoError(t, err)
	require.Equal(t, string(original), string(untouched))
}

// Issue 15 part 14: --resume continues a failed run as a RETRY of its list (its completed task is
// not run again) and writes back into the tasks.md given; the usage text names --format plan.
func TestRunResumeContinuesAFailedRun(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents, o.AgentDrainTimeout = true, 2, 5*time.Second })
	repo := greeterCopy(t)
	gate := filepath.Join(t.TempDir(), "ready")
	tasks := filepath.Join(t.TempDir(), "tasks.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# Tasks: resume\n\n### Task 1.1: First\n\n**Status:** 🔴 TODO\n**File:** `one.txt`\n**Command:** `echo one > one.txt`\n\n"+
		"### Task 1.2: Second\n\n**Status:** 🔴 TODO\n**File:** `two.txt`\n**Depends on:** 1.1\n**Command:** `test -f "+gate+" && echo two > two.txt`\n"), 0o644))

	code, out, errOut := cli(t, "run", tasks, "--server", b.addr, "--repo", repo, "--max-retries", "0")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	first := regexp.MustCompile(`ex_[0-9A-Z]+`).FindString(out)
	got, err := os.ReadFile(tasks)
	require.NoError(t, err)
	require.Contains(t, string(got), "### Task 1.1: First\n\n**Status:** 🟢 DONE\n")
	require.Contains(t, string(got), "### Task 1.2: Second\n\n**Status:** ❌ FAILED\n")

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	code, out, errOut = cli(t, "run", "--resume", first, tasks, "--server", b.addr)
	require.NotEqual(t, exitUsage, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, first+" ended FAILED: ")
	require.Contains(t, out, "run 2 of \"Tasks: resume\": 1 task in 1 wave\n", "the completed task is not run again")
	got, err = os.ReadFile(tasks)
	require.NoError(t, err)
	require.Contains(t, string(got), "### Task 1.2: Second\n\n**Status:** 🟢 DONE\n")
	require.Equal(t, 1, strings.Count(string(got), tasklist.TrackingHeading))

	code, _, errOut = cli(t, "run", "--resume", first)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give --server (a deployment) or the --data-dir it ran with")
	require.Contains(t, runCommand().Use, "execution-plan.md")
	require.Contains(t, runCommand().Long, "plan for a 07-build execution plan")
}
