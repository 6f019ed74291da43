package dashboard_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// TestPagesOfTheGreeterRun builds the greeter example on `converge dev --agents 2` and reads
// every page of its run through the dashboard, then its events (replayed, resumed and ended).
func TestPagesOfTheGreeterRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the greeter example on a real converge dev")
	}
	t.Parallel()
	s := startDev(t, "--agents", "2")
	run := s.runGreeter(t)
	select {
	case <-run.done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the greeter run did not end within 3 minutes")
	}
	require.NoError(t, run.err, run.output())
	id := s.firstExecution(t, "")

	code, body := s.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/runs/`+id+`"`)
	require.Contains(t, body, "COMPLETED")
	require.Contains(t, body, `<a href="/runs/`+id+`/verify">CONVERGED</a>`)
	require.Contains(t, body, `value="6"`, "the progress bar shows 6 of 6 tasks")

	code, body = s.get(t, "/?status=completed")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, id)
	code, body = s.get(t, "/?status=running")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, id)
	code, body = s.get(t, "/?list=no-such-list")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, id, "the list filter")
	code, body = s.get(t, "/?status=bogus")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "want pending, running")

	code, body = s.get(t, "/runs/"+id)
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{"Wave 1", "Wave 4", `data-task="1.3"`, "greet/greet.go", "EXECUTION_STARTED", "VERDICT", `id="pause"`} {
		if want == `id="pause"` {
			require.NotContains(t, body, want, "an ended run offers no pause")
			continue
		}
		require.Contains(t, body, want)
	}
	// The tracking table (tasks.md's "Execution Tracking"): every task, its status, tries and
	// commit (a link to its diff).
	require.Contains(t, body, `<h2 id="track-h">Tracking</h2>`)
	require.Regexp(t, `<tr data-track="1.3"><td><a href="/runs/`+id+`/tasks/1.3">1.3</a></td><td>Greeting tests</td><td><span class="status s-completed">COMPLETED</span></td>\s*`+
		`<td>2</td><td><a href="/runs/`+id+`/tasks/1.3#diff"><code>[0-9a-f]{12}</code></a></td><td></td></tr>`, body)
	require.Equal(t, 6, strings.Count(body, `<tr data-track="`))
	code, body = s.get(t, "/runs/"+id+"?task=1.3")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Task 1.3: Greeting tests started")
	require.NotContains(t, body, "Task 1.1: Greeting package started", "the log shows task 1.3's entries only")
	code, body = s.get(t, "/runs/"+id+"?type=task_failed")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "TASK_FAILED")
	require.NotContains(t, body, "<b>EXECUTION_STARTED</b>")
	code, _ = s.get(t, "/runs/"+id+"?type=nonsense")
	require.Equal(t, http.StatusBadRequest, code)

	// Task 1.3 fails its first try on purpose: the task view shows the failure and the retry.
	code, body = s.get(t, "/runs/"+id+"/tasks/1.3")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "TASK_FAILED")
	require.Contains(t, body, "COMPLETED")
	require.Regexp(t, `<dt>Tries</dt><dd>2</dd>`, body)
	require.Contains(t, body, `id="prompt-h"`, "the prompt's makings")
	require.Contains(t, body, `id="cp-h"`)
	require.Contains(t, body, "checkpoint at ")
	require.NotContains(t, body, `id="retry"`, "an ended run offers no task actions")
	// The diff of its commit (GetTaskDiff): the file it created and its lines, escaped and
	// coloured by class.
	require.Contains(t, body, `<h2 id="diff-h">Diff of its commit</h2>`)
	require.Contains(t, body, `<tr data-file="greet/greet_test.go"><td><a href="#file-0"><code>greet/greet_test.go</code></a></td><td>added</td>`)
	require.Contains(t, body, `<span class="d-file" id="file-0">diff --git a/greet/greet_test.go b/greet/greet_test.go`)
	require.Contains(t, body, `<span class="d-add">&#43;func TestHello(t *testing.T) {`)
	require.Contains(t, body, `&#43;	for name, want := range map[string]string{&#34;Ada&#34;: &#34;Hello, Ada&#34;`)
	require.NotContains(t, body, `id="diff-note"`)
	code, _ = s.get(t, "/runs/"+id+"/tasks/9.9")
	require.Equal(t, http.StatusNotFound, code)

	code, body = s.get(t, "/runs/"+id+"/verify")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<strong id="verdict">CONVERGED</strong>`)
	require.Contains(t, body, `data-criterion="`)

	code, body = s.get(t, "/agents")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<h2>Locks</h2>")

	code, body = s.get(t, "/knowledge?pattern=greet/**")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<h1>Knowledge</h1>")
	code, body = s.get(t, "/knowledge?pattern=/etc/passwd")
	require.Equal(t, http.StatusBadRequest, code, "the API's InvalidArgument")
	require.Contains(t, body, "InvalidArgument")

	code, body = s.get(t, "/runs/ex_nosuch")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "NotFound")

	// Events: the whole log replayed with seq as the SSE id, then "end" (the run has ended).
	seqs, ended := readEvents(t, s.url+"/runs/"+id+"/events")
	require.True(t, ended)
	require.NotEmpty(t, seqs)
	for i, n := range seqs {
		require.Equal(t, int64(i+1), n, "gap-free from 1")
	}
	// A reconnect with Last-Event-ID resumes right after it, with no gap and no duplicate.
	mid := seqs[len(seqs)/2]
	resumed, ended := readEvents(t, s.url+"/runs/"+id+"/events", "Last-Event-ID: "+strconv.FormatInt(mid, 10))
	require.True(t, ended)
	require.Equal(t, seqs[len(seqs)/2+1:], resumed)
	req, _ := http.NewRequest(http.MethodGet, s.url+"/runs/"+id+"/events?after=x", nil)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
}

// readEvents reads an SSE stream to its end: the ids of its entries, and whether it said "end".
func readEvents(t *testing.T, url string, headers ...string) (seqs []int64, ended bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			seqs = append(seqs, n)
		}
		if line == "event: end" {
			ended = true
		}
	}
	return seqs, ended
}

// TestReadOnlyViewerCannotAct runs a suite that requires tokens, with a read-only dashboard token:
// a viewer without a token sees the run but cannot cancel it (the API refuses, the dashboard says
// so), an operator with a token can; without the read-only token a viewer is asked to sign in.
func TestReadOnlyViewerCannotAct(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs a real converge dev")
	}
	t.Parallel()
	const operator, viewer = "operator-secret", "viewer-secret"
	// No agents: the run waits for claims, so it is still running when the viewer tries.
	s := startDev(t, "--auth-token", operator, "--auth-token", viewer, "--dashboard-read-token", viewer)
	s.runGreeter(t, "--token", operator)
	id := s.firstExecution(t, operator)

	code, body := s.get(t, "/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, id)
	require.Contains(t, body, "read-only")
	code, body = s.get(t, "/runs/"+id)
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `id="cancel"`, "no action buttons for a read-only viewer")

	// The viewer posts anyway: the API refuses (no token), the dashboard asks to sign in.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/cancel", "reason=viewer")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, "Sign in")
	sched := schedulerv1.NewSchedulerServiceClient(s.conn(t, operator))
	ex, err := sched.GetExecution(context.Background(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	require.NotEqual(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, ex.GetExecution().GetStatus())

	// A wrong token is refused as at the API.
	code, _ = s.do(t, http.MethodPost, "/runs/"+id+"/pause", "", "Authorization: Bearer wrong")
	require.Equal(t, http.StatusUnauthorized, code)

	// A cross-site form is refused before any call.
	code, _ = s.do(t, http.MethodPost, "/runs/"+id+"/cancel", "", "Authorization: Bearer "+operator, "Origin: http://evil.example")
	require.Equal(t, http.StatusForbidden, code)

	// Signing in sets an HttpOnly cookie; with it the page offers the actions.
	code, _ = s.do(t, http.MethodPost, "/login", "token="+operator+"&next=/runs/"+id)
	require.Equal(t, http.StatusSeeOther, code)
	code, body = s.get(t, "/runs/"+id, "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="cancel"`)
	require.Contains(t, body, `data-confirm="Cancel run`)

	// The operator skips task 1.1 through the API.
	code, body = s.get(t, "/runs/"+id+"/tasks/1.1", "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="skip"`, "a pending task offers skip")
	require.NotContains(t, body, `id="retry"`)
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/tasks/1.1/skip", "reason=not+now", "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusSeeOther, code, body)
	as, err := sched.ListAssignments(context.Background(), &schedulerv1.ListAssignmentsRequest{ExecutionId: id, TaskId: "1.1"})
	require.NoError(t, err)
	require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED, as.GetAssignments()[len(as.GetAssignments())-1].GetStatus())
	code, body = s.get(t, "/runs/"+id+"/tasks/1.1", "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "SKIPPED")
	require.Contains(t, body, `id="retry"`, "a skipped task of a running execution offers retry")
	require.NotContains(t, body, `id="skip"`)

	// Wave 1 had only 1.1, so it is over and 1.2 (which depends on it) runs now: RetryTask refuses,
	// and the page says why in the API's words.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/tasks/1.1/retry", "", "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "FailedPrecondition")
	require.Contains(t, body, "task 1.2 depends on task 1.1 and would run before it or alongside it")
	// The viewer cannot skip either.
	code, _ = s.do(t, http.MethodPost, "/runs/"+id+"/tasks/1.1/skip", "")
	require.Equal(t, http.StatusUnauthorized, code)

	// The operator cancels.
	code, _ = s.do(t, http.MethodPost, "/runs/"+id+"/cancel", "reason=operator", "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusSeeOther, code)
	ex, err = sched.GetExecution(context.Background(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, ex.GetExecution().GetStatus())
	// Cancelling again is idempotent; resuming a cancelled run is the API's FailedPrecondition.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/resume", "", "Authorization: Bearer "+operator)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, body, "FailedPrecondition")
}

// TestSignInNeededWithoutReadToken: with tokens and no read-only token, a viewer without a token
// is asked to sign in, and reads nothing.
func TestSignInNeededWithoutReadToken(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs a real converge dev")
	}
	t.Parallel()
	s := startDev(t, "--auth-token", "operator-secret")
	code, body := s.get(t, "/")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, body, `name="token"`)
	code, _ = s.get(t, "/agents", "Authorization: Bearer operator-secret")
	require.Equal(t, http.StatusOK, code)
	// A sign-in redirect stays on this site.
	code, _ = s.do(t, http.MethodPost, "/login", "token=x&next=//evil.example/")
	require.Equal(t, http.StatusSeeOther, code)
}

// TestReadOnlyRoleCannotCancel: with an auth file, a viewer whose token has the read-only role
// reads every page but cannot cancel, pause or skip — the dashboard sends their token and the API
// answers PermissionDenied, shown as the sign-in page with 403 — while the operator's token can.
func TestReadOnlyRoleCannotCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs a real converge dev")
	}
	t.Parallel()
	const operator, viewer = "operator-secret-token", "viewer-secret-token"
	hash := func(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }
	authFile := filepath.Join(t.TempDir(), "auth.yaml")
	require.NoError(t, os.WriteFile(authFile, []byte(fmt.Sprintf(`principals:
  - name: ops
    roles: [operator]
    token_sha256: [%q]
  - name: viewer
    roles: [read-only]
    token_sha256: [%q]
`, hash(operator), hash(viewer))), 0o600))
	// No agents: the run waits for claims, so it is still running when the viewer tries.
	s := startDev(t, "--auth-file", authFile)
	s.runGreeter(t, "--token", operator)
	id := s.firstExecution(t, operator)
	sched := schedulerv1.NewSchedulerServiceClient(s.conn(t, operator))

	// The viewer signs in with their token and reads.
	code, _ := s.do(t, http.MethodPost, "/login", "token="+viewer+"&next=/runs/"+id)
	require.Equal(t, http.StatusSeeOther, code)
	cookie := "Cookie: converge_token=" + viewer
	for _, path := range []string{"/", "/runs/" + id, "/runs/" + id + "/tasks/1.1", "/runs/" + id + "/verify", "/agents", "/knowledge"} {
		code, body := s.get(t, path, cookie)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	}
	// Task 1.1 has not run (no agents): its view says it has no commit yet, in the API's words
	// (GetTaskDiff is a read the read-only role may make).
	_, body := s.get(t, "/runs/"+id+"/tasks/1.1", cookie)
	require.Contains(t, body, `<p class="empty" id="diff-note">task 1.1 of execution `+id+` has no commit yet`)
	// Every action is refused by the API, as its RPC is for that token.
	// (A gate sign-off too: SignOffGate is an operator's RPC, refused before the gate is looked up.)
	for _, action := range []string{"/runs/" + id + "/cancel", "/runs/" + id + "/pause", "/runs/" + id + "/tasks/1.1/skip", "/runs/" + id + "/gates/GATE-P1"} {
		code, body := s.do(t, http.MethodPost, action, "reason=viewer&decision=pass", cookie)
		require.Equal(t, http.StatusForbidden, code, "%s: %s", action, body)
		require.Contains(t, body, "Sign in", action)
	}
	ex, err := sched.GetExecution(context.Background(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	require.NotEqual(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, ex.GetExecution().GetStatus())
	require.NotEqual(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED, ex.GetExecution().GetStatus())

	// The operator's token cancels.
	code, body = s.do(t, http.MethodPost, "/runs/"+id+"/cancel", "reason=operator", "Cookie: converge_token="+operator)
	require.Equal(t, http.StatusSeeOther, code, body)
	ex, err = sched.GetExecution(context.Background(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
	require.NoError(t, err)
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, ex.GetExecution().GetStatus())
}
