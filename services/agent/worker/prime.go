package worker

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/agent/executor"
	"github.com/converge-dev/converge/services/agent/prompt"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// Prime (seed 000 §PIV) loads what the executor needs besides the task itself, from the task's
// worktree at the wave's base commit and from the claim:
//
//   - the project's conventions: the ConventionsSource files of the task list's ProjectContext
//     (the "## " sections named, or whole), else AGENTS.md, CLAUDE.md, .cursorrules and
//     CONVENTIONS.md at the root when present; at most convBudget bytes in all;
//   - the spec (ProjectContext.spec_file, else the design.md beside tasks_file; at most
//     specBudget bytes) and the idea context
//     (ProjectContext.context_files, at most contextFileBudget bytes each);
//   - the summaries of the tasks this agent did before in the same run (seed 003);
//   - on a retry, why the last try failed (its error and output tail) and its diff;
//   - the Knowledge gotchas of the task's files (gotchas, with ownership and locks, are read
//     before the worktree exists), for an executor that reads a prompt only: a command is given
//     no knowledge, so it logs no knowledge_item_ids and its passing confirms nothing.
//
// The prompt (package prompt, the seed prompt template) is built from them within
// promptBudget bytes; what does not fit is trimmed in this order: idea context, spec, previous
// task, conventions, the failed try's diff, code template, task description, gotchas, earlier
// tries' errors, steps, requirements. The header, action, validation and instructions are kept.
// Files are read through the worktree only: a path or symbolic link that leaves it is skipped.

// Prime's budgets.
const (
	promptBudget      = 256 << 10
	convBudget        = 64 << 10
	specBudget        = 64 << 10
	contextFileBudget = 8 << 10
	diffBudget        = 16 << 10
)

// defaultConventions are read when the task list names no conventions source.
var defaultConventions = []string{"AGENTS.md", "CLAUDE.md", ".cursorrules", "CONVENTIONS.md"}

// project is what Prime loaded from the worktree.
type project struct {
	conventions, spec, idea string
	// skipped are the files named that could not be read (with why), for a warning.
	skipped []string
}

// loadProject reads the project's files from wt as pc says (nil pc: the default conventions).
func loadProject(wt *workspace.Worktree, pc *schedulerv1.ProjectContext) project {
	var p project
	read := func(path string, max int, named bool) (string, bool) {
		content, ok, truncated, err := wt.ReadFile(path, max)
		switch {
		case err != nil:
			p.skipped = append(p.skipped, fmt.Sprintf("%s (%v)", path, err))
			return "", false
		case !ok:
			if named {
				p.skipped = append(p.skipped, path+" (not found)")
			}
			return "", false
		case truncated:
			content += fmt.Sprintf("\n[… %s is longer than %d bytes: the rest is left out]", path, max)
		}
		return content, true
	}
	var conv []string
	left := convBudget
	addConv := func(path, text string) {
		text = strings.TrimSpace(text)
		if text == "" || left <= 0 {
			return
		}
		if len(text) > left {
			text = text[:left] + "\n[… conventions budget reached]"
		}
		left -= len(text)
		conv = append(conv, "**"+path+"**\n\n"+text)
	}
	if sources := pc.GetConventions(); len(sources) > 0 {
		for _, src := range sources {
			if text, ok := read(src.GetPath(), convBudget, true); ok {
				addConv(src.GetPath(), extractSections(text, src.GetSections()))
			}
		}
	} else {
		for _, path := range defaultConventions {
			if text, ok := read(path, convBudget, false); ok {
				addConv(path, text)
			}
		}
	}
	p.conventions = strings.Join(conv, "\n\n")
	if f := pc.GetSpecFile(); f != "" {
		if text, ok := read(f, specBudget, true); ok {
			p.spec = strings.TrimSpace(text)
		}
	} else if tf := pc.GetTasksFile(); tf != "" && !strings.HasPrefix(tf, "/") {
		// pb-build's layout (seed 003): specs/<dir>/tasks.md beside specs/<dir>/design.md.
		if text, ok := read(path.Join(path.Dir(tf), "design.md"), specBudget, false); ok {
			p.spec = strings.TrimSpace(text)
		}
	}
	var idea []string
	for _, f := range pc.GetContextFiles() {
		if text, ok := read(f, contextFileBudget, true); ok && strings.TrimSpace(text) != "" {
			idea = append(idea, "**"+f+"**\n\n"+strings.TrimSpace(text))
		}
	}
	p.idea = strings.Join(idea, "\n\n")
	return p
}

// extractSections answers the "## " sections of a markdown text whose heading contains one of
// names (each with its heading, up to the next "## " or "# " heading), in file order; no names
// answers the whole text.
func extractSections(text string, names []string) string {
	if len(names) == 0 {
		return text
	}
	var out []string
	var cur []string
	in := false
	flush := func() {
		if in && len(cur) > 0 {
			out = append(out, strings.TrimRight(strings.Join(cur, "\n"), "\n"))
		}
		cur, in = nil, false
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			flush()
			heading := strings.TrimSpace(strings.TrimPrefix(line, "## "))
			for _, n := range names {
				if strings.Contains(heading, n) {
					in = true
					break
				}
			}
		case strings.HasPrefix(line, "# "):
			flush()
		}
		if in {
			cur = append(cur, line)
		}
	}
	flush()
	return strings.Join(out, "\n\n")
}

// primeIn is everything a try's prompt is built from.
type primeIn struct {
	project  project
	gotchas  []prompt.Gotcha
	hints    []string // why earlier tries (and earlier attempts, from the Scheduler) failed
	previous string   // the summaries of the run's previous tasks
	diff     string   // the last failed try's diff
}

// buildPrompt renders the seed prompt template for the task of ca.
func buildPrompt(ca *schedulerv1.ClaimedAssignment, in primeIn) string {
	return prompt.Build(prompt.In{Task: ca.GetTask(), Gotchas: in.gotchas, Hints: in.hints, Conventions: in.project.conventions,
		Spec: in.project.spec, IdeaContext: in.project.idea, PreviousTask: in.previous, FailedDiff: in.diff, MaxBytes: promptBudget})
}

// rememberTask adds the summary of a task this worker ended to the run's list, for the next
// tasks' prompts (seed 003: "a summary of previous tasks", one entry per task; the last
// maxPrevious are kept).
func (w *Worker) rememberTask(executionID string, summary string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.previous == nil {
		w.previous = map[string][]string{}
	}
	if _, ok := w.previous[executionID]; !ok && len(w.previous) >= 64 { // runs this worker no longer works on
		clear(w.previous)
	}
	list := append(w.previous[executionID], summary)
	w.previous[executionID] = list[max(0, len(list)-maxPrevious):]
}

// maxPrevious bounds the summaries of previous tasks kept per run.
const maxPrevious = 20

// previousTask answers the summaries of the tasks this worker ended in the run, oldest first.
func (w *Worker) previousTask(executionID string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.previous[executionID], "\n\n")
}

// taskSummary summarises how a task ended, for the next task's prompt.
func taskSummary(ca *schedulerv1.ClaimedAssignment, out outcome) string {
	t := ca.GetTask()
	s := fmt.Sprintf("Task %s: %s: %s", t.GetId(), t.GetTitle(), strings.TrimPrefix(out.result.String(), "COMPLETION_RESULT_"))
	if out.tries > 0 {
		s += fmt.Sprintf(" after %d tries", out.tries)
	}
	if len(out.files) > 0 {
		s += "\nFiles changed: " + list(out.files)
	}
	if out.commit != "" {
		s += "\nCommit: " + short(out.commit)
	}
	if out.err != nil {
		s += fmt.Sprintf("\nError: (%s) %s", out.err.GetCode(), truncate(out.err.GetMessage(), 1024))
	}
	return s
}

// primed is what Prime asked the services for.
type primed struct {
	owned     string // why a target is owned by another loop, or ""
	locks     []heldLock
	lockErr   error
	gotchas   []prompt.Gotcha
	gotchaIDs []string
}

// prime asks the Registry who owns each concrete target and for the targets' locks, and
// Knowledge for their gotchas, all at once: none of the three depends on another's answer. A
// target owned elsewhere cancels the rest (the task is skipped; the locks already taken are in
// the answer, to be released).
//
// A task without a repository asks for neither owner nor locks: it works in a scratch directory
// of its own and writes nothing shared (nothing is committed or pushed), so its files are no
// other task's or loop's (docs/tasks.md).
//
// A task whose executor reads no prompt (a command, the default) does not ask for gotchas: they
// would go nowhere, and the items named as given to a try are confirmed by the Scheduler when
// the task passes (docs/security.md), which a command that never saw them is no evidence for.
// The query was also one of the two RPCs of a no-op command task (issue 17).
func (w *Worker) prime(ctx context.Context, ca *schedulerv1.ClaimedAssignment) primed {
	var out primed
	paths := concrete(targets(ca.GetTask()))
	if len(paths) == 0 {
		return out
	}
	knowledge := executor.UsesPrompt(ca.GetOptions().GetExecutor())
	if ca.GetRepository() == nil {
		if knowledge {
			out.gotchas, out.gotchaIDs = w.gotchas(ctx, ca)
		}
		return out
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, p := range paths {
			if why := w.ownedElsewhere(pctx, ca, p); why != "" {
				out.owned = why
				cancel()
				return
			}
		}
	})
	wg.Go(func() { out.locks, out.lockErr = w.lockTargets(pctx, ca) })
	if knowledge {
		wg.Go(func() { out.gotchas, out.gotchaIDs = w.gotchas(pctx, ca) })
	}
	wg.Wait()
	return out
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

// gotchas asks Knowledge for the gotchas of each target file; ids are the items', in order.
func (w *Worker) gotchas(ctx context.Context, ca *schedulerv1.ClaimedAssignment) (out []prompt.Gotcha, ids []string) {
	if w.cfg.Knowledge == nil {
		return nil, nil
	}
	minConf := ca.GetOptions().GetKnowledgeMinConfidence()
	seen := map[string]bool{}
	for _, p := range concrete(targets(ca.GetTask())) {
		res, err := w.cfg.Knowledge.QueryItems(ctx, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: p}, Project: projectOf(ca),
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
			ids = append(ids, m.GetItem().GetId())
			out = append(out, prompt.Gotcha{Pattern: m.GetItem().GetFilePattern(), Description: m.GetItem().GetContent(),
				Confidence: m.GetItem().GetEffectiveConfidence()})
		}
	}
	return out, ids
}
