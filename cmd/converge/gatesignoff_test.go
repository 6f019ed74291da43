package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedPlan is a two-phase execution plan whose phase 1 gate requires a person's sign-off.
const gatedPlan = "# Execution Plan: gated notes\n\n## Phase 1: Notes\n\n**Gate:** `test -f a.txt`\n**Sign-off:** required\n\n" +
	"| Task | Description | Files | Command |\n|------|-------------|-------|---------|\n| T1.1 | Note A | `a.txt` | `echo a > a.txt` |\n\n" +
	"## Phase 2: More notes\n\n| Task | Description | Files | Command |\n|------|-------------|-------|---------|\n| T2.1 | Note B | `b.txt` | `echo b > b.txt` |\n"

// Issue 15 part 9, as a user meets it: `converge run` of a plan whose gate requires a sign-off
// pauses at the gate (the stream says so, `converge status` names the gate), and `converge
// signoff EXECUTION GATE-P1 --pass` lets phase 2 run to the end.
func TestSignoffAtAGate(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents, o.AgentDrainTimeout = true, 1, 5*time.Second })
	repo := greeterCopy(t)
	dir := t.TempDir()
	plan := filepath.Join(dir, "execution-plan.md")
	require.NoError(t, os.WriteFile(plan, []byte(gatedPlan), 0o644))
	crit := filepath.Join(dir, "done-criteria.md")
	require.NoError(t, os.WriteFile(crit, []byte("# Done criteria: notes\n\n## F1: Both notes exist\nTag: AUTO_VERIFY\n\n```check\ncommand:\n  shell: test -f a.txt && test -f b.txt\n```\n"), 0o644))

	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := cli(t, "run", plan, "--format", "plan", "--server", b.addr, "--repo", repo, "--criteria", crit)
		done <- result{code, out, errOut}
	}()

	var id string
	require.Eventually(t, func() bool {
		_, out, _ := cli(t, "status", "--server", b.addr)
		if !strings.Contains(out, "PAUSED") {
			return false
		}
		id = regexp.MustCompile(`ex_[0-9A-Z]+`).FindString(out)
		return id != ""
	}, 60*time.Second, 100*time.Millisecond)
	code, out, errOut := cli(t, "status", id, "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "Status:     PAUSED (wave 2/3)\n")
	require.Contains(t, out, "Awaiting:   the sign-off of gate GATE-P1 (converge signoff "+id+" GATE-P1 --pass|--fail)\n")

	code, _, errOut = cli(t, "signoff", id, "GATE-P1", "--fail", "--server", b.addr)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--fail needs --note")
	code, out, errOut = cli(t, "signoff", id, "GATE-P1", "--pass", "--note", "phase 1 reviewed", "--who", "alice", "--server", b.addr)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Regexp(t, `Recorded: gate GATE-P1 PASS by (.+ \()?alice`, out)
	require.Contains(t, out, "Execution "+id+": RUNNING — past gate GATE-P1 (wave 3/3)")

	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("converge run did not end after the sign-off")
	}
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.out, r.err)
	require.Contains(t, r.out, "Paused: awaiting the sign-off of gate GATE-P1 (Gate of Phase 1: Notes)")
	require.Contains(t, r.out, "signed off PASS by ")
	require.Contains(t, r.out, "Execution ended CONVERGED")

	code, out, errOut = cli(t, "status", id, "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `Sign-off:   gate GATE-P1 PASS by (.+ \()?alice\)?: phase 1 reviewed`, out)
	code, _, errOut = cli(t, "signoff", id, "GATE-P1", "--pass", "--server", b.addr)
	require.Equal(t, exitFailure, code)
	require.Contains(t, errOut, "ended")
}
