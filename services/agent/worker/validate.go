package worker

import (
	"context"
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

// Validate (seed 000 §PIV, seed 003): after each try the task's own validation command proves
// the task done; then the project's validation levels run in order, codebase → api → ui,
// stopping at the first that fails (seed 000). The codebase level is the project's full test
// command: it runs after every task when the task list sets it (seed 003, "run the whole suite
// after each task"); api and ui run when their command is set and a path the task changed
// matches their trigger globs (no globs: always). A failing level fails the try like a failing
// validation command (VALIDATION_FAILED, the level named, its output tail kept). An
// integration runs the same levels on the wave's integrated commit (integrate.go: codebase
// each wave, every triggered level on the last).

// tryValidation is what Validate found for one try.
type tryValidation struct {
	code, why, output string // set when it failed
	tail              string // the last command's output, for the completion
	levels            []*schedulerv1.ValidationLevelResult
}

// validateTry runs the task's validation command and the project's levels for one try.
func (w *Worker) validateTry(ctx context.Context, l *lease, wt *workspace.Worktree, try int, vtimeout time.Duration) tryValidation {
	var out tryValidation
	t := l.ca.GetTask()
	if v := t.GetValidation(); strings.TrimSpace(v.GetCommand()) != "" {
		vr := executor.Validate(ctx, wt.Dir, v, vtimeout, outputCap, executor.WithProcessGroups(w.sess.groups), executor.WithSandbox(w.cfg.Sandbox), executor.WithCgroupParent(w.sess.cgroup))
		l.event(commonv1.EventType_EVENT_TYPE_VALIDATION_RUN, fmt.Sprintf("validation %q: passed=%t exit=%d", v.GetCommand(), vr.Passed, vr.ExitCode),
			map[string]any{"passed": vr.Passed, "exit_code": float64(vr.ExitCode), "try": float64(try)})
		out.tail = vr.Output
		if !vr.Passed {
			out.code, out.why, out.output = "VALIDATION_FAILED", "validation failed: "+vr.Message, vr.Output
			return out
		}
	}
	out.levels = w.taskLevels(ctx, l.ca, wt)
	for _, lv := range out.levels {
		l.event(commonv1.EventType_EVENT_TYPE_VALIDATION_RUN, fmt.Sprintf("%s validation: ran=%t passed=%t %s", levelName(lv.GetLevel()), lv.GetRan(), lv.GetPassed(), lv.GetMessage()),
			map[string]any{"level": levelName(lv.GetLevel()), "ran": lv.GetRan(), "passed": lv.GetPassed(), "try": float64(try)})
		if lv.GetRan() {
			out.tail = lv.GetOutputTail()
		}
		if lv.GetRan() && !lv.GetPassed() {
			out.code, out.why, out.output = "VALIDATION_FAILED", fmt.Sprintf("%s validation failed: %s", levelName(lv.GetLevel()), lv.GetMessage()), lv.GetOutputTail()
		}
	}
	return out
}

// taskLevels runs the project's levels after a task's try: codebase, api, ui in order, each
// when its command is set (api and ui when triggered by the task's changes), stopping at the
// first failure.
func (w *Worker) taskLevels(ctx context.Context, ca *schedulerv1.ClaimedAssignment, wt *workspace.Worktree) []*schedulerv1.ValidationLevelResult {
	v := ca.GetValidation()
	if v.GetCodebase().GetCommand() == "" && v.GetApi().GetCommand() == "" && v.GetUi().GetCommand() == "" {
		return nil
	}
	var changed []string
	if wt.HasRepository() {
		if cs, err := wt.Changes(ctx); err == nil {
			for _, c := range cs {
				changed = append(changed, c.Path)
			}
		}
	}
	var out []*schedulerv1.ValidationLevelResult
	for _, lv := range []struct {
		level schedulerv1.ValidationLevel
		tv    *commonv1.TaskValidation
		globs []string
	}{
		{schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, v.GetCodebase(), nil},
		{schedulerv1.ValidationLevel_VALIDATION_LEVEL_API, v.GetApi(), v.GetApiTriggerGlobs()},
		{schedulerv1.ValidationLevel_VALIDATION_LEVEL_UI, v.GetUi(), v.GetUiTriggerGlobs()},
	} {
		if strings.TrimSpace(lv.tv.GetCommand()) == "" {
			continue
		}
		why := ""
		if len(lv.globs) > 0 && wt.HasRepository() && !anyMatch(lv.globs, changed) {
			why = "not triggered: the task changed nothing under " + strings.Join(lv.globs, ", ")
		}
		r := w.runLevel(ctx, ca, wt, lv.level, lv.tv, why)
		out = append(out, r)
		if r.GetRan() && !r.GetPassed() {
			break // stop at the first failing level
		}
	}
	return out
}

// runLevel runs one validation level in wt (or records why it did not run).
func (w *Worker) runLevel(ctx context.Context, ca *schedulerv1.ClaimedAssignment, wt *workspace.Worktree, level schedulerv1.ValidationLevel,
	tv *commonv1.TaskValidation, why string) *schedulerv1.ValidationLevelResult {
	r := &schedulerv1.ValidationLevelResult{Level: level}
	switch {
	case strings.TrimSpace(tv.GetCommand()) == "":
		r.Message = "no command"
	case why != "":
		r.Message = why
	default:
		timeout := ca.GetOptions().GetAgentConfig().GetValidationTimeout().AsDuration() // resolved by the Scheduler
		if tv.GetTimeout() != nil {
			timeout = tv.GetTimeout().AsDuration()
		}
		res := executor.Validate(ctx, wt.Dir, tv, timeout, outputCap, executor.WithProcessGroups(w.sess.groups), executor.WithSandbox(w.cfg.Sandbox), executor.WithCgroupParent(w.sess.cgroup))
		r.Ran, r.Passed, r.ExitCode = true, res.Passed, int32(max(min(res.ExitCode, 255), -1))
		r.Duration, r.OutputTail, r.Message = durationpb.New(res.Duration), tail(res.Output, 65536), truncate(res.Message, 4096)
	}
	return r
}

// levels runs the validation levels of an integration on the integrated commit (seed 000's
// validate phase, per wave): codebase, then api and ui when their trigger globs match a path the
// wave changed (the last wave: a path the run changed), stopping at the first failing level.
func (w *Worker) levels(ctx context.Context, ca *schedulerv1.ClaimedAssignment, wt *workspace.Worktree) []*schedulerv1.ValidationLevelResult {
	v := ca.GetValidation()
	out := []*schedulerv1.ValidationLevelResult{w.runLevel(ctx, ca, wt, schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, v.GetCodebase(), "")}
	if out[0].GetRan() && !out[0].GetPassed() {
		return out // stop early on a codebase failure
	}
	if v.GetApi().GetCommand() == "" && v.GetUi().GetCommand() == "" {
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
		r := w.runLevel(ctx, ca, wt, lv.level, lv.tv, why)
		out = append(out, r)
		if r.GetRan() && !r.GetPassed() {
			break // stop at the first failing level
		}
	}
	return out
}

// levelName is "codebase", "api" or "ui".
func levelName(l schedulerv1.ValidationLevel) string {
	return strings.ToLower(strings.TrimPrefix(l.String(), "VALIDATION_LEVEL_"))
}

// runChanges lists the paths the wave changed (the last wave: the run, against the base ref); nil when unknown
// (then every level with a command runs).
func (w *Worker) runChanges(ctx context.Context, ca *schedulerv1.ClaimedAssignment, wt *workspace.Worktree) []string {
	if !wt.HasRepository() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// A wave's integration: what the wave changed (its base commit to the integrated commit); the
	// last wave's: what the run changed against the base ref.
	span := ca.GetBaseCommit() + "..HEAD"
	if ca.GetFinalIntegration() || ca.GetBaseCommit() == "" {
		span = orDefault(ca.GetRepository().GetBaseRef(), "HEAD") + "...HEAD"
	}
	cmd := exec.CommandContext(ctx, "git", "diff", "--name-only", "-z", span)
	cmd.Dir = wt.Dir
	b, err := cmd.Output()
	if err != nil {
		return nil
	}
	out := []string{} // known and empty: no trigger glob matches
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
