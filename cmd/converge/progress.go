package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The progress of an execution as `converge run` and `converge watch` show it. A progress is fed
// the WatchExecution stream (entries and snapshots) and answers, for each message, the permanent
// lines to print: pb-build's `[2/8] ✅ Task 1.2: …` for every task that ends, plus wave, retry and
// verdict lines. It also keeps what the live terminal view draws: a bar per wave and one line per
// running task and agent.

// taskState is where a task is in the execution, as far as the stream told.
type taskState int

const (
	taskPending taskState = iota
	taskRunning
	taskCompleted
	taskFailed
	taskSkipped
)

// taskProgress is one task of the execution.
type taskProgress struct {
	id, title string
	wave      int32
	state     taskState
	instance  string    // agent holding it while running
	attempt   int32     // lease attempt (1 + requeues)
	activity  string    // the agent's last word on it
	since     time.Time // when it was leased
	counted   bool      // its terminal line was printed (counted in [k/N])
}

// waveProgress is one wave of the execution.
type waveProgress struct {
	number                     int32
	tasks                      int
	completed, failed, skipped int
	status                     schedulerv1.WaveStatus
	commit                     string // integration commit
	integrator                 string // agent running its integration
	integrationSince           time.Time
}

func (w *waveProgress) done() int { return w.completed + w.failed + w.skipped }

// assignmentLookup answers a task's current assignment. A TASK_FAILED entry is either an agent's
// failed try (the task is retried) or the Scheduler's final word; the assignment's status tells
// which.
type assignmentLookup func(taskID string) (*schedulerv1.Assignment, error)

// progress follows one execution.
type progress struct {
	ex       *schedulerv1.Execution // latest snapshot
	listName string
	tasks    map[string]*taskProgress
	waves    []*waveProgress
	counted  int // tasks whose terminal line was printed
	lookup   assignmentLookup
	lastSeq  int64
	finished bool
	// verdict is the VERDICT entry, when one came.
	verdict *commonv1.LogEntry
	now     func() time.Time
}

// newProgress prepares the progress of ex (with its waves) for list.
func newProgress(ex *schedulerv1.Execution, waves []*schedulerv1.Wave, list *schedulerv1.TaskList, lookup assignmentLookup) *progress {
	p := &progress{ex: ex, listName: list.GetSpec().GetName(), tasks: map[string]*taskProgress{}, lookup: lookup, now: time.Now}
	titles := map[string]string{}
	for _, t := range list.GetSpec().GetTasks() {
		titles[t.GetId()] = t.GetTitle()
	}
	for _, w := range waves {
		wp := &waveProgress{number: w.GetWaveNumber(), tasks: int(w.GetTaskCount()), completed: int(w.GetCompletedCount()),
			failed: int(w.GetFailedCount()), skipped: int(w.GetSkippedCount()), status: w.GetStatus(), commit: w.GetIntegrationCommit()}
		p.waves = append(p.waves, wp)
		for _, pl := range w.GetPlacements() {
			p.tasks[pl.GetTaskId()] = &taskProgress{id: pl.GetTaskId(), title: titles[pl.GetTaskId()], wave: w.GetWaveNumber()}
		}
	}
	sort.Slice(p.waves, func(i, j int) bool { return p.waves[i].number < p.waves[j].number })
	return p
}

// total is the number of tasks the execution runs.
func (p *progress) total() int {
	if n := int(p.ex.GetTotalTasks()); n > 0 {
		return n
	}
	return len(p.tasks)
}

// header is the first line: what runs, how.
func (p *progress) header(agents int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "▶ %s run %d of %q: %s in %s", p.ex.GetId(), p.ex.GetRunNumber(), p.listName,
		plural(p.total(), "task"), plural(int(p.ex.GetWaveCount()), "wave"))
	if agents > 0 {
		fmt.Fprintf(&b, ", %s", plural(agents, "local agent"))
	}
	if repo := p.ex.GetRepository(); repo != nil {
		fmt.Fprintf(&b, "\n  repository %s at %s, run branch %s", repoSource(repo), short(p.ex.GetBaseCommit()), p.ex.GetRunBranch())
	}
	return b.String()
}

func (p *progress) task(id string) *taskProgress {
	t, ok := p.tasks[id]
	if !ok {
		t = &taskProgress{id: id}
		p.tasks[id] = t
	}
	return t
}

func (p *progress) wave(n int32) *waveProgress {
	for _, w := range p.waves {
		if w.number == n {
			return w
		}
	}
	w := &waveProgress{number: n}
	p.waves = append(p.waves, w)
	sort.Slice(p.waves, func(i, j int) bool { return p.waves[i].number < p.waves[j].number })
	return w
}

// waveName is "Wave 2/4".
func (p *progress) waveName(n int32) string {
	if c := p.ex.GetWaveCount(); c > 0 {
		return fmt.Sprintf("Wave %d/%d", n, c)
	}
	return fmt.Sprintf("Wave %d", n)
}

// apply takes one message of the stream and answers the lines to print. running says whether
// in-progress lines are wanted (the plain view prints them; the terminal view draws them live).
func (p *progress) apply(msg *schedulerv1.WatchExecutionResponse, running bool) []string {
	if ex := msg.GetExecution(); ex != nil {
		p.ex = ex
	}
	en := msg.GetEntry()
	if en == nil {
		return nil
	}
	p.lastSeq = en.GetSeq()
	t := func() *taskProgress { return p.task(en.GetTaskId()) }
	name := func(tp *taskProgress) string { return taskName(tp.id, tp.title) }
	switch en.GetEventType() {
	case commonv1.EventType_EVENT_TYPE_WAVE_STARTED:
		n := waveNumber(en)
		w := p.wave(n)
		w.status = schedulerv1.WaveStatus_WAVE_STATUS_RUNNING
		if c := int(ctxNumber(en, "task_count")); c > 0 {
			w.tasks = c
		}
		var ids []string
		for _, tp := range p.sortedTasks() {
			if tp.wave == n {
				ids = append(ids, tp.id)
			}
		}
		line := fmt.Sprintf("── %s: %s", p.waveName(n), plural(w.tasks, "task"))
		if len(ids) > 0 && len(ids) <= 12 {
			line += " (" + strings.Join(ids, ", ") + ")"
		}
		return []string{line}

	case commonv1.EventType_EVENT_TYPE_LEASE_GRANTED:
		if en.GetTaskId() == "" { // an integration
			w := p.wave(en.GetWaveNumber())
			w.integrator, w.integrationSince = en.GetInstanceId(), p.now()
			return nil
		}
		tp := t()
		tp.state, tp.instance, tp.since, tp.activity = taskRunning, en.GetInstanceId(), p.now(), ""
		if n := int32(ctxNumber(en, "attempt")); n > 0 {
			tp.attempt = n
		}
		if !running {
			return nil
		}
		line := fmt.Sprintf("      🔄 %s — in progress on %s", name(tp), en.GetInstanceId())
		if tp.attempt > 1 {
			line += fmt.Sprintf(" (attempt %d)", tp.attempt)
		}
		return []string{line}

	case commonv1.EventType_EVENT_TYPE_TASK_STARTED, commonv1.EventType_EVENT_TYPE_VALIDATION_RUN,
		commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, commonv1.EventType_EVENT_TYPE_CHECKPOINT_RESTORED,
		commonv1.EventType_EVENT_TYPE_DISCOVERY_RECORDED, commonv1.EventType_EVENT_TYPE_INFO:
		if en.GetTaskId() != "" {
			t().activity = firstLine(en.GetMessage())
		}
		return nil

	case commonv1.EventType_EVENT_TYPE_WARNING, commonv1.EventType_EVENT_TYPE_ERROR:
		icon := "⚠️ "
		if en.GetEventType() == commonv1.EventType_EVENT_TYPE_ERROR {
			icon = "❗"
		}
		if en.GetTaskId() == "" {
			return []string{fmt.Sprintf("      %s %s", icon, firstLine(en.GetMessage()))}
		}
		tp := t()
		tp.activity = firstLine(en.GetMessage())
		return []string{fmt.Sprintf("      %s %s: %s", icon, name(tp), firstLine(en.GetMessage()))}

	case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
		tp := t()
		return p.ended(tp, taskCompleted, en.GetWaveNumber(), completedDetail(int(ctxNumber(en, "files_changed")), int(ctxNumber(en, "tries"))))

	case commonv1.EventType_EVENT_TYPE_TASK_SKIPPED:
		tp := t()
		why := ""
		if a := p.assignment(tp.id); a != nil {
			why = a.GetError().GetMessage()
		}
		if why == "" {
			why = afterMarker(en.GetMessage(), " skipped")
		}
		return p.ended(tp, taskSkipped, en.GetWaveNumber(), "skipped"+prefixed(": ", firstLine(why)))

	case commonv1.EventType_EVENT_TYPE_TASK_FAILED:
		tp := t()
		a := p.assignment(tp.id)
		if a == nil || a.GetStatus() != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED || tp.counted {
			// A failed try: the agent rolls back and tries again.
			if tp.counted {
				return nil
			}
			what := firstLine(en.GetMessage())
			if !strings.HasPrefix(what, "try ") {
				what = "try failed: " + what
			}
			if out := lastLine(ctxString(en, "output_tail")); out != "" && !strings.Contains(what, out) {
				what += " · " + out
			}
			tp.activity = "retrying after " + what
			return []string{fmt.Sprintf("      ↻ %s — %s", name(tp), what)}
		}
		detail := "failed"
		if n := a.GetTries(); n > 1 {
			detail += fmt.Sprintf(" after %d tries", n)
		}
		return p.ended(tp, taskFailed, en.GetWaveNumber(), detail+prefixed(": ", firstLine(a.GetError().GetMessage())))

	case commonv1.EventType_EVENT_TYPE_TASK_REQUEUED:
		if en.GetTaskId() == "" {
			w := p.wave(en.GetWaveNumber())
			w.integrator = ""
			return []string{fmt.Sprintf("      ↻ %s integration requeued: %s", p.waveName(en.GetWaveNumber()), firstLine(en.GetMessage()))}
		}
		tp := t()
		if tp.counted { // RetryTask: it runs again
			tp.counted = false
			p.counted--
			w := p.wave(tp.wave)
			switch tp.state {
			case taskCompleted:
				w.completed--
			case taskFailed:
				w.failed--
			case taskSkipped:
				w.skipped--
			}
		}
		if n := int32(ctxNumber(en, "attempt")); n > 0 {
			tp.attempt = n
		}
		tp.state, tp.instance, tp.activity = taskPending, "", ""
		return []string{fmt.Sprintf("      ↻ %s — %s", name(tp), firstLine(en.GetMessage()))}

	case commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED:
		return nil // TASK_REQUEUED (or the final TASK_FAILED) follows and says what happens

	case commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED:
		w := p.wave(waveNumber(en))
		w.status = schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING
		if !running {
			return nil
		}
		return []string{fmt.Sprintf("── %s: integrating %s", p.waveName(w.number), plural(int(ctxNumber(en, "merges")), "task commit"))}

	case commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED:
		w := p.wave(en.GetWaveNumber())
		w.commit, w.integrator = ctxString(en, "commit"), ""
		return nil // WAVE_COMPLETED follows

	case commonv1.EventType_EVENT_TYPE_INTEGRATION_FAILED:
		w := p.wave(en.GetWaveNumber())
		w.status, w.integrator = schedulerv1.WaveStatus_WAVE_STATUS_FAILED, ""
		return []string{fmt.Sprintf("❌ %s: %s", p.waveName(w.number), firstLine(en.GetMessage()))}

	case commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED:
		w := p.wave(waveNumber(en))
		w.status = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED
		line := fmt.Sprintf("── %s done: %d completed, %d failed, %d skipped", p.waveName(w.number), w.completed, w.failed, w.skipped)
		switch {
		case strings.Contains(en.GetMessage(), "nothing to integrate"):
			line += "; nothing to integrate"
		case w.commit != "":
			line += "; integrated at " + short(w.commit)
		}
		return []string{line}

	case commonv1.EventType_EVENT_TYPE_VERIFICATION_STARTED:
		return []string{"🔎 Verify Done: checking the done-criteria"}

	case commonv1.EventType_EVENT_TYPE_VERDICT:
		p.verdict = en
		return []string{verdictLine(ctxString(en, "verdict"), int(ctxNumber(en, "pass")), int(ctxNumber(en, "fail")),
			splitNonEmpty(ctxString(en, "failed_criteria"), ","), afterMarker(en.GetMessage(), " — "))}

	case commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED:
		return []string{"⏸️  Paused: " + firstLine(en.GetMessage())}
	case commonv1.EventType_EVENT_TYPE_EXECUTION_RESUMED:
		return []string{"▶ Resumed: " + strings.TrimPrefix(firstLine(en.GetMessage()), "resumed: ")}
	case commonv1.EventType_EVENT_TYPE_AGENT_ESCALATED:
		return []string{"🆘 Escalated: " + firstLine(en.GetMessage())}
	case commonv1.EventType_EVENT_TYPE_EXECUTION_CANCELLED, commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED:
		p.finished = true
		for _, tp := range p.tasks {
			if tp.state == taskRunning {
				tp.state, tp.instance = taskPending, ""
			}
		}
		outcome := ctxString(en, "outcome")
		if outcome == "" {
			outcome = strings.TrimPrefix(p.ex.GetOutcome().String(), "OUTCOME_")
		}
		line := "🏁 Execution ended " + outcome
		if p.verdict == nil { // the verdict line said why already
			line += prefixed(": ", firstLine(afterMarker(en.GetMessage(), ": ")))
		}
		return []string{line}
	}
	return nil
}

// ended marks a task terminal and answers its pb-build line, once.
func (p *progress) ended(tp *taskProgress, st taskState, wave int32, detail string) []string {
	if tp.counted {
		return nil
	}
	tp.counted, tp.state, tp.instance = true, st, ""
	p.counted++
	if wave == 0 {
		wave = tp.wave
	}
	if tp.wave == 0 {
		tp.wave = wave
	}
	w := p.wave(tp.wave)
	icon := ""
	switch st {
	case taskCompleted:
		w.completed++
		icon = "✅"
	case taskFailed:
		w.failed++
		icon = "❌"
	case taskSkipped:
		w.skipped++
		icon = "⏭️"
	}
	line := fmt.Sprintf("[%d/%d] %s %s", min(p.counted, max(p.total(), p.counted)), max(p.total(), p.counted), icon, taskName(tp.id, tp.title))
	if detail != "" {
		line += " — " + detail
	}
	return []string{line}
}

func (p *progress) assignment(taskID string) *schedulerv1.Assignment {
	if p.lookup == nil {
		return nil
	}
	a, err := p.lookup(taskID)
	if err != nil {
		return nil
	}
	return a
}

// sortedTasks answers the tasks by wave, then id.
func (p *progress) sortedTasks() []*taskProgress {
	out := make([]*taskProgress, 0, len(p.tasks))
	for _, t := range p.tasks {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].wave != out[j].wave {
			return out[i].wave < out[j].wave
		}
		return lessID(out[i].id, out[j].id)
	})
	return out
}

// running answers the running tasks, longest-running first.
func (p *progress) running() []*taskProgress {
	var out []*taskProgress
	for _, t := range p.tasks {
		if t.state == taskRunning {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].since.Equal(out[j].since) {
			return out[i].since.Before(out[j].since)
		}
		return lessID(out[i].id, out[j].id)
	})
	return out
}

// completedDetail is "2 files changed" (and ", 2 tries" when the task needed more than one).
func completedDetail(files, tries int) string {
	d := plural(files, "file") + " changed"
	if tries > 1 {
		d += fmt.Sprintf(", %d tries", tries)
	}
	return d
}

// verdictLine words a Verify Done verdict.
func verdictLine(verdict string, pass, fail int, failed []string, detail string) string {
	verdict = strings.TrimPrefix(verdict, "VERDICT_")
	switch verdict {
	case "CONVERGED":
		return fmt.Sprintf("✅ Verdict: CONVERGED — %s passed", plural(pass, "criterion"))
	case "FAILED":
		line := fmt.Sprintf("❌ Verdict: FAILED — %d of %d criteria failed", fail, pass+fail)
		if len(failed) > 0 {
			line += ": " + strings.Join(failed, ", ")
		}
		return line
	case "BLOCKED":
		return "⛔ Verdict: BLOCKED — " + firstLine(strings.TrimPrefix(detail, "blocked: "))
	}
	return "Verdict: " + verdict + prefixed(" — ", firstLine(detail))
}

func taskName(id, title string) string {
	if title == "" {
		return "Task " + id
	}
	return "Task " + id + ": " + title
}

func waveNumber(en *commonv1.LogEntry) int32 {
	if n := en.GetWaveNumber(); n > 0 {
		return n
	}
	return int32(ctxNumber(en, "wave_number"))
}

func ctxNumber(en *commonv1.LogEntry, key string) float64 {
	return en.GetContext().GetFields()[key].GetNumberValue()
}

func ctxString(en *commonv1.LogEntry, key string) string {
	return en.GetContext().GetFields()[key].GetStringValue()
}

// afterMarker answers what follows the first marker in s (s itself when there is none).
func afterMarker(s, marker string) string {
	if i := strings.Index(s, marker); i >= 0 {
		return strings.TrimLeft(s[i+len(marker):], " :")
	}
	return s
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// firstLine is s's first non-empty line, at most 200 characters.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return truncateRunes(l, 200)
		}
	}
	return ""
}

// lastLine is s's last non-empty line, at most 200 characters.
func lastLine(s string) string {
	ls := strings.Split(s, "\n")
	for i := len(ls) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(ls[i]); l != "" {
			return truncateRunes(l, 200)
		}
	}
	return ""
}

func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func splitNonEmpty(s, sep string) []string {
	var out []string
	for _, p := range strings.Split(s, sep) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// plural is "1 task", "3 tasks", "2 criteria".
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	switch word {
	case "criterion":
		return fmt.Sprintf("%d criteria", n)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// repoSource is a repository's path or URL.
func repoSource(r *schedulerv1.Repository) string {
	if p := r.GetPath(); p != "" {
		return p
	}
	return r.GetUrl()
}

// lessID orders task ids the way people number them: "1.2" < "1.10" < "2.1".
func lessID(a, b string) bool {
	as, bs := strings.FieldsFunc(a, isIDSep), strings.FieldsFunc(b, isIDSep)
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] == bs[i] {
			continue
		}
		var an, bn int
		_, ea := fmt.Sscanf(as[i], "%d", &an)
		_, eb := fmt.Sscanf(bs[i], "%d", &bn)
		if ea == nil && eb == nil && fmt.Sprint(an) == as[i] && fmt.Sprint(bn) == bs[i] {
			return an < bn
		}
		return as[i] < bs[i]
	}
	return len(as) < len(bs)
}

func isIDSep(r rune) bool { return r == '.' || r == '-' || r == '_' }

// formatDuration is "48s", "3m05s", "1h02m".
func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
