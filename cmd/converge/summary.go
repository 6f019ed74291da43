package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// runSummary is what `converge run` and `converge watch` print when an execution ends (pb-build's
// completion summary): tasks by outcome, files changed, the verdict, the run branch and what to do
// next.
type runSummary struct {
	ex       *schedulerv1.Execution
	waves    []*schedulerv1.Wave
	listName string
	tasks    []summaryTask
	files    []string
	elapsed  time.Duration
	followUp followUp
}

// summaryTask is one task's result.
type summaryTask struct {
	ID           string   `json:"id"`
	Title        string   `json:"title"`
	Status       string   `json:"status"` // completed, failed, skipped, cancelled, not_run
	Wave         int32    `json:"wave"`
	Attempt      int32    `json:"attempt"`
	Tries        int32    `json:"tries"`
	Commit       string   `json:"commit,omitempty"`
	FilesChanged []string `json:"files_changed,omitempty"`
	Error        string   `json:"error,omitempty"`
}

// followUp is how the person can look further, for the next steps.
type followUp struct {
	// server is where the execution can still be looked at; "" when it went away with the
	// in-process suite.
	server string
	// kept says the in-process suite kept its data (--data-dir): `converge dev --data-dir` shows it.
	dataDir string
	// rerun is the command that runs the list again.
	rerun string
	// logFile is the in-process suite's log, when one was kept.
	logFile string
}

// maxSummaryFiles is how many changed files the summary lists.
const maxSummaryFiles = 40

// newSummary gathers an ended (or interrupted) execution's summary from its assignments.
func newSummary(ex *schedulerv1.Execution, waves []*schedulerv1.Wave, list *schedulerv1.TaskList, as []*schedulerv1.Assignment, elapsed time.Duration, f followUp) *runSummary {
	s := &runSummary{ex: ex, waves: waves, listName: list.GetSpec().GetName(), elapsed: elapsed, followUp: f}
	if st, en := ex.GetStartTime(), ex.GetEndTime(); st != nil && en != nil && elapsed == 0 {
		s.elapsed = en.AsTime().Sub(st.AsTime())
	}
	latest := map[string]*schedulerv1.Assignment{}
	for _, a := range as {
		if a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			continue
		}
		if prev, ok := latest[a.GetTaskId()]; !ok || a.GetWaveNumber() >= prev.GetWaveNumber() {
			latest[a.GetTaskId()] = a
		}
	}
	files := map[string]bool{}
	for _, t := range list.GetSpec().GetTasks() {
		a, ok := latest[t.GetId()]
		if !ok {
			continue // completed before this run: not part of it
		}
		st := summaryTask{ID: t.GetId(), Title: t.GetTitle(), Wave: a.GetWaveNumber(), Attempt: a.GetAttempt(), Tries: a.GetTries(),
			Commit: a.GetCommitSha(), FilesChanged: a.GetFilesChanged(), Error: a.GetError().GetMessage()}
		switch a.GetStatus() {
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED:
			st.Status = "completed"
			for _, f := range a.GetFilesChanged() {
				files[f] = true
			}
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED:
			st.Status = "failed"
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED:
			st.Status = "skipped"
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED:
			st.Status = "cancelled"
		default:
			st.Status = "not_run"
		}
		s.tasks = append(s.tasks, st)
	}
	for f := range files {
		s.files = append(s.files, f)
	}
	sort.Strings(s.files)
	return s
}

// converged says whether the run is done in the only sense that counts.
func (s *runSummary) converged() bool {
	return s.ex.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED
}

// render prints the summary.
func (s *runSummary) render(w io.Writer) {
	ex := s.ex
	fmt.Fprintf(w, "\n📋 Summary of %s (run %d of %q)\n\n", ex.GetId(), ex.GetRunNumber(), s.listName)
	fmt.Fprintf(w, "Tasks: %d/%d completed | %d skipped | %d failed\n", ex.GetCompletedTasks(), ex.GetTotalTasks(), ex.GetSkippedTasks(), ex.GetFailedTasks())
	fmt.Fprintf(w, "Time: %s\n", formatDuration(s.elapsed))
	fmt.Fprintf(w, "Verdict: %s\n", s.verdict())
	fmt.Fprintf(w, "Outcome: %s%s\n", outcomeName(ex), prefixed(" — ", firstLine(ex.GetStatusMessage())))

	if len(s.tasks) > 0 {
		fmt.Fprintf(w, "\nResults:\n")
		for _, t := range s.tasks {
			fmt.Fprintf(w, "  %s %s%s\n", statusIcon(t.Status), taskName(t.ID, t.Title), t.note())
		}
	}
	if len(s.files) > 0 {
		fmt.Fprintf(w, "\nFiles changed:\n")
		for i, f := range s.files {
			if i == maxSummaryFiles {
				fmt.Fprintf(w, "  … and %d more\n", len(s.files)-maxSummaryFiles)
				break
			}
			fmt.Fprintf(w, "  - %s\n", f)
		}
	}
	repo := ex.GetRepository()
	local := repo.GetPath()
	if branch := ex.GetRunBranch(); branch != "" && s.integrated() {
		fmt.Fprintf(w, "\nRun branch: %s (on top of %s)\n", branch, short(ex.GetBaseCommit()))
		if local != "" {
			fmt.Fprintf(w, "  git -C %s log --oneline %s\n", shellQuote(local), branch)
		} else {
			fmt.Fprintf(w, "  git fetch %s %s && git log --oneline FETCH_HEAD\n", shellQuote(repo.GetUrl()), branch)
		}
	}
	fmt.Fprintf(w, "\nNext steps:\n")
	for _, step := range s.nextSteps() {
		fmt.Fprintf(w, "  - %s\n", step)
	}
}

// verdict words the Verify Done verdict, or why there is none.
func (s *runSummary) verdict() string {
	v := s.ex.GetVerification()
	switch v.GetVerdict() {
	case commonv1.Verdict_VERDICT_CONVERGED:
		line := "✅ CONVERGED — " + plural(int(v.GetPassCount()), "criterion") + " passed"
		if n := v.GetPendingHumanCount(); n > 0 {
			line += fmt.Sprintf(", %d waiting for a person's sign-off", n)
		}
		return line + prefixed(" (report ", v.GetReportId()) + closeIf(v.GetReportId())
	case commonv1.Verdict_VERDICT_FAILED:
		line := fmt.Sprintf("❌ FAILED — %d of %d criteria failed", v.GetFailCount(), v.GetPassCount()+v.GetFailCount())
		if len(v.GetFailedCriteria()) > 0 {
			line += ": " + strings.Join(v.GetFailedCriteria(), ", ")
		}
		return line + prefixed(" (report ", v.GetReportId()) + closeIf(v.GetReportId())
	case commonv1.Verdict_VERDICT_BLOCKED:
		return "⛔ BLOCKED — " + firstLine(v.GetBlockReason())
	}
	if v != nil && !ended(s.ex) {
		return "pending — Verify Done is running"
	}
	return "none — the run ended before Verify Done"
}

// orIfEmpty answers s when list is empty, else "".
func orIfEmpty(list []string, s string) string {
	if len(list) == 0 {
		return s
	}
	return ""
}

func closeIf(s string) string {
	if s == "" {
		return ""
	}
	return ")"
}

// integrated says whether any wave moved the run branch.
func (s *runSummary) integrated() bool {
	for _, w := range s.waves {
		if c := w.GetIntegrationCommit(); c != "" && c != w.GetBaseCommit() {
			return true
		}
	}
	return false
}

// nextSteps says what to do now, by outcome.
func (s *runSummary) nextSteps() []string {
	ex := s.ex
	var steps []string
	repo := ex.GetRepository().GetPath()
	branch := ex.GetRunBranch()
	again := prefixed(": ", s.followUp.rerun) // the command that runs it again, when known
	inspect := ""
	switch {
	case s.followUp.server != "":
		inspect = fmt.Sprintf("converge logs %s --server %s", ex.GetId(), s.followUp.server)
	case s.followUp.dataDir != "":
		inspect = fmt.Sprintf("converge dev --data-dir %s, then converge logs %s", shellQuote(s.followUp.dataDir), ex.GetId())
	}
	switch ex.GetOutcome() {
	case commonv1.Outcome_OUTCOME_CONVERGED, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN:
		if repo != "" && branch != "" && s.integrated() {
			steps = append(steps,
				fmt.Sprintf("Review the changes: git -C %s diff %s..%s", shellQuote(repo), short(ex.GetBaseCommit()), branch),
				fmt.Sprintf("Take them: git -C %s merge %s", shellQuote(repo), branch))
		}
		if ex.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
			// Only with the report to sign: a step names no id it does not have.
			if report := ex.GetVerification().GetReportId(); report != "" {
				steps = append(steps, "Sign off the HUMAN_VERIFY criteria (VerifierService/RecordHumanVerdict) for report "+report)
			} else {
				// No report: Verify Done had nothing to check (no done-criteria, no validation).
				steps = append(steps, "Confirm the result yourself: nothing was checked for you (give done-criteria with --criteria, or tasks a validation command, to have Verify Done check it)")
			}
		}
		if len(steps) == 0 {
			steps = append(steps, "Nothing: every task is done and Verify Done agreed")
		}
	case commonv1.Outcome_OUTCOME_CANCELLED:
		steps = append(steps, "Run it again when ready"+again)
	default:
		if inspect != "" {
			steps = append(steps, "Read what went wrong: "+inspect+" --type task_failed,integration_failed,verdict")
		}
		if ex.GetFailedTasks() > 0 {
			steps = append(steps, "Fix the failed tasks (their command, validation or the repository) and run again"+again)
		} else if v := ex.GetVerification(); v.GetVerdict() == commonv1.Verdict_VERDICT_FAILED {
			steps = append(steps, "The tasks ran but the result misses "+prefixed("done-criteria ", strings.Join(v.GetFailedCriteria(), ", "))+
				orIfEmpty(v.GetFailedCriteria(), "done-criteria")+": add or fix tasks that meet them and run again"+again)
		} else {
			steps = append(steps, "Remove the cause above and run again"+again)
		}
		if repo != "" && branch != "" && s.integrated() {
			steps = append(steps, fmt.Sprintf("What did get built is on the run branch: git -C %s log --oneline %s", shellQuote(repo), branch))
		}
	}
	if s.followUp.server == "" && s.followUp.dataDir == "" && !s.converged() {
		steps = append(steps, "This run's log went away with its in-memory suite: add --data-dir DIR to keep it for converge logs")
	}
	if s.followUp.logFile != "" && (!s.converged() || s.followUp.dataDir != "") {
		steps = append(steps, "The suite's own log: "+s.followUp.logFile)
	}
	return steps
}

func (t summaryTask) note() string {
	switch t.Status {
	case "completed":
		if t.Tries > 1 {
			return fmt.Sprintf(" (%d tries)", t.Tries)
		}
	case "failed":
		n := ""
		if t.Tries > 1 {
			n = fmt.Sprintf(" after %d tries", t.Tries)
		}
		return " (failed" + n + prefixed(": ", firstLine(t.Error)) + ")"
	case "skipped":
		return " (skipped" + prefixed(": ", firstLine(t.Error)) + ")"
	case "cancelled":
		return " (cancelled)"
	case "not_run":
		return " (not run)"
	}
	return ""
}

func statusIcon(s string) string {
	switch s {
	case "completed":
		return "✅"
	case "failed":
		return "❌"
	case "skipped":
		return "⏭️"
	case "cancelled":
		return "🛑"
	}
	return "⬜"
}

func outcomeName(ex *schedulerv1.Execution) string {
	if o := ex.GetOutcome(); o != commonv1.Outcome_OUTCOME_UNSPECIFIED {
		return strings.TrimPrefix(o.String(), "OUTCOME_")
	}
	return strings.TrimPrefix(ex.GetStatus().String(), "EXECUTION_STATUS_")
}

// ended says whether an execution has ended.
func ended(ex *schedulerv1.Execution) bool {
	switch ex.GetStatus() {
	case schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return true
	}
	return false
}

// shellQuote quotes s for a shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '_' || r == '-' || r == ':' || r == '@' || r == '+' || r == '=' || r == ',' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// summaryJSON is the --json form of a summary: the figures, then the execution and its waves as
// the API returns them.
type summaryJSON struct {
	ExecutionID    string          `json:"execution_id"`
	TaskList       string          `json:"task_list"`
	Status         string          `json:"status"`
	Outcome        string          `json:"outcome"`
	Converged      bool            `json:"converged"`
	StatusMessage  string          `json:"status_message,omitempty"`
	TasksTotal     int32           `json:"tasks_total"`
	TasksCompleted int32           `json:"tasks_completed"`
	TasksSkipped   int32           `json:"tasks_skipped"`
	TasksFailed    int32           `json:"tasks_failed"`
	Repository     string          `json:"repository,omitempty"`
	BaseCommit     string          `json:"base_commit,omitempty"`
	RunBranch      string          `json:"run_branch,omitempty"`
	FilesChanged   []string        `json:"files_changed"`
	Tasks          []summaryTask   `json:"tasks"`
	ElapsedSeconds float64         `json:"elapsed_seconds"`
	Verification   json.RawMessage `json:"verification,omitempty"`
	Execution      json.RawMessage `json:"execution"`
	Waves          json.RawMessage `json:"waves"`
}

// writeJSON prints the summary as one JSON document.
func (s *runSummary) writeJSON(w io.Writer) error {
	mo := protojson.MarshalOptions{UseProtoNames: true}
	exJSON, err := mo.Marshal(s.ex)
	if err != nil {
		return err
	}
	waves, err := mo.Marshal(&schedulerv1.GetExecutionResponse{Waves: s.waves})
	if err != nil {
		return err
	}
	var wrapped struct {
		Waves json.RawMessage `json:"waves"`
	}
	if err := json.Unmarshal(waves, &wrapped); err != nil {
		return err
	}
	if wrapped.Waves == nil {
		wrapped.Waves = json.RawMessage("[]")
	}
	out := summaryJSON{
		ExecutionID: s.ex.GetId(), TaskList: s.listName, Status: strings.TrimPrefix(s.ex.GetStatus().String(), "EXECUTION_STATUS_"),
		Outcome: strings.TrimPrefix(s.ex.GetOutcome().String(), "OUTCOME_"), Converged: s.converged(), StatusMessage: s.ex.GetStatusMessage(),
		TasksTotal: s.ex.GetTotalTasks(), TasksCompleted: s.ex.GetCompletedTasks(), TasksSkipped: s.ex.GetSkippedTasks(), TasksFailed: s.ex.GetFailedTasks(),
		Repository: repoSource(s.ex.GetRepository()), BaseCommit: s.ex.GetBaseCommit(), RunBranch: s.ex.GetRunBranch(),
		FilesChanged: append([]string{}, s.files...), Tasks: append([]summaryTask{}, s.tasks...), ElapsedSeconds: s.elapsed.Seconds(),
		Execution: exJSON, Waves: wrapped.Waves,
	}
	if v := s.ex.GetVerification(); v != nil {
		if out.Verification, err = mo.Marshal(v); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
