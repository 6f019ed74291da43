package scheduler

import (
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A merge conflict during a wave's integration is the conflicting task's, not the run's: the task
// ends BLOCKED (its list status BLOCKED_DCR, its error MERGE_CONFLICT naming the conflicting
// paths, as the agent reported them), a person decides (RetryTask after fixing the task, or
// SkipTask), and the integration is queued again without that task's commit, so the rest of the
// wave still lands. The blocked task counts as failed for the stop rules.

// codeMergeConflict is the error code of an integration whose cherry-pick conflicted.
const codeMergeConflict = "MERGE_CONFLICT"

// conflicting returns the index in merges of the task commit an integration error names: by its
// task id, else by the (short) commit the message names; -1 when none matches.
func conflicting(merges []*schedulerv1.IntegrationInput, e *commonv1.ErrorContext) int {
	for i, m := range merges {
		if e.GetTaskId() != "" && m.GetTaskId() == e.GetTaskId() {
			return i
		}
	}
	for _, word := range strings.Fields(e.GetMessage()) {
		if len(word) < 7 {
			continue
		}
		for i, m := range merges {
			if strings.HasPrefix(m.GetCommitSha(), word) {
				return i
			}
		}
	}
	return -1
}

// mergeConflict handles a failed integration a whose error is a merge conflict: it blocks the
// conflicting task and requeues the integration without it. It answers false (nothing changed)
// when the error names no task commit of the integration.
func (r *runner) mergeConflict(a *store.Assignment, w *schedulerv1.Wave) (bool, error) {
	i := conflicting(a.Merges, a.GetError())
	if i < 0 {
		return false, nil
	}
	m := a.Merges[i]
	ta, _, err := r.taskAssignment(m.GetTaskId())
	if err != nil {
		return false, err
	}
	why := a.GetError().GetMessage()
	ta.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED
	ta.Result = schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED
	ta.Error = &commonv1.ErrorContext{Code: codeMergeConflict, Message: why, TaskId: m.GetTaskId(), Timestamp: r.now()}
	if err := r.tx.PutAssignment(ta); err != nil {
		return false, err
	}
	if err := r.tx.SetTaskStatus(m.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR); err != nil {
		return false, err
	}
	if w.CompletedCount > 0 {
		w.CompletedCount--
	}
	if r.e.CompletedTasks > 0 {
		r.e.CompletedTasks--
	}
	w.FailedCount++
	r.e.FailedTasks++
	r.changed = true
	if err := r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_FAILED, ta,
		fmt.Sprintf("Task %s: %s BLOCKED: its commit %s does not merge onto wave %d: %s", m.GetTaskId(), m.GetTitle(), short(m.GetCommitSha()), w.GetWaveNumber(), why),
		map[string]any{"code": codeMergeConflict, "blocked": true, "commit": m.GetCommitSha()})); err != nil {
		return false, err
	}
	// The integration goes again without the blocked task's commit.
	a.Merges = append(a.Merges[:i:i], a.Merges[i+1:]...)
	a.PreviousErrors = lastErrors(append(a.PreviousErrors, a.GetError()))
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
	a.Attempt++
	a.Result, a.Error, a.CompleteTime, a.CommitSha = 0, nil, nil, ""
	if err := r.tx.PutAssignment(a); err != nil {
		return false, err
	}
	if err := r.putWave(w); err != nil {
		return false, err
	}
	if err := r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_REQUEUED, a,
		fmt.Sprintf("wave %d: integration queued again without task %s (%d task commits)", w.GetWaveNumber(), m.GetTaskId(), len(a.Merges)),
		map[string]any{"attempt": float64(a.GetAttempt()), "merges": float64(len(a.Merges))})); err != nil {
		return false, err
	}
	return true, r.stopRules(ta)
}
