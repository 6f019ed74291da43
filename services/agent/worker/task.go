package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/agent/executor"
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

// taskStarted queues the task's TASK_STARTED event, once, stamped now: before the lease keeper's
// first report, which carries it (queued later, it would wait for the next report), or, for a
// task that ends within startedGrace, the completion.
func (l *lease) taskStarted() {
	l.mu.Lock()
	done := l.started
	l.started = true
	l.mu.Unlock()
	if done {
		return
	}
	t, a := l.ca.GetTask(), l.ca.GetAssignment()
	l.event(commonv1.EventType_EVENT_TYPE_TASK_STARTED, fmt.Sprintf("Task %s: %s started by %s (attempt %d)", t.GetId(), t.GetTitle(), l.w.cfg.InstanceID, a.GetAttempt()), nil)
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
	l.taskStarted()
	l.progress(5, "prime")

	// Prime: ownership, locks and (for an executor that reads a prompt) gotchas, concurrently
	// (three services, three round trips).
	// A target owned by another loop skips the task: the locks taken meanwhile are released.
	defer l.clock.mark(phaseCleanup) // the deferred worktree removal and lock release, last
	pr := w.prime(ctx, ca)
	l.setLocks(pr.locks, lockTTL(ca))
	defer func() {
		locks := l.takeLocks()
		if w.replacedErr() == nil { // a replaced session's locks were released by the Registry: not ours
			w.unlock(ctx, locks)
		}
	}()
	l.clock.mark(phasePrime)
	if pr.owned != "" {
		return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_SKIPPED,
			err: &commonv1.ErrorContext{Code: "OWNED", Message: pr.owned, TaskId: t.GetId(), Timestamp: now()}}
	}
	if err := pr.lockErr; err != nil {
		if ctx.Err() != nil {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED}
		}
		if errors.Is(err, errRegistryUnavailable) {
			// Nothing is wrong with the task: it goes back to the queue (the Scheduler requeues a
			// CANCELLED completion, bounded by max_retries) rather than failing the run.
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED,
				err: &commonv1.ErrorContext{Code: "LOCK_UNAVAILABLE", Message: truncate(err.Error(), 65536), TaskId: t.GetId(), Timestamp: now()}}
		}
		return fail("LOCK_UNAVAILABLE", err.Error(), 0)
	}
	gotchas, gotchaIDs := pr.gotchas, pr.gotchaIDs
	if len(gotchaIDs) > 0 {
		// Which knowledge this try was given: the dashboard's task view reads it from the log,
		// and the Scheduler confirms the provisional ones when the task passes. Only a task whose
		// executor reads a prompt is given any (prime).
		ids := make([]any, len(gotchaIDs))
		for i, id := range gotchaIDs {
			ids[i] = id
		}
		l.event(commonv1.EventType_EVENT_TYPE_INFO, fmt.Sprintf("knowledge: %d item(s) for the prompt", len(ids)), map[string]any{"knowledge_item_ids": ids})
	}

	// Iterate: a worktree at the wave's base, a checkpoint, the executor, validation.
	l.progress(10, "workspace")
	wt, err := w.worktree(ctx, ca, fmt.Sprintf("%s-%s-%d", a.GetExecutionId(), t.GetId(), a.GetAttempt()))
	if err != nil {
		return fail(workspaceCode(err), err.Error(), 0)
	}
	keep := false
	defer func() {
		switch {
		case keep:
		case !wt.HasRepository() && l.local == nil:
			// A scratch directory is this task's alone and holds nothing to keep: it is emptied
			// for the next task beside the completion, not before it (Run waits for it before it
			// returns).
			w.background(func() { w.removeWorktree(context.WithoutCancel(ctx), wt) })
		default:
			w.removeWorktree(ctx, wt)
		}
	}()
	cp, err := wt.Checkpoint(ctx, files(t))
	if err != nil {
		return fail("CHECKPOINT", err.Error(), 0)
	}
	l.event(commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, "checkpoint at "+short(cp.Commit), map[string]any{"commit": cp.Commit, "files": float64(len(cp.Files))})
	ex, err := executor.New(ca.GetOptions().GetExecutor(), executor.WithProcessGroups(w.sess.groups), executor.WithSandbox(w.cfg.Sandbox), executor.WithCgroupParent(w.sess.cgroup), executor.WithAllowedEnv(w.cfg.AllowedEnv...))
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
	// The project's files and the prompt are for an executor that reads a prompt: a command
	// reads neither, and they were a tenth of a no-op task's CPU in the agent (issue 17).
	usesPrompt := executor.UsesPrompt(ca.GetOptions().GetExecutor())
	in := primeIn{gotchas: gotchas, previous: w.previousTask(a.GetExecutionId())}
	if usesPrompt {
		in.project = loadProject(wt, ca.GetContext())
	}
	if len(in.project.skipped) > 0 {
		l.event(commonv1.EventType_EVENT_TYPE_WARNING, "Prime: project files not read: "+strings.Join(in.project.skipped, "; "), nil)
	}
	for _, e := range ca.GetPreviousErrors() {
		in.hints = append(in.hints, fmt.Sprintf("(%s) %s", e.GetCode(), e.GetMessage()))
	}
	var (
		last           outcome
		validationTail string // the last validation's output, for the completion
		levels         []*schedulerv1.ValidationLevelResult
	)
	for try := 1; try <= maxTries; try++ {
		if ctx.Err() != nil {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: int32(try - 1)}
		}
		l.progress(int32(20+60*(try-1)/maxTries), fmt.Sprintf("execute (try %d/%d)", try, maxTries))
		w.recordCheckpoint(ctx, l, cp, try, in.hints)
		text := ""
		if usesPrompt {
			text = buildPrompt(ca, in)
		}
		l.clock.mark(phaseWorkspace)
		l.waitTold(ctx)
		res, err := ex.Run(ctx, executor.Request{Dir: wt.Dir, Task: t, Prompt: text, Timeout: timeout, OutputCap: outputCap, Attempt: try})
		l.clock.mark(phaseExecute)
		l.usage = l.usage.Add(res.Usage) // every try's usage counts, failed ones too
		var why, code, output string
		if err != nil {
			code, why, output = "EXECUTOR_FAILED", err.Error(), ""
			var xe *executor.Error
			if errors.As(err, &xe) {
				code, why, output = xe.Code, xe.Message, xe.Output
			}
		}
		if request := designChangeRequest(output + "\n" + res.Output); request != "" || (err != nil && res.ExitCode == DCRExitCode && ca.GetOptions().GetExecutor().GetAgentCli() == nil && ca.GetOptions().GetExecutor().GetOpenai() == nil) {
			if request == "" {
				request = strings.TrimSpace(tail(output, 16384))
				if request == "" {
					request = "(the task's command asked for a design change without saying which)"
				}
			}
			l.event(commonv1.EventType_EVENT_TYPE_WARNING, fmt.Sprintf("Task %s: design change request (try %d): %s", t.GetId(), try, truncate(request, 2048)), map[string]any{"try": float64(try)})
			if rerr := wt.Restore(context.WithoutCancel(ctx), cp); rerr != nil {
				return fail("ROLLBACK_FAILED", rerr.Error(), int32(try))
			}
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_BLOCKED_DCR, tries: int32(try),
				err: &commonv1.ErrorContext{Code: "DESIGN_CHANGE_REQUEST", Message: request, TaskId: t.GetId(), Timestamp: now()}}
		}
		if err == nil {
			output = res.Output
			l.progress(int32(20+60*(try-1)/maxTries+30/maxTries), fmt.Sprintf("validate (try %d/%d)", try, maxTries))
			v := w.validateTry(ctx, l, wt, try, vtimeout)
			l.clock.mark(phaseValidate)
			validationTail, levels = v.tail, v.levels
			if v.code != "" {
				code, why, output = v.code, v.why, v.output
			}
		}
		if code == "" {
			// Success: commit only the task's files, push the task ref, record discoveries —
			// if the lease and the file locks are still this worker's.
			if sharesWrites(w, wt, res.Output) && !l.fence(ctx) {
				l.mu.Lock()
				why := l.cancel
				l.mu.Unlock()
				return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: int32(try),
					err: &commonv1.ErrorContext{Code: "FENCED", Message: "lease or file lock lost before writing: " + why, TaskId: t.GetId(), Timestamp: now()}}
			}
			out, err := w.finishTask(ctx, l, wt, res.Output, int32(try))
			l.clock.mark(phaseFinish)
			var scope *scopeError
			switch {
			case errors.As(err, &scope):
				code, why = codeScopeGuard, scope.Error()
				l.event(commonv1.EventType_EVENT_TYPE_WARNING, why, map[string]any{"rule": scope.rule, "paths": anyList(scope.paths)})
			case err != nil:
				code, why = "COMMIT_FAILED", err.Error()
			default:
				out.validationOut, out.levels = validationTail, levels
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
		last.validationOut, last.levels = validationTail, levels
		l.event(commonv1.EventType_EVENT_TYPE_TASK_FAILED, fmt.Sprintf("try %d/%d failed (%s): %s", try, maxTries, code, why),
			map[string]any{"try": float64(try), "code": code, "output_tail": tail(output, 2048)})
		if ctx.Err() != nil {
			return outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: int32(try)}
		}
		if wt.HasRepository() {
			if d, err := wt.Diff(context.WithoutCancel(ctx), diffBudget); err == nil {
				in.diff = d
			}
		}
		if err := wt.Restore(context.WithoutCancel(ctx), cp); err != nil {
			return fail("ROLLBACK_FAILED", err.Error(), int32(try))
		}
		l.event(commonv1.EventType_EVENT_TYPE_CHECKPOINT_RESTORED, "restored checkpoint "+short(cp.Commit), nil)
		in.hints = append(in.hints, fmt.Sprintf("try %d (%s): %s\n%s", try, code, why, tail(output, 4096)))
	}
	return last
}

// sharesWrites reports whether finishing a successful try writes anything shared, which the fence
// must guard: a commit and push (a repository) or discoveries recorded in Knowledge. A task in a
// scratch directory whose output names no discovery writes nothing beyond its completion, which
// the Scheduler fences itself (the lease's fencing token).
func sharesWrites(w *Worker, wt *workspace.Worktree, output string) bool {
	return wt.HasRepository() || (w.cfg.Knowledge != nil && (strings.Contains(output, "GOTCHA:") || strings.Contains(output, "DISCOVERY:")))
}

// worktree makes the assignment's workspace: a worktree of the repository at the wave's base, or
// a scratch directory when the list has no repository.
func (w *Worker) worktree(ctx context.Context, ca *schedulerv1.ClaimedAssignment, name string) (*workspace.Worktree, error) {
	repo := ca.GetRepository()
	if repo == nil {
		return w.sess.takeScratch()
	}
	w.holdWorktree(name) // before it exists: another process's sweep never takes it
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

// workspaceCode is the error code of a workspace that could not be made: REPOSITORY_NOT_ALLOWED
// for a local repository outside the agent's allowed roots, WORKSPACE otherwise.
func workspaceCode(err error) string {
	if errors.Is(err, workspace.ErrOutsideRoots) {
		return "REPOSITORY_NOT_ALLOWED"
	}
	return "WORKSPACE"
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
