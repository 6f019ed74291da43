package dashboard_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// gatedPlan is a two-phase execution plan whose phase 1 gate requires a person's sign-off.
const gatedPlan = "# Execution Plan: gated notes\n\n## Phase 1: Notes\n\n**Gate:** `test -f a.txt`\n**Sign-off:** required\n\n" +
	"| Task | Description | Files | Command |\n|------|-------------|-------|---------|\n| T1.1 | Note A | `a.txt` | `echo a > a.txt` |\n\n" +
	"## Phase 2: More notes\n\n| Task | Description | Files | Command |\n|------|-------------|-------|---------|\n| T2.1 | Note B | `b.txt` | `echo b > b.txt` |\n"

// TestGateSignOffFromTheDashboard runs a two-phase plan whose gate requires a sign-off on a
// converge dev with tokens and a read-only dashboard token: the runs list and the run view show
// the gate the run awaits; a viewer without a token gets no form and a posted sign-off is refused
// (the API's Unauthenticated); the operator's FAIL without a note is the API's InvalidArgument;
// the operator's PASS continues the run to its end, and the run view lists the recorded sign-off.
func TestGateSignOffFromTheDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs a real converge dev")
	}
	t.Parallel()
	const operator, viewer = "operator-secret", "viewer-secret"
	s := startDev(t, "--agents", "1", "--auth-token", operator, "--auth-token", viewer, "--dashboard-read-token", viewer)
	repo := s.greeterRepo(t)
	plan := filepath.Join(s.dir, "execution-plan.md")
	require.NoError(t, os.WriteFile(plan, []byte(gatedPlan), 0o644))
	crit := filepath.Join(s.dir, "done-criteria-notes.md")
	require.NoError(t, os.WriteFile(crit, []byte("# Done criteria: notes\n\n## F1: Both notes exist\nTag: AUTO_VERIFY\n\n```check\ncommand:\n  shell: test -f a.txt && test -f b.txt\n```\n"), 0o644))
	run := start(t, s.dir, convergeBin, "run", plan, "--format", "plan", "--repo", repo, "--criteria", crit,
		"--server", s.addr, "--no-write-back", "--token", operator)
	id := s.firstExecution(t, operator)
	sched := schedulerv1.NewSchedulerServiceClient(s.conn(t, operator))
	getEx := func() *schedulerv1.Execution {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		require.NoError(t, err)
		return res.GetExecution()
	}
	require.Eventually(t, func() bool { return getEx().GetAwaitingSignoffGate() == "GATE-P1" }, 2*time.Minute, 50*time.Millisecond)

	// The viewer (read-only token) sees the awaited gate in the list and the run view, no form.
	code, body := s.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<small class="awaiting">awaiting the sign-off of gate <code>GATE-P1</code></small>`)
	code, body = s.get(t, "/runs/"+id)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="awaiting-gate"`)
	require.Contains(t, body, `Awaiting the sign-off of gate <code>GATE-P1</code>`)
	require.NotContains(t, body, `id="gate-signoff"`, "no sign-off form for a read-only viewer")
	code, body = s.get(t, "/runs/"+id+"/live")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="awaiting-gate"`, "the live part app.js swaps in shows it too")

	// The viewer posts anyway: the API refuses, the dashboard asks to sign in; the run still waits.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/gates/GATE-P1", "decision=pass&note=viewer")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "Sign in")
	require.Equal(t, "GATE-P1", getEx().GetAwaitingSignoffGate())

	// The operator gets the form, with a confirmation; Resume is not offered (only a sign-off
	// moves the run on).
	cookie := "Cookie: converge_token=" + operator
	code, body = s.get(t, "/runs/"+id, cookie)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<form class="signoff" id="gate-signoff" method="post" action="/runs/`+id+`/gates/GATE-P1" data-confirm="Record your sign-off of gate GATE-P1?`)
	require.Contains(t, body, `id="gate-pass"`)
	require.Contains(t, body, `id="gate-fail"`)
	require.NotContains(t, body, `id="resume"`)

	// A FAIL without a note is the API's InvalidArgument; nothing is recorded.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/gates/GATE-P1", "decision=fail&note=+", cookie)
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "InvalidArgument")
	require.Contains(t, body, "a FAIL sign-off needs a note")
	code, _ = s.do(t, http.MethodPost, "/runs/"+id+"/gates/GATE-P1", "decision=maybe", cookie)
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "GATE-P1", getEx().GetAwaitingSignoffGate())
	require.Empty(t, getEx().GetGateSignoffs())

	// The operator's PASS continues the run: back to the run view, and the run ends CONVERGED.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/gates/GATE-P1", "decision=pass&who=alice&note=phase+1+reviewed", cookie)
	require.Equal(t, http.StatusSeeOther, code, body)
	select {
	case <-run.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not end after the sign-off")
	}
	require.NoError(t, run.err, run.output())
	ex := getEx()
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, ex.GetStatus())
	require.Len(t, ex.GetGateSignoffs(), 1)

	code, body = s.get(t, "/runs/"+id)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="awaiting-gate"`)
	require.Regexp(t, `<li data-gate="GATE-P1">Gate <code>GATE-P1</code> signed off <strong>PASS</strong> by [^<]*alice[^<]* — phase 1 reviewed · `, body)
	code, body = s.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "awaiting the sign-off")

	// Signing off again is the API's FailedPrecondition: the run no longer waits.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/gates/GATE-P1", "decision=pass", cookie)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "FailedPrecondition")
}
