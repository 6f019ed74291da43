package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// Iterate (seed 000 §PIV): each try starts from a checkpoint of the task's worktree (recorded
// with the Scheduler), runs the executor with the prompt Prime built, and is validated
// (validate.go). A try that passes is committed (only the task's declared files, within the
// scope guards of guards.go) and pushed to the task ref, and its GOTCHA:/DISCOVERY: lines are
// recorded in Knowledge; a try that fails is rolled back to the checkpoint, and the next try's
// prompt carries its error and diff. The tries of one assignment are max_retries + 1, as the
// Scheduler resolved them; runTask (task.go) drives the loop.

// finishTask commits the task's changes and pushes the task ref.
func (w *Worker) finishTask(ctx context.Context, l *lease, wt *workspace.Worktree, output string, tries int32) (outcome, error) {
	ca := l.ca
	t := ca.GetTask()
	out := outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, tries: tries}
	out.discoveries = w.recordDiscoveries(ctx, l, output)
	if !wt.HasRepository() {
		return out, nil
	}
	changes, err := wt.Changes(ctx)
	if err != nil {
		return out, err
	}
	// Only the task's declared files are committed. A task that declares none (a check-only task,
	// docs/tasks.md) commits nothing: what its command changed (build outputs, caches) is named in
	// a WARNING event and discarded with the worktree. A task that declares files and changed
	// paths outside them is refused (SCOPE_GUARD naming them, the try rolled back) unless the
	// options allow undeclared files: then those paths are named in a WARNING event and discarded.
	declared := len(targets(t)) > 0
	var paths, stray []string
	for _, c := range changes {
		if declared && owns(t, c.Path) {
			paths = append(paths, c.Path)
		} else {
			stray = append(stray, c.Path)
		}
	}
	if len(stray) > 0 {
		why := "outside the task's declared files"
		if !declared {
			why = "and the task declares no files"
		}
		shown := stray[:min(len(stray), 50)]
		msg := fmt.Sprintf("Task %s changed %d path(s) %s: not committed, discarded: %s", t.GetId(), len(stray), why, strings.Join(shown, ", "))
		if len(stray) > len(shown) {
			msg += fmt.Sprintf(", … (%d more)", len(stray)-len(shown))
		}
		list := make([]any, len(shown))
		for i, p := range shown {
			list[i] = p
		}
		if declared && !ca.GetOptions().GetAllowUndeclaredFiles() {
			// runTask reports it in a WARNING event (rule "undeclared", the paths) and fails the try.
			return out, &scopeError{rule: "undeclared", paths: stray,
				msg: "scope guard: the try changed paths outside the task's declared files, and options.allow_undeclared_files is off: " + listPaths(stray)}
		}
		l.event(commonv1.EventType_EVENT_TYPE_WARNING, msg, map[string]any{"discarded": list, "discarded_count": float64(len(stray))})
		w.log.Warn("task changes not committed", "task", t.GetId(), "paths", len(stray), "declared", declared)
	}
	all := make([]string, len(changes))
	for i, c := range changes {
		all[i] = c.Path
	}
	if err := checkScope(ca.GetScopeGuards(), all, paths); err != nil {
		return out, err
	}
	if len(paths) == 0 {
		return out, nil // nothing of the task's changed: nothing to commit (e.g. a TEST task)
	}
	l.progress(90, "commit")
	sha, lines, err := wt.Commit(ctx, fmt.Sprintf("Task %s: %s", t.GetId(), t.GetTitle()), paths, identity)
	if errors.Is(err, workspace.ErrNothingToCommit) {
		return out, nil
	}
	if err != nil {
		return out, err
	}
	if err := checkLines(ca.GetScopeGuards(), lines, paths); err != nil {
		return out, err // the commit is local: the try's rollback undoes it
	}
	if ref := ca.GetTaskRef(); ref != "" {
		if err := wt.Push(ctx, sha, ref, true); err != nil {
			return out, fmt.Errorf("push %s: %w", ref, err)
		}
		out.ref = ref
	}
	out.commit, out.files, out.lines = sha, paths, int32(min(lines, 100000000))
	return out, nil
}

// recordDiscoveries records the executor's "GOTCHA:" and "DISCOVERY:" output lines in Knowledge.
func (w *Worker) recordDiscoveries(ctx context.Context, l *lease, output string) int32 {
	if w.cfg.Knowledge == nil {
		return 0
	}
	t := l.ca.GetTask()
	pattern := t.GetFile()
	if pattern == "" && len(targets(t)) > 0 {
		pattern = targets(t)[0]
	}
	if pattern == "" {
		pattern = "**"
	}
	var n int32
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		typ := knowledgev1.ItemType_ITEM_TYPE_UNSPECIFIED
		switch {
		case strings.HasPrefix(line, "GOTCHA:"):
			typ, line = knowledgev1.ItemType_ITEM_TYPE_GOTCHA, strings.TrimSpace(strings.TrimPrefix(line, "GOTCHA:"))
		case strings.HasPrefix(line, "DISCOVERY:"):
			typ, line = knowledgev1.ItemType_ITEM_TYPE_DISCOVERY, strings.TrimSpace(strings.TrimPrefix(line, "DISCOVERY:"))
		default:
			continue
		}
		if line == "" || n >= 20 {
			continue
		}
		a := l.ca.GetAssignment()
		_, err := w.cfg.Knowledge.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: typ, Content: truncate(line, 16384), Project: projectOf(l.ca),
			FilePattern: pattern, Tags: []string{taskTag(t.GetId())},
			Source:   &knowledgev1.Source{ExecutionId: a.GetExecutionId(), TaskId: t.GetId(), AgentId: w.cfg.InstanceID},
			Evidence: truncate("task "+t.GetId()+" of "+a.GetExecutionId(), 16384)})
		if err != nil {
			// Never dropped in silence: the agent's log and the execution's log both say so.
			w.log.Warn("discovery not recorded", "task", t.GetId(), "pattern", pattern, "err", err)
			l.event(commonv1.EventType_EVENT_TYPE_WARNING, fmt.Sprintf("%s not recorded in Knowledge: %v", strings.TrimPrefix(typ.String(), "ITEM_TYPE_"), err),
				map[string]any{"file_pattern": pattern, "type": typ.String(), "content": truncate(line, 1024)})
			continue
		}
		n++
		l.event(commonv1.EventType_EVENT_TYPE_DISCOVERY_RECORDED, line, map[string]any{"file_pattern": pattern, "type": typ.String()})
	}
	return n
}

// taskTag is the Knowledge tag of what a task learned: "task-<id>" in the tags' alphabet
// (lower-case letters, digits, '.', '_', '-'; at most 64 characters).
func taskTag(id string) string {
	return truncate("task-"+sanitizeTag(id), 64)
}

// sanitizeTag maps s to lower-case letters, digits, '.', '_' and '-'.
func sanitizeTag(s string) string {
	return strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, s))
}

// recordCheckpoint records the checkpoint a try starts from with the Scheduler
// (RecordCheckpoint), so that GetHandoffContext and a rollback can name it: the commit before the
// try, its kind and the task's file hashes. Without a Scheduler (RunTask) or a repository (a
// scratch directory has no commit) there is nothing to record; a refusal is a warning, never a
// failed try.
func (w *Worker) recordCheckpoint(ctx context.Context, l *lease, cp workspace.Checkpoint, try int, hints []string) {
	if l.local != nil || w.cfg.Scheduler == nil || cp.Commit == "" {
		return
	}
	a := l.ca.GetAssignment()
	kind := "before_try"
	reason := "first try"
	if try > 1 {
		kind, reason = "retry", lastLine(hints[len(hints)-1])
	}
	ck := &commonv1.Checkpoint{GitRef: cp.Commit, Metadata: map[string]string{
		"kind": kind, "try": fmt.Sprint(try), "attempt": fmt.Sprint(a.GetAttempt()), "reason": truncate(reason, 1024)}}
	for _, f := range cp.Files {
		ck.Files = append(ck.Files, &commonv1.FileHash{Path: f.Path, Sha256: f.SHA256})
	}
	rctx, cancel := context.WithTimeout(ctx, registryCallTimeout)
	defer cancel()
	if _, err := w.cfg.Scheduler.RecordCheckpoint(rctx, &schedulerv1.RecordCheckpointRequest{AssignmentId: a.GetId(),
		InstanceId: w.cfg.InstanceID, FencingToken: a.GetFencingToken(), Checkpoint: ck}); err != nil {
		w.log.Warn("checkpoint not recorded", "task", a.GetTaskId(), "try", try, "err", err)
		l.event(commonv1.EventType_EVENT_TYPE_WARNING, fmt.Sprintf("checkpoint of try %d not recorded: %v", try, err), nil)
	}
}

// lastLine answers the last non-empty line of output, at most 300 bytes: the line that usually
// says why a command failed.
func lastLine(output string) string {
	lines := strings.Split(strings.TrimRight(output, " \t\r\n"), "\n")
	line := strings.TrimSpace(lines[len(lines)-1])
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	return strings.ToValidUTF8(line, "\uFFFD")
}

// anyList converts paths for an event's context.
func anyList(paths []string) []any {
	out := make([]any, len(paths))
	for i, p := range paths {
		out[i] = p
	}
	return out
}
