package worker

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/agent/executor"
	"github.com/converge-dev/converge/services/agent/prompt"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// The Scheduler resolves every execution option once (services/scheduler/options.go) and a claim
// carries them resolved: the worker reads them as they are and fills in nothing. RunTask, which
// has no Scheduler, resolves its own request (runTaskOptions).
const (
	outputCap         = 64 << 10
	maxGotchasPerFile = 10
	lockWait          = 30 * time.Second
	// maxTriesCap bounds the tries of one assignment (CompleteTaskRequest.tries).
	maxTriesCap = 100
)

// maxTriesOf is how many times the executor runs for one assignment: max_retries + 1.
func maxTriesOf(opts *schedulerv1.ExecutionOptions) int {
	return min(max(int(opts.GetMaxRetries()), 0)+1, maxTriesCap)
}

// unresolved names what a claim's options lack that the Scheduler always resolves.
func unresolved(opts *schedulerv1.ExecutionOptions) string {
	switch {
	case opts.GetTaskTimeout().AsDuration() <= 0:
		return "options.task_timeout"
	case opts.GetAgentConfig().GetValidationTimeout().AsDuration() <= 0:
		return "options.agent_config.validation_timeout"
	}
	return ""
}

// held is one fenced file lock.
type heldLock struct {
	resource string
	token    int64
}

// targets are the task's repository-relative target paths: its main file and declared impacts.
func targets(t *commonv1.Task) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		p = strings.TrimSuffix(p, "/")
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	add(t.GetFile())
	for _, f := range t.GetFiles() {
		add(f.GetPath())
	}
	return out
}

// isGlob reports whether a target is a pattern.
func isGlob(p string) bool { return repopath.IsGlob(p) }

// owns reports whether a changed path belongs to the task's declared targets.
func owns(t *commonv1.Task, changed string) bool {
	if t.GetFile() == changed {
		return true
	}
	for _, f := range t.GetFiles() {
		p := strings.TrimSuffix(f.GetPath(), "/")
		switch {
		case p == changed:
			return true
		case f.GetKind() == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY || (!isGlob(p) && strings.HasPrefix(changed, p+"/")):
			if strings.HasPrefix(changed, p+"/") {
				return true
			}
		case isGlob(p):
			if repopath.Match(p, changed) {
				return true
			}
		}
	}
	return false
}

// runTask runs one TASK assignment through Prime, Iterate and Validate.
func (w *Worker) runTask(ctx context.Context, l *lease) outcome {
	ca := l.ca
	t := ca.GetTask()
	a := ca.GetAssignment()
	fail := func(code, msg string, tries int32) outcome {
		return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, tries: tries,
			err: &commonv1.ErrorContext{Code: code, Message: truncate(msg, 65536), TaskId: t.GetId(), Timestamp: now()}}
	}
	l.event(commonv1.EventType_EVENT_TYPE_TASK_STARTED, fmt.Sprintf("Task %s: %s started by %s (attempt %d)", t.GetId(), t.GetTitle(), w.cfg.InstanceID, a.GetAttempt()), nil)
	l.progress(5, "prime")

	// Prime: ownership, locks, gotchas.
	for _, p := range targets(t) {
		if isGlob(p) {
			continue
		}
		if why := w.ownedElsewhere(ctx, ca, p); why != "" {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_SKIPPED,
				err: &commonv1.ErrorContext{Code: "OWNED", Message: why, TaskId: t.GetId(), Timestamp: now()}}
		}
	}
	locks, err := w.lockTargets(ctx, ca)
	l.setLocks(locks, lockTTL(ca))
	defer func() {
		if w.replacedErr() == nil { // a replaced session's locks were released by the Registry: not ours
			w.unlock(ctx, l.heldLocks())
		}
	}()
	if err != nil {
		if ctx.Err() != nil {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED}
		}
		return fail("LOCK_UNAVAILABLE", err.Error(), 0)
	}
	gotchas := w.gotchas(ctx, ca)

	// Iterate: a worktree at the wave's base, a checkpoint, the executor, validation.
	l.progress(10, "workspace")
	wt, err := w.worktree(ctx, ca, fmt.Sprintf("%s-%s-%d", a.GetExecutionId(), t.GetId(), a.GetAttempt()))
	if err != nil {
		return fail(workspaceCode(err), err.Error(), 0)
	}
	keep := false
	defer func() {
		if !keep {
			w.removeWorktree(ctx, wt)
		}
	}()
	cp, err := wt.Checkpoint(ctx, files(t))
	if err != nil {
		return fail("CHECKPOINT", err.Error(), 0)
	}
	l.event(commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, "checkpoint at "+short(cp.Commit), map[string]any{"commit": cp.Commit, "files": float64(len(cp.Files))})
	ex, err := executor.New(ca.GetOptions().GetExecutor(), executor.WithProcessGroups(w.sess.groups), executor.WithAllowedEnv(w.cfg.AllowedEnv...))
	if err != nil {
		return fail("EXECUTOR", err.Error(), 0)
	}
	opts := ca.GetOptions()
	if missing := unresolved(opts); missing != "" {
		return fail("OPTIONS", "the claimed assignment's options are not resolved: "+missing+" is unset", 0)
	}
	maxTries := maxTriesOf(opts)
	timeout := opts.GetTaskTimeout().AsDuration()
	vtimeout := opts.GetAgentConfig().GetValidationTimeout().AsDuration()
	if v := t.GetValidation().GetTimeout(); v != nil {
		vtimeout = v.AsDuration()
	}
	var hints []string
	for _, e := range ca.GetPreviousErrors() {
		hints = append(hints, fmt.Sprintf("(%s) %s", e.GetCode(), e.GetMessage()))
	}
	var (
		last           outcome
		validationTail string // the last validation's output, for the completion
	)
	for try := 1; try <= maxTries; try++ {
		if ctx.Err() != nil {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: int32(try - 1)}
		}
		l.progress(int32(20+60*(try-1)/maxTries), fmt.Sprintf("execute (try %d/%d)", try, maxTries))
		w.recordCheckpoint(ctx, l, cp, try, hints)
		text := prompt.Build(prompt.In{Task: t, Gotchas: gotchas, Hints: hints, Conventions: conventionsOf(ca), MaxBytes: 256 << 10})
		res, err := ex.Run(ctx, executor.Request{Dir: wt.Dir, Task: t, Prompt: text, Timeout: timeout, OutputCap: outputCap, Attempt: try})
		var why, code, output string
		if err != nil {
			code, why, output = "EXECUTOR_FAILED", err.Error(), ""
			var xe *executor.Error
			if errors.As(err, &xe) {
				code, why, output = xe.Code, xe.Message, xe.Output
			}
		} else {
			output = res.Output
			l.progress(int32(20+60*(try-1)/maxTries+30/maxTries), fmt.Sprintf("validate (try %d/%d)", try, maxTries))
			if v := t.GetValidation(); strings.TrimSpace(v.GetCommand()) != "" {
				vr := executor.Validate(ctx, wt.Dir, v, vtimeout, outputCap, executor.WithProcessGroups(w.sess.groups))
				l.event(commonv1.EventType_EVENT_TYPE_VALIDATION_RUN, fmt.Sprintf("validation %q: passed=%t exit=%d", v.GetCommand(), vr.Passed, vr.ExitCode),
					map[string]any{"passed": vr.Passed, "exit_code": float64(vr.ExitCode), "try": float64(try)})
				validationTail = vr.Output
				if !vr.Passed {
					code, why, output = "VALIDATION_FAILED", "validation failed: "+vr.Message, vr.Output
				}
			}
		}
		if code == "" {
			// Success: commit only the task's files, push the task ref, record discoveries —
			// if the lease and the file locks are still this worker's.
			if !l.fence(ctx) {
				l.mu.Lock()
				why := l.cancel
				l.mu.Unlock()
				return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: int32(try),
					err: &commonv1.ErrorContext{Code: "FENCED", Message: "lease or file lock lost before writing: " + why, TaskId: t.GetId(), Timestamp: now()}}
			}
			out, err := w.finishTask(ctx, l, wt, res.Output, int32(try))
			var scope *scopeError
			switch {
			case errors.As(err, &scope):
				code, why = codeScopeGuard, scope.Error()
				l.event(commonv1.EventType_EVENT_TYPE_WARNING, why, map[string]any{"rule": scope.rule, "paths": anyList(scope.paths)})
			case err != nil:
				code, why = "COMMIT_FAILED", err.Error()
			default:
				out.validationOut = validationTail
				keep = out.commit != "" && ca.GetTaskRef() == "" // unpushed commits are never deleted
				return out
			}
		}
		// Failure: roll back to the checkpoint and retry with the failure as a hint.
		if line := lastLine(output); line != "" && !strings.Contains(why, line) {
			why += ": " + line
		}
		last = fail(code, why, int32(try))
		last.err.StackTrace = tail(output, 65536)
		last.validationOut = validationTail
		l.event(commonv1.EventType_EVENT_TYPE_TASK_FAILED, fmt.Sprintf("try %d/%d failed (%s): %s", try, maxTries, code, why),
			map[string]any{"try": float64(try), "code": code, "output_tail": tail(output, 2048)})
		if ctx.Err() != nil {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: int32(try)}
		}
		if err := wt.Restore(context.WithoutCancel(ctx), cp); err != nil {
			return fail("ROLLBACK_FAILED", err.Error(), int32(try))
		}
		l.event(commonv1.EventType_EVENT_TYPE_CHECKPOINT_RESTORED, "restored checkpoint "+short(cp.Commit), nil)
		hints = append(hints, fmt.Sprintf("try %d (%s): %s\n%s", try, code, why, tail(output, 4096)))
	}
	return last
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
	// Only the task's declared files are committed. A task that declares none commits nothing:
	// the planner cannot tell what it conflicts with, so what it changed is not its to commit.
	// Whatever is left out is named in a WARNING event and discarded with the worktree.
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
		_, err := w.cfg.Knowledge.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: typ, Content: truncate(line, 16384),
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

// ownedElsewhere returns why path is owned by another loop, or "".
func (w *Worker) ownedElsewhere(ctx context.Context, ca *schedulerv1.ClaimedAssignment, p string) string {
	if w.cfg.Registry == nil {
		return ""
	}
	res, err := w.cfg.Registry.GetOwner(ctx, &registryv1.GetOwnerRequest{Path: p})
	if err != nil {
		return "" // no owner (NotFound) or the Registry cannot say: the locks still protect the file
	}
	owner := res.GetOwnership().GetOwner()
	switch owner {
	case "", ca.GetAssignment().GetExecutionId(), ca.GetTaskListId(), ca.GetTaskListName(), w.cfg.InstanceID:
		return ""
	}
	return fmt.Sprintf("%s is owned by %q (pattern %s), not by this loop", p, owner, res.GetOwnership().GetPattern())
}

// lockTargets takes a fenced lock on every concrete target file, scoped to the execution.
func (w *Worker) lockTargets(ctx context.Context, ca *schedulerv1.ClaimedAssignment) ([]heldLock, error) {
	ttl := lockTTL(ca)
	var locks []heldLock
	if w.cfg.Registry == nil {
		return nil, nil
	}
	for _, p := range concrete(targets(ca.GetTask())) {
		res := path.Join(ca.GetAssignment().GetExecutionId(), p)
		r, err := w.cfg.Registry.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: res, Holder: w.cfg.InstanceID,
			Ttl: durationpb.New(ttl), Wait: durationpb.New(lockWait)})
		if err != nil {
			return locks, fmt.Errorf("lock %s: %w", p, err)
		}
		if !r.GetGranted() {
			return locks, fmt.Errorf("lock %s is held by %s", p, r.GetLock().GetHolder())
		}
		locks = append(locks, heldLock{resource: res, token: r.GetLock().GetToken()})
	}
	return locks, nil
}

// lockTTL is how long a file lock grant lasts: one lease (the keeper renews both together).
func lockTTL(ca *schedulerv1.ClaimedAssignment) time.Duration {
	return max(ca.GetLeaseDuration().AsDuration(), time.Second)
}

// unlock releases locks, also when ctx was cancelled.
func (w *Worker) unlock(ctx context.Context, locks []heldLock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, lk := range locks {
		if _, err := w.cfg.Registry.ReleaseLock(rctx, &registryv1.ReleaseLockRequest{Resource: lk.resource, Holder: w.cfg.InstanceID, Token: lk.token}); err != nil {
			w.log.Warn("release lock", "resource", lk.resource, "err", err)
		}
	}
}

// gotchas asks Knowledge for the gotchas of each target file.
func (w *Worker) gotchas(ctx context.Context, ca *schedulerv1.ClaimedAssignment) []prompt.Gotcha {
	if w.cfg.Knowledge == nil {
		return nil
	}
	minConf := ca.GetOptions().GetKnowledgeMinConfidence()
	var out []prompt.Gotcha
	seen := map[string]bool{}
	for _, p := range concrete(targets(ca.GetTask())) {
		res, err := w.cfg.Knowledge.QueryItems(ctx, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: p},
			Types: []knowledgev1.ItemType{knowledgev1.ItemType_ITEM_TYPE_GOTCHA, knowledgev1.ItemType_ITEM_TYPE_PATTERN}, MinConfidence: minConf})
		if err != nil {
			w.log.Debug("knowledge query", "path", p, "err", err)
			continue
		}
		for i, m := range res.GetMatches() {
			if i >= maxGotchasPerFile || seen[m.GetItem().GetId()] {
				continue
			}
			seen[m.GetItem().GetId()] = true
			out = append(out, prompt.Gotcha{Pattern: m.GetItem().GetFilePattern(), Description: m.GetItem().GetContent(),
				Confidence: m.GetItem().GetEffectiveConfidence()})
		}
	}
	return out
}

// worktree makes the assignment's workspace: a worktree of the repository at the wave's base, or
// a scratch directory when the list has no repository.
func (w *Worker) worktree(ctx context.Context, ca *schedulerv1.ClaimedAssignment, name string) (*workspace.Worktree, error) {
	w.holdWorktree(name) // before it exists: another process's sweep never takes it
	repo := ca.GetRepository()
	if repo == nil {
		return workspace.Scratch(w.cache.Root(), name)
	}
	src := repo.GetPath()
	if src == "" {
		src = repo.GetUrl()
	}
	r, err := w.cache.Open(ctx, src)
	if err != nil {
		return nil, err
	}
	base := ca.GetBaseCommit()
	if base == "" {
		if base, err = r.Resolve(ctx, orDefault(repo.GetBaseRef(), "HEAD")); err != nil {
			return nil, err
		}
	}
	return r.AddWorktree(ctx, name, base)
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

// anyList converts paths for an event's context.
func anyList(paths []string) []any {
	out := make([]any, len(paths))
	for i, p := range paths {
		out[i] = p
	}
	return out
}

// workspaceCode is the error code of a workspace that could not be made: REPOSITORY_NOT_ALLOWED
// for a local repository outside the agent's allowed roots, WORKSPACE otherwise.
func workspaceCode(err error) string {
	if errors.Is(err, workspace.ErrOutsideRoots) {
		return "REPOSITORY_NOT_ALLOWED"
	}
	return "WORKSPACE"
}

// conventionsOf is the conventions text given to the prompt (the names of the sources; the agent
// reads the sections in Prime when they are files of the worktree).
func conventionsOf(ca *schedulerv1.ClaimedAssignment) string {
	var b strings.Builder
	for _, c := range ca.GetContext().GetConventions() {
		fmt.Fprintf(&b, "- %s\n", c.String())
	}
	return b.String()
}

// files are the task's target files (no patterns, no directories): what a checkpoint hashes.
func files(t *commonv1.Task) []string {
	var out []string
	if t.GetFile() != "" {
		out = append(out, t.GetFile())
	}
	for _, f := range t.GetFiles() {
		k := f.GetKind()
		if (k == commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE || k == commonv1.FileImpactKind_FILE_IMPACT_KIND_UNSPECIFIED) &&
			!isGlob(f.GetPath()) && !strings.HasSuffix(f.GetPath(), "/") && f.GetPath() != t.GetFile() {
			out = append(out, f.GetPath())
		}
	}
	return out
}

// concrete drops patterns from paths.
func concrete(paths []string) []string {
	var out []string
	for _, p := range paths {
		if !isGlob(p) {
			out = append(out, p)
		}
	}
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
