package dashboard_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// chromium answers the browser to drive, or skips the test saying how to get one.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONVERGE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CONVERGE_DASHBOARD_SHOTS") != "" {
		t.Fatal("make dashboard-shots needs Chromium: apt-get install chromium, or set CONVERGE_CHROMIUM")
	}
	t.Skip("no Chromium on this machine (apt-get install chromium, or set CONVERGE_CHROMIUM): the browser tests of the dashboard did not run")
	return ""
}

// shotsDir is where screenshots go: $CONVERGE_DASHBOARD_SHOTS (make dashboard-shots), else a temp dir.
func shotsDir(t *testing.T) string {
	if d := os.Getenv("CONVERGE_DASHBOARD_SHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// browser is a headless Chromium tab that accepts every confirmation and records every request.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	requests []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	b := &browser{ctx: ctx}
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			b.mu.Lock()
			b.requests = append(b.requests, e.Request.URL)
			b.mu.Unlock()
		}
	}))
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(b.ctx, steps...))
}

// pageHelpers are defined in the expressions waitJS polls: they read the run view null-safely
// (the page may be between two loads).
const pageHelpers = `const liveStatus = () => { const l = document.getElementById("live"); return l ? l.dataset.status : ""; };
const connText = () => { const c = document.getElementById("conn"); return c ? c.textContent : ""; };
`

// waitJS waits until a JavaScript expression is true in the page (no reload).
func (b *browser) waitJS(t *testing.T, expr string, d time.Duration) {
	t.Helper()
	_, err := chromedp.Run(b.ctx, chromedp.PollFunction[bool]("() => { "+pageHelpers+" return ("+expr+"); }",
		chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("waiting for %s: %v\npage:\n%s", expr, err, b.text(t))
	}
}

func (b *browser) text(t *testing.T) string {
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	require.NoError(t, err)
	return s
}

func (b *browser) shot(t *testing.T, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // quality 100 = PNG (less is JPEG)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
}

// click clicks a button that submits a form (after its confirmation) and waits for the page the
// action redirects to. The live part of the run view is swapped in as events arrive, so the button
// found may be replaced before the click lands: then it is found again.
func (b *browser) click(t *testing.T, id string) {
	t.Helper()
	var err error
	for range 5 {
		if _, err = chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.ID(id))); err == nil || !strings.Contains(err.Error(), "Could not find node") {
			break
		}
	}
	require.NoError(t, err, "clicking #%s", id)
}

// TestBrowserWatchesAndSteersTheGreeter drives the dashboard in headless Chromium as a person
// would: the greeter run appears, is paused and resumed from the buttons, fills in live as agents
// work (no reload), a failed try shows its error, a HUMAN_VERIFY criterion is signed off from the
// report page; and the page never asks another host for anything.
func TestBrowserWatchesAndSteersTheGreeter(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drives Chromium against a real converge dev")
	}
	b := newBrowser(t)
	shots := shotsDir(t)
	// No agents in the suite yet: the run waits for claims, so pause and resume are not a race
	// with its end. Two converge-agent workers join after the resume.
	s := startDev(t)
	u, err := url.Parse(s.url)
	require.NoError(t, err)

	b.do(t, chromedp.Navigate(s.url+"/"))
	require.Contains(t, b.text(t), "No runs yet")

	s.runGreeterWith(t, s.humanCriteria(t))
	deadline := time.Now().Add(60 * time.Second)
	for {
		b.do(t, chromedp.Navigate(s.url+"/"))
		found, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.querySelector("tr[data-run]") !== null`))
		require.NoError(t, err)
		if found {
			break
		}
		require.True(t, time.Now().Before(deadline), "the run did not appear in the list")
	}
	b.shot(t, shots, "runs.png")

	b.do(t, chromedp.Click(chromedp.CSS("tr[data-run] a")), chromedp.WaitVisible(chromedp.ID("live")))
	runURL := mustLocation(t, b)
	b.waitJS(t, `connText() === "live"`, 20*time.Second)

	// Pause from the button (the confirmation is accepted), then resume.
	b.click(t, "pause")
	b.waitJS(t, `liveStatus() === "PAUSED"`, 20*time.Second)
	require.Contains(t, b.text(t), "Resume")
	b.click(t, "resume")
	b.waitJS(t, `["RUNNING","PENDING"].includes(liveStatus())`, 20*time.Second)
	b.waitJS(t, `connText() === "live"`, 20*time.Second)

	// From here on the page must fill in by itself: a marker on window survives only without a
	// reload.
	_, err = chromedp.Run(b.ctx, chromedp.Evaluate[bool](`(window.__noReload = true)`))
	require.NoError(t, err)
	s.startAgent(t, "agent-a")
	s.startAgent(t, "agent-b")
	b.waitJS(t, `document.querySelectorAll('li.task[data-status="COMPLETED"]').length >= 1`, 90*time.Second)
	b.waitJS(t, `liveStatus() === "COMPLETED" || liveStatus() === "FAILED"`, 90*time.Second)
	b.waitJS(t, `connText() === "run ended"`, 20*time.Second)
	noReload, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`window.__noReload === true`))
	require.NoError(t, err)
	require.True(t, noReload, "the run view filled in without a reload")
	txt := b.text(t)
	require.Contains(t, txt, "COMPLETED")
	require.Contains(t, txt, "Wave 4")
	require.Contains(t, txt, "TASK_FAILED", "the live log shows task 1.3's failed first try")
	b.shot(t, shots, "run.png")

	// Task 1.3's failed first try, with its error.
	b.do(t, chromedp.Navigate(runURL+"/tasks/1.3"))
	txt = b.text(t)
	require.Contains(t, txt, "TASK_FAILED")
	require.Contains(t, txt, "Tries")
	require.Contains(t, txt, "transient failure: the first try of this task always fails", "the failed try's error")
	// The diff of its commit: the file list, and the added lines coloured (the page's green).
	require.Contains(t, txt, "Diff of its commit")
	require.Contains(t, txt, "greet/greet_test.go")
	require.Contains(t, txt, "+func TestHello(t *testing.T) {")
	added, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`getComputedStyle(document.querySelector("pre.diff .d-add")).color`))
	require.NoError(t, err)
	require.Equal(t, "rgb(17, 99, 41)", added)
	b.shot(t, shots, "task.png")

	// The Verify Done report: U1 waits for a person; PASS from the page changes the verdict.
	b.do(t, chromedp.Navigate(runURL+"/verify"), chromedp.WaitVisible(chromedp.CSS(`[data-criterion="U1"] form`)))
	require.Contains(t, b.text(t), "PENDING_HUMAN")
	b.do(t, chromedp.SendKeys(chromedp.ID("who-U1"), "Ada Reviewer"), chromedp.SendKeys(chromedp.ID("note-U1"), "reads well"))
	_, err = chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(`[data-criterion="U1"] button[value="pass"]`)))
	require.NoError(t, err)
	b.do(t, chromedp.WaitVisible(chromedp.ID("loop-verdict")))
	txt = b.text(t)
	require.Contains(t, txt, "Sign-off recorded")
	require.Contains(t, txt, "Signed off: PASS by Ada Reviewer")
	b.shot(t, shots, "verify.png")

	// The sign-off reaches the run: its outcome on the runs page moves from
	// CONVERGED_PENDING_HUMAN to CONVERGED (the Scheduler asks the Verifier every few seconds).
	outcome := `(document.querySelector("tr[data-run] td[data-label=Status] small") || {}).textContent || ""`
	deadline = time.Now().Add(60 * time.Second)
	for {
		b.do(t, chromedp.Navigate(s.url+"/"))
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](outcome))
		require.NoError(t, err)
		if got == "CONVERGED" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the run's outcome stayed %q after the sign-off", got)
		b.do(t, chromedp.Sleep(500*time.Millisecond)) //nolint:forbidigo // the page is polled, as a person would reload it
	}

	// A feature build (the build → verify loop) of a small list: its page with the iterations and
	// the criteria-progress chart.
	fbRepo := filepath.Join(s.dir, "notes") // under the agents' allowed root
	for _, args := range [][]string{{"init", "-q", "-b", "main", fbRepo}, {"-C", fbRepo, "commit", "-q", "--allow-empty", "-m", "start"}} {
		out, err := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	sched := schedulerv1.NewSchedulerServiceClient(s.conn(t, ""))
	fb, err := sched.StartFeatureBuild(t.Context(), &schedulerv1.StartFeatureBuildRequest{Feature: "greeter-notes",
		TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskList{TaskList: clustertest.Layered("greeter-notes", fbRepo, 3, "0")}})
	require.NoError(t, err)
	fbID := fb.GetFeatureBuild().GetId()
	require.Eventually(t, func() bool {
		res, err := sched.GetFeatureBuild(t.Context(), &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: fbID}})
		return err == nil && res.GetFeatureBuild().GetEndTime() != nil
	}, 3*time.Minute, 200*time.Millisecond)
	b.do(t, chromedp.Navigate(s.url+"/builds"), chromedp.WaitVisible(chromedp.CSS(`tr[data-build="`+fbID+`"]`)))
	b.do(t, chromedp.Navigate(s.url+"/builds/"+fbID), chromedp.WaitVisible(chromedp.ID("it-h")))
	txt = b.text(t)
	require.Contains(t, txt, "SUCCESS")
	require.Contains(t, txt, "Criteria progress")
	b.shot(t, shots, "build.png")

	// Agents and locks, at a phone's width too.
	b.do(t, chromedp.Navigate(s.url+"/agents"))
	require.Contains(t, b.text(t), "agent-a")
	b.shot(t, shots, "agents.png")
	b.do(t, chromedp.EmulateViewport(390, 844), chromedp.Navigate(s.url+"/"))
	b.shot(t, shots, "runs-phone.png")

	// Every request the page made went to the dashboard's own host.
	b.mu.Lock()
	defer b.mu.Unlock()
	require.NotEmpty(t, b.requests)
	for _, r := range b.requests {
		ru, err := url.Parse(r)
		require.NoError(t, err)
		if ru.Scheme == "data" {
			continue
		}
		require.Equal(t, u.Host, ru.Host, fmt.Sprintf("request to another host: %s", r))
	}
	t.Logf("%d requests, all to %s; screenshots in %s", len(b.requests), u.Host, shots)
}

func mustLocation(t *testing.T, b *browser) string {
	t.Helper()
	loc, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	if i := strings.IndexAny(loc, "?#"); i >= 0 {
		loc = loc[:i]
	}
	return loc
}
