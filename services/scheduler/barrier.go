package scheduler

import (
	"fmt"
	"strings"
	"unicode/utf8"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// The wave barrier: a wave opens, its tasks end, and once all are terminal its integration
// assignment is queued; an integrated wave opens the next one or hands the run to Verify Done.
// Stop rules and the budget are checked as tasks end.

// startWave opens wave n: its base is the previous wave's integration commit (the execution's
// base for wave 1); tasks whose dependencies failed (or were cancelled, or skipped because of a
// failure) are skipped. A dependency skipped on purpose (SkipTask, or by the agent) counts as
// satisfied, as in the seed (001: a SKIPPED dependency does not hold its dependents back).
func (r *runner) startWave(n int32) error {
	w, err := r.wave(n)
	if err != nil {
		return err
	}
	if n == 1 {
		w.BaseCommit = r.e.GetBaseCommit()
	} else {
		prev, err := r.wave(n - 1)
		if err != nil {
			return err
		}
		w.BaseCommit = prev.GetIntegrationCommit()
	}
	w.Status = schedulerv1.WaveStatus_WAVE_STATUS_RUNNING
	w.StartTime = r.now()
	r.e.CurrentWave = n
	r.changed = true
	if err := r.log(waveEntry(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, n,
		fmt.Sprintf("wave %d/%d started: %d tasks", n, r.e.GetWaveCount(), w.GetTaskCount()),
		map[string]any{"wave_number": float64(n), "task_count": float64(w.GetTaskCount()), "base_commit": w.GetBaseCommit()})); err != nil {
		return err
	}
	if err := r.skipDependentsOfFailed(n, w); err != nil {
		return err
	}
	if err := r.putWave(w); err != nil {
		return err
	}
	return r.barrier(w)
}

// skipDependentsOfFailed skips the pending tasks of wave n whose dependencies failed in this
// execution (or were cancelled, or skipped because of a failure). An execution that has no
// failed and no skipped task has no such dependency (the counters follow every FAILED and
// SKIPPED task assignment; CANCELLED ones exist only once the run has ended, when no wave
// opens), so the read of the execution's failed assignments, O(tasks) per wave, is skipped then.
func (r *runner) skipDependentsOfFailed(n int32, w *schedulerv1.Wave) error {
	if r.e.GetFailedTasks() == 0 && r.e.GetSkippedTasks() == 0 {
		return nil
	}
	bad, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), Statuses: []schedulerv1.AssignmentStatus{
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED,
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED}})
	if err != nil {
		return err
	}
	notDone := map[string]bool{}
	for _, a := range bad {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK &&
			(a.GetStatus() != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED || a.GetError().GetCode() == codeDependencyFailed) {
			notDone[a.GetTaskId()] = true
		}
	}
	if len(notDone) > 0 {
		mine, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), WaveNumber: n,
			Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING}})
		if err != nil {
			return err
		}
		for _, a := range mine {
			for _, d := range r.task(a.GetTaskId()).GetDependsOn() {
				if notDone[d] {
					notDone[a.GetTaskId()] = true
					if err := r.skip(a, w, codeDependencyFailed, fmt.Sprintf("dependency %s did not complete", d)); err != nil {
						return err
					}
					break
				}
			}
		}
	}
	return nil
}

// Codes of a skipped assignment's error: skipped on purpose (SkipTask), or because a dependency
// failed (then its dependents are skipped too, and the task stays PENDING in the list: it runs
// again in the next execution).
const (
	codeSkipped          = "SKIPPED"
	codeDependencyFailed = "DEPENDENCY_FAILED"
)

// skip ends a pending task assignment SKIPPED with code (codeSkipped or codeDependencyFailed).
func (r *runner) skip(a *store.Assignment, w *schedulerv1.Wave, code, why string) error {
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED
	a.Result = schedulerv1.CompletionResult_COMPLETION_RESULT_SKIPPED
	a.Error = &commonv1.ErrorContext{Code: code, Message: why, TaskId: a.GetTaskId(), Timestamp: r.now()}
	a.CompleteTime = r.now()
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	w.SkippedCount++
	r.e.SkippedTasks++
	r.changed = true
	listStatus := commonv1.TaskStatus_TASK_STATUS_SKIPPED
	if code == codeDependencyFailed {
		listStatus = commonv1.TaskStatus_TASK_STATUS_PENDING
	}
	if err := r.tx.SetTaskStatus(a.GetTaskId(), listStatus); err != nil {
		return err
	}
	return r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_SKIPPED, a, fmt.Sprintf("Task %s: %s skipped: %s", a.GetTaskId(), r.task(a.GetTaskId()).GetTitle(), why), nil))
}

// barrier moves wave w on once every task in it is terminal: to an integration assignment, or
// straight to the next wave (or to verification) when there is nothing to integrate.
func (r *runner) barrier(w *schedulerv1.Wave) error { return r.barrierAfter(w, nil) }

// barrierAfter is barrier once task assignment last (nil: none) of w ended in this transaction.
func (r *runner) barrierAfter(w *schedulerv1.Wave, last *store.Assignment) error {
	if ended(r.e) || w.GetStatus() != schedulerv1.WaveStatus_WAVE_STATUS_RUNNING {
		return nil
	}
	if w.GetCompletedCount()+w.GetFailedCount()+w.GetSkippedCount() < w.GetTaskCount() {
		return nil
	}
	final := w.GetWaveNumber() == r.e.GetWaveCount()
	merges, err := r.merges(w, last)
	if err != nil {
		return err
	}
	levels := r.tl.Spec.GetValidation()
	validate := levels.GetCodebase().GetCommand() != "" || (final && (levels.GetApi().GetCommand() != "" || levels.GetUi().GetCommand() != ""))
	if len(merges) == 0 && !validate {
		w.Status = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED
		w.IntegrationCommit = w.GetBaseCommit()
		w.EndTime = r.now()
		if err := r.putWave(w); err != nil {
			return err
		}
		if err := r.log(waveEntry(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, w.GetWaveNumber(),
			fmt.Sprintf("wave %d/%d completed: %d completed, %d failed, %d skipped; nothing to integrate", w.GetWaveNumber(), r.e.GetWaveCount(),
				w.GetCompletedCount(), w.GetFailedCount(), w.GetSkippedCount()), map[string]any{"wave_number": float64(w.GetWaveNumber())})); err != nil {
			return err
		}
		return r.afterWave(w)
	}
	w.Status = schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING
	if err := r.putWave(w); err != nil {
		return err
	}
	a := &store.Assignment{
		Assignment: &schedulerv1.Assignment{
			Id: ids.New("as", r.tx.Now()), Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION,
			ExecutionId: r.e.GetId(), WaveId: w.GetId(), WaveNumber: w.GetWaveNumber(),
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1,
		},
		Position: -1, Merges: merges, FinalIntegration: final,
	}
	if err := r.tx.InsertAssignment(a); err != nil {
		return err
	}
	return r.log(entry(commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, a,
		fmt.Sprintf("wave %d/%d: integration of %d task commits queued", w.GetWaveNumber(), r.e.GetWaveCount(), len(merges)),
		map[string]any{"wave_number": float64(w.GetWaveNumber()), "merges": float64(len(merges)), "final": final}))
}

// afterWave starts the next wave, or hands a finished run to verification; a gate of w that
// requires a sign-off first pauses the run until SignOffGate decides (gatesignoff.go).
func (r *runner) afterWave(w *schedulerv1.Wave) error {
	if gate, err := r.signoffGate(w); err != nil || gate != nil {
		if err != nil {
			return err
		}
		return r.awaitSignoff(gate, w)
	}
	if w.GetWaveNumber() < r.e.GetWaveCount() {
		return r.startWave(w.GetWaveNumber() + 1)
	}
	return r.toVerification(w.GetIntegrationCommit())
}

// toVerification ends the waves: the run waits for the driver's Verify Done (an unset verdict in
// Verification marks it; GetExecution shows it while the Verifier works), which this replica's
// driver starts as soon as the transaction commits (update kicks it) when it leads, and the
// leader's next round otherwise.
func (r *runner) toVerification(commit string) error {
	r.e.CurrentWave = r.e.GetWaveCount()
	r.changed = true
	if r.e.GetFailedTasks() > 0 {
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
			fmt.Sprintf("%d tasks failed", r.e.GetFailedTasks()))
	}
	r.e.Verification = &schedulerv1.VerifySummary{}
	r.verifyDue = true
	return r.log(entry(commonv1.EventType_EVENT_TYPE_VERIFICATION_STARTED, nil,
		"every wave integrated: Verify Done against the done-criteria", map[string]any{"commit": commit}))
}

// stopRules applies the seed's stop rules after a task failed.
func (r *runner) stopRules(a *store.Assignment) error {
	t := r.task(a.GetTaskId())
	if tasklist.IsGate(t) {
		// A milestone or phase gate (seed 004): the next phase must not start on work that
		// failed its gate check.
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
			fmt.Sprintf("gate %s failed (%s): %s", t.GetId(), t.GetTitle(), orDefault(a.GetError().GetMessage(), "its check failed")))
	}
	for _, p := range r.e.GetOptions().GetCriticalPhases().GetPhases() {
		if t.GetPhase() != "" && strings.EqualFold(p, t.GetPhase()) {
			return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
				fmt.Sprintf("critical phase %s failed: task %s", t.GetPhase(), a.GetTaskId()))
		}
	}
	if max := r.e.GetOptions().GetMaxFailedTasks(); r.e.GetFailedTasks() > max {
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
			fmt.Sprintf("%d failed tasks (more than %d)", r.e.GetFailedTasks(), max))
	}
	return nil
}

// budget ends the run ESCALATED when its attempts budget is spent.
func (r *runner) budget() error {
	if max := r.e.GetOptions().GetMaxTotalAttempts(); max > 0 && r.e.GetTotalAttempts() >= max && !ended(r.e) {
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
			fmt.Sprintf("budget spent: %d executor runs (max_total_attempts %d)", r.e.GetTotalAttempts(), max))
	}
	return nil
}

// taskEnded updates the counts after task assignment a became terminal with status st, and
// moves the run on.
func (r *runner) taskEnded(a *store.Assignment, w *schedulerv1.Wave) error {
	switch a.GetStatus() {
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED:
		w.CompletedCount++
		r.e.CompletedTasks++
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED:
		w.FailedCount++
		r.e.FailedTasks++
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED:
		w.SkippedCount++
		r.e.SkippedTasks++
	}
	r.changed = true
	if err := r.putWave(w); err != nil {
		return err
	}
	if a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED {
		if err := r.stopRules(a); err != nil || ended(r.e) {
			return err
		}
	}
	if err := r.budget(); err != nil || ended(r.e) {
		return err
	}
	return r.barrierAfter(w, a)
}

// merges answers the task commits wave w integrates: those of its COMPLETED task assignments.
// The wave's completed count is the number of those (taskEnded counts every task assignment
// that becomes COMPLETED, mergeConflict uncounts one it blocks), so no read is needed when it
// says which they are: none, or only last, the task assignment of w that just completed in this
// transaction (a chain's one-task wave: one round trip less between a completion and its
// dependent's lease). Otherwise they are read.
func (r *runner) merges(w *schedulerv1.Wave, last *store.Assignment) ([]*schedulerv1.IntegrationInput, error) {
	var done []*store.Assignment
	switch {
	case w.GetCompletedCount() == 0:
	case w.GetCompletedCount() == 1 && last != nil && last.GetWaveNumber() == w.GetWaveNumber() &&
		last.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED:
		done = []*store.Assignment{last}
	default:
		var err error
		if done, err = r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), WaveNumber: w.GetWaveNumber(),
			Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED}}); err != nil {
			return nil, err
		}
	}
	var merges []*schedulerv1.IntegrationInput
	for _, a := range done {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && a.GetCommitSha() != "" {
			merges = append(merges, &schedulerv1.IntegrationInput{TaskId: a.GetTaskId(), Title: r.task(a.GetTaskId()).GetTitle(),
				CommitSha: a.GetCommitSha(), TaskRef: a.GetTaskRef()})
		}
	}
	return merges, nil
}

// integrated ends a wave's integration.
func (r *runner) integrated(a *store.Assignment, w *schedulerv1.Wave, req *schedulerv1.CompleteTaskRequest) error {
	if req.GetResult() == schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED {
		return r.requeue(a, w, "CANCELLED", "the agent stopped before finishing the integration")
	}
	if a.FinalIntegration {
		r.e.ValidationResults = req.GetLevelResults()
	}
	if req.GetResult() != schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED && a.GetError().GetCode() == codeMergeConflict {
		if done, err := r.mergeConflict(a, w); err != nil || done {
			return err
		}
	}
	if req.GetResult() != schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED {
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED
		w.Status = schedulerv1.WaveStatus_WAVE_STATUS_FAILED
		w.EndTime = r.now()
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		if err := r.putWave(w); err != nil {
			return err
		}
		why := fmt.Sprintf("integration of wave %d failed: %s", w.GetWaveNumber(), a.GetError().GetMessage())
		data := map[string]any{"code": a.GetError().GetCode()}
		// A validation level that failed on the integrated commit: which one, and its output's tail.
		for _, lr := range req.GetLevelResults() {
			if lr.GetRan() && !lr.GetPassed() {
				data["level"] = strings.ToLower(strings.TrimPrefix(lr.GetLevel().String(), "VALIDATION_LEVEL_"))
				data["exit_code"] = float64(lr.GetExitCode())
				why = fmt.Sprintf("wave %d: validation level %s failed on the integrated commit: %s", w.GetWaveNumber(), data["level"], a.GetError().GetMessage())
				break
			}
		}
		if out := req.GetValidationOutputTail(); out != "" {
			data["output_tail"] = tailString(out, waveOutputTail)
		}
		if err := r.log(entry(commonv1.EventType_EVENT_TYPE_INTEGRATION_FAILED, a, why, data)); err != nil {
			return err
		}
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED, why)
	}
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED
	w.Status = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED
	w.IntegrationCommit = a.GetCommitSha()
	if w.IntegrationCommit == "" {
		w.IntegrationCommit = w.GetBaseCommit()
	}
	w.EndTime = r.now()
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	if err := r.putWave(w); err != nil {
		return err
	}
	if err := r.log(
		entry(commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, a, fmt.Sprintf("wave %d integrated at %s (%d task commits)", w.GetWaveNumber(), short(w.GetIntegrationCommit()), len(a.Merges)),
			map[string]any{"commit": w.GetIntegrationCommit()}),
		waveEntry(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, w.GetWaveNumber(), fmt.Sprintf("wave %d/%d completed: %d completed, %d failed, %d skipped", w.GetWaveNumber(), r.e.GetWaveCount(),
			w.GetCompletedCount(), w.GetFailedCount(), w.GetSkippedCount()), map[string]any{"wave_number": float64(w.GetWaveNumber())}),
	); err != nil {
		return err
	}
	for _, lr := range req.GetLevelResults() {
		if lr.GetRan() && !lr.GetPassed() {
			return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
				fmt.Sprintf("validation level %s failed: %s", lr.GetLevel(), orDefault(lr.GetMessage(), fmt.Sprintf("exit code %d", lr.GetExitCode()))))
		}
	}
	// The merged commits are on the run branch: their dependents may start (eager.go) once the
	// next wave opens, from this integration.
	merged := make([]string, 0, len(a.Merges))
	for _, m := range a.Merges {
		merged = append(merged, m.GetTaskId())
	}
	if err := r.satisfied(merged...); err != nil {
		return err
	}
	return r.afterWave(w)
}

// waveOutputTail is how much of a failed wave validation's output its INTEGRATION_FAILED event
// keeps (the assignment keeps up to 64 KiB).
const waveOutputTail = 4096

// tailString is the last n bytes of s (at a UTF-8 boundary), marked when cut.
func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut++
	}
	return "[…]" + s[cut:]
}
