package dashboard_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestBrowserSignsOffAGate drives the gate sign-off in headless Chromium: the run view of a plan
// whose gate requires a sign-off shows the awaited gate and its form once the run pauses there
// (swapped in live); a FAIL without a note comes back as the API's refusal; a FAIL with a note
// (after the confirmation) ends the run FAILED, and the run view lists the sign-off.
func TestBrowserSignsOffAGate(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: drives Chromium against a real converge dev")
	}
	b := newBrowser(t)
	s := startDev(t, "--agents", "1")
	repo := s.greeterRepo(t)
	plan := filepath.Join(s.dir, "execution-plan.md")
	require.NoError(t, os.WriteFile(plan, []byte(gatedPlan), 0o644))
	start(t, s.dir, convergeBin, "run", plan, "--format", "plan", "--repo", repo, "--server", s.addr, "--no-write-back")
	id := s.firstExecution(t, "")

	b.do(t, chromedp.Navigate(s.url+"/runs/"+id))
	b.waitJS(t, `document.getElementById("gate-signoff") !== null`, 2*time.Minute)
	require.Contains(t, b.text(t), "Awaiting the sign-off of gate GATE-P1")
	shots := shotsDir(t)
	b.shot(t, shots, "gate-awaiting.png")

	// FAIL without a note: the API's InvalidArgument, in its words.
	b.click(t, "gate-fail")
	b.do(t, chromedp.WaitVisible(chromedp.CSS("main")))
	require.Contains(t, b.text(t), "a FAIL sign-off needs a note")

	b.do(t, chromedp.Navigate(s.url+"/runs/"+id), chromedp.WaitVisible(chromedp.ID("gate-signoff")))
	b.do(t, chromedp.SendKeys(chromedp.ID("gate-who"), "Bea"), chromedp.SendKeys(chromedp.ID("gate-note"), "the notes are wrong"))
	b.click(t, "gate-fail")
	b.waitJS(t, `liveStatus() === "FAILED"`, 30*time.Second)
	txt := b.text(t)
	require.Contains(t, txt, "Gate GATE-P1 signed off FAIL by Bea — the notes are wrong")
	require.NotContains(t, txt, "Awaiting the sign-off")
	b.shot(t, shots, "gate-failed.png")
}
