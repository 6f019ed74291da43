package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// integrate merges a wave's task commits onto the run branch (one cherry-picked commit per task,
// in order), runs the validation levels on the integrated commit (codebase → api → ui, each
// triggered level, stopping at the first failure), and pushes the run branch.
func (w *Worker) integrate(ctx context.Context, l *lease) outcome {
	ca := l.ca
	a := ca.GetAssignment()
	fail := func(code, msg string) outcome {
		return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, tries: 0,
			err: &commonv1.ErrorContext{Code: code, Message: truncate(msg, 65536), Timestamp: now()}}
	}
	l.event(commonv1.EventType_EVENT_TYPE_INFO, fmt.Sprintf("integrating wave %d: %d task commits", a.GetWaveNumber(), len(ca.GetMerges())), nil)
	l.progress(10, "integrate")
	wt, err := w.worktree(ctx, ca, fmt.Sprintf("%s-wave%d-%d", a.GetExecutionId(), a.GetWaveNumber(), a.GetAttempt()))
	if err != nil {
		return fail(workspaceCode(err), err.Error())
	}
	defer w.removeWorktree(ctx, wt)
	head := ca.GetBaseCommit()
	if wt.HasRepository() && len(ca.GetMerges()) > 0 {
		shas := make([]string, len(ca.GetMerges()))
		for i, m := range ca.GetMerges() {
			shas[i] = m.GetCommitSha()
		}
		h, err := wt.CherryPick(ctx, shas, identity)
		var conflict *workspace.ConflictError
		if errors.As(err, &conflict) {
			out := fail("MERGE_CONFLICT", fmt.Sprintf("task commit %s conflicts on %s", short(conflict.Commit), strings.Join(conflict.Paths, ", ")))
			// The Scheduler blocks the conflicting task (and integrates the rest without it).
			for _, m := range ca.GetMerges() {
				if m.GetCommitSha() == conflict.Commit {
					out.err.TaskId = m.GetTaskId()
				}
			}
			return out
		}
		if err != nil {
			return fail("MERGE_FAILED", err.Error())
		}
		head = h
	}
	l.progress(50, "validate")
	levels := w.levels(ctx, ca, wt)
	out := outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, levels: levels}
	for _, lv := range levels {
		if lv.GetRan() && !lv.GetPassed() {
			out = fail("VALIDATION_FAILED", fmt.Sprintf("%s validation failed: %s", strings.TrimPrefix(lv.GetLevel().String(), "VALIDATION_LEVEL_"), lv.GetMessage()))
			out.levels = levels
			out.validationOut = lv.GetOutputTail()
			return out
		}
	}
	if wt.HasRepository() && ca.GetRunBranch() != "" {
		// Check the lease right before pushing: a holder that lost it must not move the branch.
		if !l.report(ctx) {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED}
		}
		if err := wt.Push(ctx, head, "refs/heads/"+ca.GetRunBranch(), true); err != nil {
			return fail("PUSH_FAILED", err.Error())
		}
		out.commit = head
	}
	return out
}
