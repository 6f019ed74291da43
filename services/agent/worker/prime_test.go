package worker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/agent/prompt"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// primeWorktree makes a repository with files (path → content), commits them and answers a
// worktree of it.
func primeWorktree(t *testing.T, files map[string]string, links map[string]string) *workspace.Worktree {
	t.Helper()
	repo := origin(t)
	for p, c := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(repo, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(repo, p), []byte(c), 0o644))
	}
	for p, target := range links {
		require.NoError(t, os.Symlink(target, filepath.Join(repo, p)))
	}
	gitT(t, repo, "add", "-A")
	gitT(t, repo, "commit", "-q", "-m", "project files", "--allow-empty")
	cache, err := workspace.NewCache(t.TempDir())
	require.NoError(t, err)
	r, err := cache.Open(context.Background(), repo)
	require.NoError(t, err)
	wt, err := r.AddWorktree(context.Background(), "prime", "main")
	require.NoError(t, err)
	return wt
}

// golden compares got with testdata/name (rewritten when CONVERGE_UPDATE_GOLDEN is set).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("CONVERGE_UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "CONVERGE_UPDATE_GOLDEN=1 go test -run %s writes it", t.Name())
	require.Equal(t, string(want), got)
}

// Issue 15 part 1: the full prompt of one task with every Prime input present: conventions
// from the named sources (sections extracted), the spec, the idea context, the previous task's
// summary, and on a retry the failed try's error and diff. A context file that is a symbolic
// link out of the worktree is not read.
func TestPrimeGoldenAllInputs(t *testing.T) {
	t.Parallel()
	wt := primeWorktree(t, map[string]string{
		"AGENTS.md":               "# Agents\n\n## Build\n\nRun `make test`.\n\n## API Conventions\n\nErrors are gRPC statuses.\n\n## Unrelated\n\nNot for prompts.\n",
		"CLAUDE.md":               "Prefer small functions.\n",
		"specs/design.md":         "# Design\n\nThe greeter greets by name.\n",
		"README.md":               "# Greeter\n\nSays hello.\n",
		"docs/users.md":           "Developers who want a greeting.\n",
		"greet/greet.go":          "package greet\n\nfunc Hello() string { return \"hi\" }\n",
		"CONVENTIONS.md":          "Not read: the task list names its sources.\n",
		"docs/nested/.cursorrule": "never read\n",
	}, map[string]string{"leak.md": "/etc/hostname"})
	pc := &schedulerv1.ProjectContext{SpecFile: "specs/design.md", ContextFiles: []string{"README.md", "docs/users.md", "leak.md", "missing.md"},
		Conventions: []*schedulerv1.ConventionsSource{{Path: "AGENTS.md", Sections: []string{"Build", "API Conventions"}}, {Path: "CLAUDE.md"}}}
	p := loadProject(wt, pc)
	require.Len(t, p.skipped, 2, "%v", p.skipped)
	require.Contains(t, p.skipped[0], "leak.md")
	require.Contains(t, p.skipped[1], "missing.md (not found)")

	// A failed try changed greet.go; its diff is what the retry sees.
	require.NoError(t, os.WriteFile(filepath.Join(wt.Dir, "greet", "greet.go"), []byte("package greet\n\nfunc Hello(name string) string { return name }\n"), 0o644))
	diff, err := wt.Diff(context.Background(), diffBudget)
	require.NoError(t, err)
	task := &commonv1.Task{Id: "2.1", Title: "Greet by name", Description: "Hello takes a name.", File: "greet/greet.go",
		Action: commonv1.TaskAction_TASK_ACTION_UPDATE, Requirements: []string{"Hello(name) returns \"Hello, <name>!\""},
		Steps: []string{"Change the signature", "Update the callers"}, Validation: &commonv1.TaskValidation{Command: "go test ./greet/..."}}
	ca := &schedulerv1.ClaimedAssignment{Task: task, Context: pc}
	got := buildPrompt(ca, primeIn{project: p,
		gotchas:  []prompt.Gotcha{{Pattern: "**/*.go", Description: "Run gofmt before committing.", Confidence: 0.9}},
		hints:    []string{"(VALIDATION_FAILED) validation failed: exit status 1: --- FAIL: TestHello"},
		previous: "Task 1.1: Create the greet package: SUCCEEDED after 1 tries\nFiles changed: greet/greet.go",
		diff:     diff})
	golden(t, "prime_full.golden", got)
}

// Issue 15 part 1: the prompt of a bare task in a repository with no project files.
func TestPrimeGoldenNoInputs(t *testing.T) {
	t.Parallel()
	wt := primeWorktree(t, nil, nil)
	p := loadProject(wt, nil)
	require.Empty(t, p.skipped)
	got := buildPrompt(&schedulerv1.ClaimedAssignment{Task: &commonv1.Task{Id: "1", Title: "Do it"}}, primeIn{project: p})
	golden(t, "prime_none.golden", got)
}

// Issue 15 part 1, through the worker: the default conventions files are read from the task's
// worktree; a retry's prompt carries the failed try's error and diff; the next task of the run
// gets the previous task's summary.
func TestPrimeFeedsTheExecutor(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	for p, c := range map[string]string{"AGENTS.md": "Use tabs.\n", ".cursorrules": "Be brief.\n", "CONVENTIONS.md": "Name things well.\n"} {
		require.NoError(t, os.WriteFile(filepath.Join(repo, p), []byte(c), 0o644))
	}
	gitT(t, repo, "add", "-A")
	gitT(t, repo, "commit", "-q", "-m", "conventions")
	prompts := t.TempDir()
	// The "agent CLI" keeps each prompt it is given; its first try writes and fails, the second
	// succeeds.
	cli := `cat > ` + shq(prompts) + `/$CONVERGE_TASK_ID-$CONVERGE_ATTEMPT.md; echo "attempt $CONVERGE_ATTEMPT" > out.txt; [ "$CONVERGE_ATTEMPT" != 1 ] || { echo "broke it"; exit 1; }`
	h := startWorker(t, nil)
	spec := &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", "-c", cli}}}}
	ca := claimed(t, &commonv1.Task{Id: "1", Title: "first", File: "out.txt"}, repo)
	ca.Options.Executor = spec
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	first, err := os.ReadFile(filepath.Join(prompts, "1-1.md"))
	require.NoError(t, err)
	for _, want := range []string{"**AGENTS.md**", "Use tabs.", "**.cursorrules**", "Be brief.", "**CONVENTIONS.md**", "Name things well."} {
		require.Contains(t, string(first), want)
	}
	require.NotContains(t, string(first), "Previous Attempts")
	retry, err := os.ReadFile(filepath.Join(prompts, "1-2.md"))
	require.NoError(t, err)
	require.Contains(t, string(retry), "## Previous Attempts (fix what went wrong)")
	require.Contains(t, string(retry), "broke it")
	require.Contains(t, string(retry), "## Diff of the Failed Attempt")
	require.Contains(t, string(retry), "new untracked file: out.txt")

	ca = claimed(t, &commonv1.Task{Id: "2", Title: "second", File: "out.txt"}, repo)
	ca.Options.Executor = spec
	ca.Options.MaxRetries = proto.Int32(1)
	h.sched.push(ca)
	h.complete()
	second, err := os.ReadFile(filepath.Join(prompts, "2-1.md"))
	require.NoError(t, err)
	require.Contains(t, string(second), "## Previous Tasks (done before this one, in this run)")
	require.True(t, strings.Contains(string(second), "Task 1: first: SUCCEEDED after 2 tries"), "%s", second)
}

// Issue 15 part 1 (seed 003's layout): a list imported from specs/<dir>/tasks.md without a
// spec_file gets specs/<dir>/design.md as its spec when the repository has one.
func TestPrimeFindsTheDesignBesideTheTasksFile(t *testing.T) {
	t.Parallel()
	wt := primeWorktree(t, map[string]string{"specs/01-auth/design.md": "# Auth\n\nSessions expire after an hour.\n", "specs/01-auth/tasks.md": "# Tasks\n"}, nil)
	p := loadProject(wt, &schedulerv1.ProjectContext{TasksFile: "specs/01-auth/tasks.md"})
	require.Equal(t, "# Auth\n\nSessions expire after an hour.", p.spec)
	require.Empty(t, p.skipped)
	p = loadProject(wt, &schedulerv1.ProjectContext{TasksFile: "tasks.md"}) // no design.md beside it: nothing, silently
	require.Empty(t, p.spec)
	require.Empty(t, p.skipped)
}

// Issue 15 part 1 (seed 003): the prompt carries a summary of every task the agent did before in
// the run, oldest first.
func TestPreviousTasksAccumulate(t *testing.T) {
	t.Parallel()
	w, err := New(Config{StandAlone: true, DataDir: t.TempDir()})
	require.NoError(t, err)
	for i := range maxPrevious + 2 {
		w.rememberTask("ex_1", "task "+strconv.Itoa(i))
	}
	w.rememberTask("ex_2", "other run")
	got := strings.Split(w.previousTask("ex_1"), "\n\n")
	require.Len(t, got, maxPrevious)
	require.Equal(t, "task 2", got[0])
	require.Equal(t, "task "+strconv.Itoa(maxPrevious+1), got[len(got)-1])
	require.Equal(t, "other run", w.previousTask("ex_2"))
}

// Issue 17: the gotchas are for an executor that reads a prompt. A command task (the default
// executor) does not ask Knowledge for them and logs no knowledge_item_ids, so its passing
// confirms nothing; an agent CLI task on the same file is given the gotcha in its prompt and logs
// its id.
func TestGotchasOnlyForAnExecutorThatReadsAPrompt(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	h := startWorker(t, nil)
	_, err := h.know.RecordItem(t.Context(), &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA,
		Content: "write out.txt with a trailing newline", FilePattern: "out.txt", Confidence: proto.Float64(0.9)})
	require.NoError(t, err)
	givenIDs := func(events []*schedulerv1.AgentEvent) (ids []string) {
		for _, e := range events {
			for _, v := range e.GetContext().GetFields()["knowledge_item_ids"].GetListValue().GetValues() {
				ids = append(ids, v.GetStringValue())
			}
		}
		return ids
	}

	h.sched.push(claimed(t, &commonv1.Task{Id: "cmd", Title: "by command", File: "out.txt", Command: "echo command > out.txt"}, repo))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Empty(t, h.know.queried(), "a command reads no prompt: Knowledge is not asked for gotchas")
	require.Empty(t, givenIDs(h.sched.events(c)), "a command task is given no knowledge")

	// The "agent CLI" keeps the prompt it reads on its standard input and writes the task's file.
	prompts := t.TempDir()
	cli := `cat > ` + shq(prompts) + `/$CONVERGE_TASK_ID.md && echo agent > "$CONVERGE_TASK_FILE"`
	ca := claimed(t, &commonv1.Task{Id: "cli", Title: "by agent", File: "out.txt"}, repo)
	ca.Options.Executor = &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", "-c", cli}}}}
	h.sched.push(ca)
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	q := h.know.queried()
	require.Len(t, q, 1)
	require.Equal(t, "out.txt", q[0].GetFilePath())
	got, err := os.ReadFile(filepath.Join(prompts, "cli.md"))
	require.NoError(t, err)
	require.Contains(t, string(got), "write out.txt with a trailing newline", "the agent's prompt carries the gotcha")
	require.Equal(t, []string{"kn_1"}, givenIDs(h.sched.events(c)), "the agent task logs the id of the item it was given")
}
