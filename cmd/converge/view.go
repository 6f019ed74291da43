package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// view prints a progress. Not on a terminal it prints each line as it comes (CI logs, pipes). On a
// terminal it also keeps a live block at the bottom, redrawn in place: a bar per wave and one line
// per running task and agent, under the permanent lines.
type view struct {
	mu     sync.Mutex
	out    io.Writer
	p      *progress
	live   bool
	width  int
	drawn  int // lines of the live block on screen
	start  time.Time
	stop   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup
}

// newView starts a view of p on out; live draws the terminal block (refreshed every
// refresh; 0 = only on messages).
func newView(out io.Writer, p *progress, live bool, refresh time.Duration) *view {
	v := &view{out: out, p: p, live: live, width: terminalWidth(out), start: time.Now(), stop: make(chan struct{})}
	if live && refresh > 0 {
		v.wg.Go(func() {
			t := time.NewTicker(refresh)
			defer t.Stop()
			for {
				select {
				case <-v.stop:
					return
				case <-t.C:
					v.mu.Lock()
					v.redraw()
					v.mu.Unlock()
				}
			}
		})
	}
	return v
}

// println prints permanent lines (above the live block).
func (v *view) println(lines ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clear()
	for _, l := range lines {
		fmt.Fprintln(v.out, l)
	}
	v.draw()
}

// handle applies one stream message and prints what it says.
func (v *view) handle(msg *schedulerv1.WatchExecutionResponse) {
	v.mu.Lock()
	defer v.mu.Unlock()
	lines := v.p.apply(msg, !v.live)
	if len(lines) == 0 && !v.live {
		return
	}
	v.clear()
	for _, l := range lines {
		fmt.Fprintln(v.out, l)
	}
	v.draw()
}

// close stops refreshing and removes the live block: what stays is the permanent lines.
func (v *view) close() {
	v.closed.Do(func() {
		close(v.stop)
		v.wg.Wait()
		v.mu.Lock()
		v.clear()
		v.mu.Unlock()
	})
}

func (v *view) redraw() {
	v.clear()
	v.draw()
}

// clear erases the live block: up as many lines as were drawn, then to the end of the screen.
func (v *view) clear() {
	if v.live && v.drawn > 0 {
		fmt.Fprintf(v.out, "\x1b[%dA\x1b[J", v.drawn)
		v.drawn = 0
	}
}

func (v *view) draw() {
	if !v.live || v.p.finished {
		return
	}
	lines := liveBlock(v.p, time.Since(v.start), v.p.now())
	for _, l := range lines {
		fmt.Fprintln(v.out, fitWidth(l, v.width-1))
	}
	v.drawn = len(lines)
}

// barWidth is the width of a wave's progress bar.
const barWidth = 24

// maxLiveWaves is how many waves the live block shows; the others are summed up in one line.
const maxLiveWaves = 6

// liveBlock is the terminal's live block: a bar per wave (a window of them around the current one
// for long plans), one line per running task and integration, and a counter.
func liveBlock(p *progress, elapsed time.Duration, now time.Time) []string {
	var lines []string
	waves := p.waves
	first := 0
	if len(waves) > maxLiveWaves {
		// Start at the first wave not yet completed, less one for context.
		for first < len(waves)-1 && waves[first].status == schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED {
			first++
		}
		first = max(0, min(first-1, len(waves)-maxLiveWaves))
		if first > 0 {
			lines = append(lines, fmt.Sprintf("Waves 1–%d done", waves[first-1].number))
		}
	}
	last := min(len(waves), first+maxLiveWaves)
	for _, w := range waves[first:last] {
		lines = append(lines, strings.TrimRight(fmt.Sprintf("%-11s %s %d/%d %s", p.waveName(w.number), bar(w.done(), w.tasks), w.done(), w.tasks, waveState(w)), " "))
	}
	if rest := len(waves) - last; rest > 0 {
		lines = append(lines, fmt.Sprintf("… %s more", plural(rest, "wave")))
	}
	for _, t := range p.running() {
		line := fmt.Sprintf("  🔄 %s  %s", t.instance, taskName(t.id, t.title))
		if t.activity != "" {
			line += " · " + t.activity
		}
		lines = append(lines, line+" · "+formatDuration(now.Sub(t.since)))
	}
	for _, w := range waves {
		if w.integrator != "" {
			lines = append(lines, fmt.Sprintf("  🔀 %s  %s integration · %s", w.integrator, p.waveName(w.number), formatDuration(now.Sub(w.integrationSince))))
		}
	}
	lines = append(lines, fmt.Sprintf("  [%d/%d tasks done · %s]", p.counted, p.total(), formatDuration(elapsed)))
	return lines
}

func waveState(w *waveProgress) string {
	switch w.status {
	case schedulerv1.WaveStatus_WAVE_STATUS_RUNNING:
		return "running"
	case schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING:
		return "integrating"
	case schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED:
		return "✓ integrated"
	case schedulerv1.WaveStatus_WAVE_STATUS_FAILED:
		return "✗ failed"
	case schedulerv1.WaveStatus_WAVE_STATUS_CANCELLED:
		return "cancelled"
	}
	return ""
}

// bar is a progress bar of done out of total.
func bar(done, total int) string {
	filled := 0
	if total > 0 {
		filled = min(barWidth, done*barWidth/total)
	}
	return strings.Repeat("█", filled) + strings.Repeat("░", barWidth-filled)
}

// fitWidth cuts s to n columns (counting every rune as one: close enough for a status line).
func fitWidth(s string, n int) string {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return s
	}
	return truncateRunes(s, n)
}

// terminalWidth is the width of the terminal out is, else $COLUMNS, else 80.
func terminalWidth(out io.Writer) int {
	if f, ok := out.(*os.File); ok {
		if n := fileWidth(f); n > 20 {
			return n
		}
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 20 {
		return n
	}
	return 80
}

// isTerminal says whether f is an interactive terminal: a character device that is not
// /dev/null, with TERM not "dumb". (os.File.Stat's ModeCharDevice; no terminal library.)
func isTerminal(f *os.File) bool {
	if os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}
