package worker

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/agent/executor"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// integrate merges a wave's task commits onto the run branch (one cherry-picked commit per task,
// in order), runs the codebase validation (the last wave: every triggered level), and pushes the
// run branch.
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

// levels runs the validation levels of an integration: codebase always; for the final
// integration also api and ui when their trigger globs match a path the run changed.
func (w *Worker) levels(ctx context.Context, ca *schedulerv1.ClaimedAssignment, wt *workspace.Worktree) []*schedulerv1.ValidationLevelResult {
	v := ca.GetValidation()
	vtimeout := ca.GetOptions().GetAgentConfig().GetValidationTimeout().AsDuration() // resolved by the Scheduler
	var out []*schedulerv1.ValidationLevelResult
	run := func(level schedulerv1.ValidationLevel, tv *commonv1.TaskValidation, why string) bool {
		r := &schedulerv1.ValidationLevelResult{Level: level}
		switch {
		case strings.TrimSpace(tv.GetCommand()) == "":
			r.Message = "no command"
		case why != "":
			r.Message = why
		default:
			timeout := vtimeout
			if tv.GetTimeout() != nil {
				timeout = tv.GetTimeout().AsDuration()
			}
			res := executor.Validate(ctx, wt.Dir, tv, timeout, outputCap, executor.WithProcessGroups(w.sess.groups))
			r.Ran, r.Passed, r.ExitCode = true, res.Passed, int32(max(min(res.ExitCode, 255), -1))
			r.Duration, r.OutputTail, r.Message = durationpb.New(res.Duration), tail(res.Output, 65536), truncate(res.Message, 4096)
		}
		out = append(out, r)
		return !r.Ran || r.Passed
	}
	if !run(schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, v.GetCodebase(), "") {
		return out // stop early on a codebase failure
	}
	if !ca.GetFinalIntegration() {
		return out
	}
	changed := w.runChanges(ctx, ca, wt)
	for _, lv := range []struct {
		level schedulerv1.ValidationLevel
		tv    *commonv1.TaskValidation
		globs []string
	}{
		{schedulerv1.ValidationLevel_VALIDATION_LEVEL_API, v.GetApi(), v.GetApiTriggerGlobs()},
		{schedulerv1.ValidationLevel_VALIDATION_LEVEL_UI, v.GetUi(), v.GetUiTriggerGlobs()},
	} {
		if lv.tv == nil {
			continue
		}
		why := ""
		if len(lv.globs) > 0 && changed != nil && !anyMatch(lv.globs, changed) {
			why = "not triggered: no change under " + strings.Join(lv.globs, ", ")
		}
		run(lv.level, lv.tv, why)
	}
	return out
}

// runChanges lists the paths the run changed against the repository's base ref; nil when unknown
// (then every level with a command runs).
func (w *Worker) runChanges(ctx context.Context, ca *schedulerv1.ClaimedAssignment, wt *workspace.Worktree) []string {
	if !wt.HasRepository() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ref := orDefault(ca.GetRepository().GetBaseRef(), "HEAD")
	cmd := exec.CommandContext(ctx, "git", "diff", "--name-only", "-z", ref+"...HEAD")
	cmd.Dir = wt.Dir
	b, err := cmd.Output()
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range strings.Split(string(b), "\x00") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

func anyMatch(globs, paths []string) bool {
	for _, g := range globs {
		for _, p := range paths {
			if repopath.Match(g, p) {
				return true
			}
		}
	}
	return false
}
