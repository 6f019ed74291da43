package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Issue 15 part 13, as a new user meets it: a run whose done-criteria hold a HUMAN_VERIFY
// criterion ends CONVERGED_PENDING_HUMAN; `converge signoff` records the PASS with the real
// Verifier and the Scheduler moves the execution to CONVERGED, which `converge status` shows.
func TestSignoffReachesTheRun(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents, o.AgentDrainTimeout = true, 1, 5*time.Second })
	repo := greeterCopy(t)
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# Tasks: signed\n\n### Task 1.1: Note\n\n**Status:** 🔴 TODO\n**File:** `note.txt`\n**Command:** `echo hi > note.txt`\n"), 0o644))
	crit := filepath.Join(dir, "done-criteria.md")
	require.NoError(t, os.WriteFile(crit, []byte("# Done criteria: signed\n\n## F1: The note exists\nTag: AUTO_VERIFY\n\n```check\ncommand:\n  shell: test -f note.txt\n```\n\n"+
		"## U1: The note reads well\nTag: HUMAN_VERIFY\n\nA person reads note.txt.\n"), 0o644))

	code, out, errOut := cli(t, "run", tasks, "--server", b.addr, "--repo", repo, "--criteria", crit)
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "CONVERGED_PENDING_HUMAN")
	id := regexp.MustCompile(`ex_[0-9A-Z]+`).FindString(out)

	code, _, errOut = cli(t, "signoff", id, "U1", "--server", b.addr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give one of --pass and --fail")
	code, _, errOut = cli(t, "signoff", id, "U1", "--fail", "--server", b.addr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--fail needs --note")

	code, out, errOut = cli(t, "signoff", id, "U1", "--pass", "--note", "read it", "--who", "alice", "--server", b.addr)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "Recorded: U1 PASS by ")
	require.Contains(t, out, "Execution "+id+": COMPLETED, outcome CONVERGED — converged: ")
	code, out, errOut = cli(t, "status", id, "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "Outcome:    CONVERGED\n")
	code, out, _ = cli(t, "logs", id, "--server", b.addr, "--type", "verdict")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "Verify Done after sign-off: CONVERGED")

	// Signed off: nothing waits any more.
	code, _, errOut = cli(t, "signoff", id, "U1", "--pass", "--server", b.addr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "only an execution that ended CONVERGED_PENDING_HUMAN waits for a sign-off")
}
