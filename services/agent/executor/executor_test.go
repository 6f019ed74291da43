package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/agent/executor"
)

// fakeCLI is a coding-agent CLI stand-in, written once before the tests run (writing an
// executable while parallel tests fork risks ETXTBSY). Usage:
//
//	fake-cli <file to write> [--prompt=<prompt file>]
//
// It writes the prompt (from the prompt file, else from stdin) into the file, then prints what
// it saw of its environment.
var fakeCLI string

const fakeCLIScript = `#!/bin/sh
set -e
out="$1"
case "$2" in
--prompt=*) prompt_file="${2#--prompt=}"; echo "prompt file: $prompt_file"; cat "$prompt_file" > "$out" ;;
*) cat > "$out" ;;
esac
echo "secret=${FAKE_SECRET:-absent} key=${FAKE_KEY:-absent} task=$CONVERGE_TASK_ID file=$CONVERGE_TASK_FILE attempt=$CONVERGE_ATTEMPT"
echo "names: $(env | cut -d= -f1 | sort | tr '\n' ' ')"
echo "converge-usage: input_tokens=1200 output_tokens=340 cost_usd=0.0123"
`

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "converge-executor-test-")
	if err != nil {
		panic(err)
	}
	fakeCLI = filepath.Join(dir, "fake-cli")
	if err := os.WriteFile(fakeCLI, []byte(fakeCLIScript), 0o755); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// bundle is what an executor test works with: a worktree and the agent's environment.
type bundle struct {
	dir string
	env map[string]string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return &bundle{dir: dir, env: map[string]string{
		"PATH":        os.Getenv("PATH"),
		"HOME":        dir,
		"FAKE_KEY":    "k1",
		"FAKE_SECRET": "s3cret",
	}}
}

func (b *bundle) lookup(name string) (string, bool) {
	v, ok := b.env[name]
	return v, ok
}

func (b *bundle) executor(t *testing.T, spec *commonv1.ExecutorSpec, opts ...executor.Option) executor.Executor {
	t.Helper()
	e, err := executor.New(spec, append([]executor.Option{executor.WithLookupEnv(b.lookup)}, opts...)...)
	require.NoError(t, err)
	return e
}

func (b *bundle) read(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.dir, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(data)
}

// requireCode asserts err is an *executor.Error with code.
func requireCode(t *testing.T, code string, err error) {
	t.Helper()
	_ = requireCodeErr(t, code, err)
}

// requireCodeErr is requireCode answering the *executor.Error, for more checks.
func requireCodeErr(t *testing.T, code string, err error) *executor.Error {
	t.Helper()
	var e *executor.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, code, e.Code, "error %v", err)
	return e
}

func commandTask(command string) *commonv1.Task {
	return &commonv1.Task{Id: "1.1", Title: "run", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "out.txt", Command: command}
}

func TestCommandSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.executor(t, nil)
	res, err := e.Run(t.Context(), executor.Request{
		Dir:     b.dir,
		Task:    commandTask(`echo hello > "$CONVERGE_TASK_FILE"; echo "done $CONVERGE_TASK_ID $CONVERGE_ATTEMPT secret=${FAKE_SECRET:-absent}"`),
		Attempt: 2,
		Timeout: 30 * time.Second,
	})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, "done 1.1 2 secret=absent\n", res.Output)
	require.Positive(t, res.Duration)
	require.Empty(t, res.FilesWritten)
	require.Equal(t, "hello\n", b.read(t, "out.txt"))
}

func TestCommandPassthrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{
		Command: &commonv1.CommandExecutor{EnvPassthrough: []string{"FAKE_KEY"}},
	}})
	res, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: commandTask(`echo "key=$FAKE_KEY secret=${FAKE_SECRET:-absent}"`)})
	require.NoError(t, err)
	require.Equal(t, "key=k1 secret=absent\n", res.Output)
}

func TestCommandFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.executor(t, nil).Run(t.Context(), executor.Request{Dir: b.dir, Task: commandTask(`echo working; echo broken >&2; exit 4`)})
	e := requireCodeErr(t, executor.CodeExecutorFailed, err)
	require.Contains(t, e.Message, "exit status 4")
	require.Equal(t, "working\nbroken\n", e.Output)
	require.Equal(t, 4, res.ExitCode)
	require.Equal(t, "working\nbroken\n", res.Output)
}

func TestCommandNoCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.executor(t, nil).Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "1", Title: "x"}})
	requireCode(t, executor.CodeNoCommand, err)
}

func TestRelativeDirRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, spec := range []*commonv1.ExecutorSpec{
		nil,
		{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{fakeCLI, "x"}}}},
		openAISpec("http://127.0.0.1:1"),
	} {
		for _, dir := range []string{"", "worktree"} {
			_, err := b.executor(t, spec).Run(t.Context(), executor.Request{Dir: dir, Task: commandTask("touch made-here")})
			e := requireCodeErr(t, executor.CodeExecutorFailed, err)
			require.Contains(t, e.Message, "not an absolute path")
		}
	}
	require.NoFileExists(t, "made-here")
}

func TestCommandTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Now()
	res, err := b.executor(t, nil).Run(t.Context(), executor.Request{
		Dir:     b.dir,
		Task:    commandTask(`sleep 60 & echo $! > child.pid; echo started; wait`),
		Timeout: 300 * time.Millisecond,
	})
	require.Less(t, time.Since(start), 10*time.Second)
	e := requireCodeErr(t, executor.CodeTimeout, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, e.Message, "300ms timeout")
	require.Equal(t, "started\n", e.Output)
	require.Equal(t, -1, res.ExitCode)

	pid, err := strconv.Atoi(strings.TrimSpace(b.read(t, "child.pid")))
	require.NoError(t, err)
	requireGone(t, pid)
}

func TestCommandCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := b.executor(t, nil).Run(ctx, executor.Request{Dir: b.dir, Task: commandTask(`sleep 60`)})
	requireCode(t, executor.CodeCanceled, err)
	require.ErrorIs(t, err, context.Canceled)
}

func TestCommandOutputCapKeepsTheTail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.executor(t, nil).Run(t.Context(), executor.Request{
		Dir:       b.dir,
		Task:      commandTask(`i=0; while [ $i -lt 1000 ]; do echo "line $i"; i=$((i+1)); done; printf 'caf\303\251\n'`),
		OutputCap: 100,
	})
	require.NoError(t, err)
	require.LessOrEqual(t, len(res.Output), 100)
	require.True(t, strings.HasSuffix(res.Output, "line 999\ncafé\n"), res.Output)
	require.NotContains(t, res.Output, "line 0\n")
}

func TestAgentCLIStdin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{
		Argv:           []string{fakeCLI, "written.md"},
		EnvPassthrough: []string{"FAKE_KEY"},
	}}})
	res, err := e.Run(t.Context(), executor.Request{
		Dir:     b.dir,
		Task:    &commonv1.Task{Id: "3.2", Title: "write", File: "written.md"},
		Prompt:  "# BUILD TASK: 3.2\nwrite it",
		Attempt: 1,
	})
	require.NoError(t, err, "output %s", res.Output)
	require.Equal(t, "# BUILD TASK: 3.2\nwrite it", strings.TrimSuffix(b.read(t, "written.md"), "\n"))
	require.Contains(t, res.Output, "secret=absent key=k1 task=3.2 file=written.md attempt=1")
	require.NotContains(t, res.Output, "s3cret")
	requireOnlyNames(t, res.Output, "FAKE_KEY")
	require.Equal(t, executor.Usage{InputTokens: 1200, OutputTokens: 340, CostUSDMicros: 12300}, res.Usage, "the CLI's converge-usage line")
}

func TestAgentCLIPromptFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{
		Argv:       []string{fakeCLI, "src/../written.txt", "--prompt={prompt_file}"},
		PromptMode: commonv1.PromptMode_PROMPT_MODE_FILE,
	}}})
	require.NoError(t, os.Mkdir(filepath.Join(b.dir, "src"), 0o755))
	res, err := e.Run(t.Context(), executor.Request{
		Dir:    b.dir,
		Task:   &commonv1.Task{Id: "3.3", Title: "write", File: "written.txt"},
		Prompt: "from the prompt file",
	})
	require.NoError(t, err, "output %s", res.Output)
	require.Equal(t, "from the prompt file", b.read(t, "written.txt"))
	want := filepath.Join(b.dir, ".converge", "prompt-3.3.md")
	require.Contains(t, res.Output, "prompt file: "+want+"\n")
	require.Contains(t, res.Output, "secret=absent key=absent")
	requireOnlyNames(t, res.Output)
	// The prompt file and the directory made for it are gone: nothing to commit.
	require.NoFileExists(t, want)
	require.NoDirExists(t, filepath.Join(b.dir, ".converge"))
}

func TestAgentCLIPromptFileKeepsAnExistingDirectory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.Mkdir(filepath.Join(b.dir, ".converge"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, ".converge", "keep"), nil, 0o644))
	e := b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{
		Argv:       []string{fakeCLI, "out.txt", "--prompt={prompt_file}"},
		PromptMode: commonv1.PromptMode_PROMPT_MODE_FILE,
	}}})
	_, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "x/y", Title: "t"}, Prompt: "p"})
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(b.dir, ".converge", "prompt-x_y.md"))
	require.FileExists(t, filepath.Join(b.dir, ".converge", "keep"))
}

func TestAgentCLIPromptDirSymlinkRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(b.dir, ".converge")))
	e := b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{
		Argv: []string{fakeCLI, "out.txt", "--prompt={prompt_file}"}, PromptMode: commonv1.PromptMode_PROMPT_MODE_FILE,
	}}})
	_, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "1", Title: "t"}, Prompt: "p"})
	requireCode(t, executor.CodeUnsafePath, err)
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestAgentCLIFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{
		Argv: []string{fakeCLI, "no-such-dir/out.txt"},
	}}})
	_, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "1", Title: "t"}, Prompt: "p"})
	ee := requireCodeErr(t, executor.CodeExecutorFailed, err)
	require.Contains(t, ee.Message, "agent CLI fake-cli failed")

	e = b.executor(t, &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{
		Argv: []string{"converge-no-such-cli"},
	}}})
	_, err = e.Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "1", Title: "t"}, Prompt: "p"})
	ee = requireCodeErr(t, executor.CodeExecutorFailed, err)
	require.Contains(t, ee.Message, "could not start")
}

// requireOnlyNames asserts the fake CLI's environment held the base variables, the task's
// CONVERGE_* variables, variables the shell sets itself, and extra, nothing else.
func requireOnlyNames(t *testing.T, output string, extra ...string) {
	t.Helper()
	allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "LC_ALL": true, "TMPDIR": true,
		"CONVERGE_TASK_ID": true, "CONVERGE_TASK_FILE": true, "CONVERGE_ATTEMPT": true,
		"PWD": true, "OLDPWD": true, "SHLVL": true, "_": true}
	for _, n := range extra {
		allowed[n] = true
	}
	i := strings.Index(output, "names: ")
	require.GreaterOrEqual(t, i, 0, output)
	line := output[i+len("names: "):]
	line = line[:strings.IndexByte(line, '\n')]
	names := strings.Fields(line)
	require.Contains(t, names, "PATH")
	for _, n := range names {
		require.True(t, allowed[n], "variable %s reached the CLI", n)
	}
}

// fakeOpenAI is an OpenAI-compatible endpoint: it records the requests it gets and answers with
// answer (or runs handle).
type fakeOpenAI struct {
	*httptest.Server
	calls  atomic.Int32
	last   atomic.Pointer[recorded]
	status int
	answer string
	handle func(w http.ResponseWriter, r *http.Request)
}

type recorded struct {
	method, path, auth string
	body               map[string]any
}

func newFakeOpenAI(t *testing.T, answer string) *fakeOpenAI {
	t.Helper()
	f := &fakeOpenAI{status: http.StatusOK, answer: answer}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		rec := &recorded{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization")}
		_ = json.NewDecoder(r.Body).Decode(&rec.body)
		f.last.Store(rec)
		if f.handle != nil {
			f.handle(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.status)
		_, _ = w.Write([]byte(f.answer))
	}))
	t.Cleanup(f.Close)
	return f
}

// chat answers a chat completion whose content is content.
func chat(content, finish string) string {
	data, err := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": "coder",
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": content}, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366},
	})
	if err != nil {
		panic(err)
	}
	return string(data)
}

func openAISpec(baseURL string) *commonv1.ExecutorSpec {
	return &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Openai{Openai: &commonv1.OpenAIExecutor{
		BaseUrl:     baseURL + "/v1/",
		Model:       "qwen2.5-coder:7b",
		ApiKeyEnv:   "FAKE_KEY",
		Temperature: 0.2,
		MaxTokens:   2048,
	}}}
}

func fileTask(file string) *commonv1.Task {
	return &commonv1.Task{Id: "4.1", Title: "write", Action: commonv1.TaskAction_TASK_ACTION_CREATE, File: file}
}

func TestOpenAIWritesTheFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := newFakeOpenAI(t, chat("Here is the file:\n\n```go\npackage x\n\nfunc X() {}\n```\n\nIt compiles.", "stop"))
	res, err := b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{
		Dir: b.dir, Task: fileTask("pkg/x/x.go"), Prompt: "# BUILD TASK: 4.1", Timeout: 30 * time.Second,
	})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, []string{"pkg/x/x.go"}, res.FilesWritten)
	require.Contains(t, res.Output, "It compiles.")
	require.Equal(t, "package x\n\nfunc X() {}\n", b.read(t, "pkg/x/x.go"))
	require.Equal(t, executor.Usage{InputTokens: 321, OutputTokens: 45}, res.Usage, "the answer's usage")

	rec := f.last.Load()
	require.Equal(t, http.MethodPost, rec.method)
	require.Equal(t, "/v1/chat/completions", rec.path)
	require.Equal(t, "Bearer k1", rec.auth)
	require.Equal(t, "qwen2.5-coder:7b", rec.body["model"])
	require.InDelta(t, 0.2, rec.body["temperature"], 1e-9)
	require.InDelta(t, 2048, rec.body["max_tokens"], 1e-9)
	messages, ok := rec.body["messages"].([]any)
	require.True(t, ok)
	require.Len(t, messages, 2)
	system, user := messages[0].(map[string]any), messages[1].(map[string]any)
	require.Equal(t, "system", system["role"])
	require.Contains(t, system["content"], "You write the complete content of one file")
	require.Equal(t, "user", user["role"])
	require.Equal(t, "# BUILD TASK: 4.1", user["content"])
}

func TestOpenAIWithoutKeyOrFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := newFakeOpenAI(t, chat("\n\nhello: world\n  ", "stop"))
	spec := openAISpec(f.URL)
	spec.GetOpenai().ApiKeyEnv, spec.GetOpenai().MaxTokens = "", 0
	_, err := b.executor(t, spec).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("config.yaml")})
	require.NoError(t, err)
	require.Equal(t, "hello: world\n", b.read(t, "config.yaml"))
	rec := f.last.Load()
	require.Empty(t, rec.auth)
	require.NotContains(t, rec.body, "max_tokens")
}

func TestOpenAIMarkdownFileKeepsItsCodeBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	doc := "# Title\n\n```sh\nmake\n```\n"
	f := newFakeOpenAI(t, chat(doc, "stop"))
	_, err := b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("README.md")})
	require.NoError(t, err)
	require.Equal(t, doc, b.read(t, "README.md"))

	f.answer = chat("````markdown\n"+doc+"````", "stop")
	_, err = b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("README.md")})
	require.NoError(t, err)
	require.Equal(t, doc, b.read(t, "README.md"))
}

func TestOpenAIServerError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := newFakeOpenAI(t, "")
	f.handle = func(w http.ResponseWriter, r *http.Request) {
		// An endpoint that echoes the credentials it got: they must not reach the error.
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error": {"message": "model crashed", "auth": %q}}%s`, r.Header.Get("Authorization"), strings.Repeat(" pad", 1000))
	}
	res, err := b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("x.go")})
	e := requireCodeErr(t, executor.CodeExecutorFailed, err)
	require.Contains(t, e.Message, "500 Internal Server Error")
	require.Contains(t, e.Message, "model crashed")
	require.Less(t, len(e.Message), 1200, "the body excerpt is capped")
	for _, s := range []string{e.Error(), e.Output, res.Output} {
		require.NotContains(t, s, "k1")
	}
	require.NoFileExists(t, filepath.Join(b.dir, "x.go"))
}

func TestOpenAIBadResponses(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"malformed JSON": `{"choices": [`,
		"no choices":     `{"choices": []}`,
		"empty content":  chat("```\n```", "stop"),
		"cut off":        chat("```go\npackage x\nfunc", "length"),
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			f := newFakeOpenAI(t, answer)
			_, err := b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("x.go")})
			requireCode(t, executor.CodeBadResponse, err)
			require.NoFileExists(t, filepath.Join(b.dir, "x.go"))
		})
	}
}

func TestOpenAITimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := newFakeOpenAI(t, "")
	f.handle = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(20 * time.Second):
		}
	}
	start := time.Now()
	_, err := b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("x.go"), Timeout: 300 * time.Millisecond})
	requireCode(t, executor.CodeTimeout, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// request_timeout wins over the task's timeout.
	spec := openAISpec(f.URL)
	spec.GetOpenai().RequestTimeout = durationpb.New(300 * time.Millisecond)
	_, err = b.executor(t, spec).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("x.go"), Timeout: time.Hour})
	requireCode(t, executor.CodeTimeout, err)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestOpenAIUnsafePaths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(b.dir, "escape")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "missing"), filepath.Join(b.dir, "dangling.go")))
	require.NoError(t, os.Mkdir(filepath.Join(b.dir, "inside"), 0o755))
	require.NoError(t, os.Symlink("inside", filepath.Join(b.dir, "alias")))

	f := newFakeOpenAI(t, chat("```\nok\n```", "stop"))
	e := b.executor(t, openAISpec(f.URL))
	for _, file := range []string{"../x", "a/../../x", "/etc/x", "escape/x.go", "dangling.go", ".git/hooks/pre-commit", "sub/.GIT/config", "./x.go", "a//x.go", `a\x.go`, "C:x.go", "a\x00.go"} {
		_, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask(file)})
		requireCode(t, executor.CodeUnsafePath, err)
	}
	require.Zero(t, f.calls.Load(), "nothing is asked for a file that cannot be written")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, entries)

	// A symlink that stays inside the worktree is fine.
	res, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("alias/ok.txt")})
	require.NoError(t, err)
	require.Equal(t, []string{"alias/ok.txt"}, res.FilesWritten)
	require.Equal(t, "ok\n", b.read(t, "inside/ok.txt"))
}

func TestOpenAINoFileNoKeyDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := newFakeOpenAI(t, chat("x", "stop"))
	e := b.executor(t, openAISpec(f.URL))

	_, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "1", Title: "t"}})
	requireCode(t, executor.CodeNoFile, err)

	delete(b.env, "FAKE_KEY")
	_, err = e.Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("x.go")})
	ee := requireCodeErr(t, executor.CodeExecutorFailed, err)
	require.Contains(t, ee.Message, "FAKE_KEY is not set")

	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "old.go"), []byte("package old\n"), 0o644))
	res, err := e.Run(t.Context(), executor.Request{Dir: b.dir, Task: &commonv1.Task{Id: "2", Title: "t", Action: commonv1.TaskAction_TASK_ACTION_DELETE, File: "old.go"}})
	require.NoError(t, err)
	require.Equal(t, []string{"old.go"}, res.FilesWritten)
	require.NoFileExists(t, filepath.Join(b.dir, "old.go"))
	require.Zero(t, f.calls.Load())
}

func TestOpenAIKeepsTheFileMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "run.sh"), []byte("old\n"), 0o755))
	f := newFakeOpenAI(t, chat("```sh\n#!/bin/sh\necho new\n```", "stop"))
	_, err := b.executor(t, openAISpec(f.URL)).Run(t.Context(), executor.Request{Dir: b.dir, Task: fileTask("run.sh")})
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(b.dir, "run.sh"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	require.Equal(t, "#!/bin/sh\necho new\n", b.read(t, "run.sh"))
}

func TestNewAndCapability(t *testing.T) {
	t.Parallel()
	cases := []struct {
		spec       *commonv1.ExecutorSpec
		capability string
		err        string
	}{
		{nil, "executor:command", ""},
		{&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{}}}, "executor:command", ""},
		{&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"claude", "-p"}}}}, "executor:agent-cli", ""},
		{&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{}}}, "executor:agent-cli", "argv"},
		{openAISpec("http://127.0.0.1:11434"), "executor:openai", ""},
		{&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Openai{Openai: &commonv1.OpenAIExecutor{BaseUrl: "ftp://x", Model: "m"}}}, "executor:openai", "base_url"},
		{&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Openai{Openai: &commonv1.OpenAIExecutor{BaseUrl: "http://x"}}}, "executor:openai", "model"},
		{&commonv1.ExecutorSpec{}, "executor:command", "chooses no executor"},
	}
	for _, tc := range cases {
		require.Equal(t, tc.capability, executor.Capability(tc.spec))
		e, err := executor.New(tc.spec)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.NotNil(t, e)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n"), 0o644))
	ctx := t.Context()

	r := executor.Validate(ctx, dir, &commonv1.TaskValidation{Command: "cat go.mod", Expected: "exit code 0"}, time.Minute, 0)
	require.True(t, r.Passed, r.Message)
	require.Equal(t, 0, r.ExitCode)
	require.Equal(t, "module x\n", r.Output)
	require.Equal(t, "validation `cat go.mod` exited 0 (expected: exit code 0)", r.Message)

	r = executor.Validate(ctx, dir, &commonv1.TaskValidation{Command: "echo nope; exit 2"}, time.Minute, 0)
	require.False(t, r.Passed)
	require.Equal(t, 2, r.ExitCode)
	require.Equal(t, "nope\n", r.Output)
	require.Contains(t, r.Message, "exited 2, want 0")

	// expected_exit_code is what success is.
	r = executor.Validate(ctx, dir, &commonv1.TaskValidation{Command: "exit 3", ExpectedExitCode: 3}, time.Minute, 0)
	require.True(t, r.Passed, r.Message)
	r = executor.Validate(ctx, dir, &commonv1.TaskValidation{Command: "true", ExpectedExitCode: 3}, time.Minute, 0)
	require.False(t, r.Passed)

	// expected is for people (task.proto): quoted in the message, not matched against output.
	r = executor.Validate(ctx, dir, &commonv1.TaskValidation{Command: "echo 2 failures; exit 1", Expected: "all tests pass"}, time.Minute, 0)
	require.False(t, r.Passed)
	require.Contains(t, r.Message, "(expected: all tests pass)")
	r = executor.Validate(ctx, dir, &commonv1.TaskValidation{Command: "echo something else", Expected: "all tests pass"}, time.Minute, 0)
	require.True(t, r.Passed, r.Message)

	// No command: nothing to prove.
	r = executor.Validate(ctx, dir, nil, time.Minute, 0)
	require.True(t, r.Passed)

	// A directory that is gone.
	r = executor.Validate(ctx, filepath.Join(dir, "missing"), &commonv1.TaskValidation{Command: "true"}, time.Minute, 0)
	require.False(t, r.Passed)
	require.Equal(t, -1, r.ExitCode)
	require.Contains(t, r.Message, "could not start")
}

func TestValidateOutputCap(t *testing.T) {
	t.Parallel()
	r := executor.Validate(t.Context(), t.TempDir(), &commonv1.TaskValidation{
		Command: `i=0; while [ $i -lt 1000 ]; do echo "line $i"; i=$((i+1)); done`,
	}, time.Minute, 64)
	require.True(t, r.Passed)
	require.LessOrEqual(t, len(r.Output), 64)
	require.True(t, strings.HasSuffix(r.Output, "line 999\n"))
}

func TestValidateTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Now()
	// The validation's own timeout wins over the caller's.
	r := executor.Validate(t.Context(), dir, &commonv1.TaskValidation{
		Command: "sleep 60 & echo $! > child.pid; wait",
		Timeout: durationpb.New(300 * time.Millisecond),
	}, time.Hour, 0)
	require.Less(t, time.Since(start), 10*time.Second)
	require.False(t, r.Passed)
	require.True(t, r.TimedOut)
	require.Equal(t, -1, r.ExitCode)
	require.Contains(t, r.Message, "killed after its 300ms timeout")

	// The caller's timeout applies when the validation sets none.
	r = executor.Validate(t.Context(), dir, &commonv1.TaskValidation{Command: "sleep 60"}, 200*time.Millisecond, 0)
	require.True(t, r.TimedOut)

	data, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	requireGone(t, pid)
}

func TestValidatePassthrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := executor.Validate(t.Context(), b.dir, &commonv1.TaskValidation{Command: `echo "key=${FAKE_KEY:-absent} secret=${FAKE_SECRET:-absent}"`},
		time.Minute, 0, executor.WithLookupEnv(b.lookup), executor.WithEnvPassthrough("FAKE_KEY"))
	require.True(t, r.Passed)
	require.Equal(t, "key=k1 secret=absent\n", r.Output)
}

func TestErrorUnwraps(t *testing.T) {
	t.Parallel()
	e := &executor.Error{Code: executor.CodeTimeout, Message: "slow", Err: context.DeadlineExceeded}
	require.Equal(t, "TIMEOUT: slow", e.Error())
	require.True(t, errors.Is(e, context.DeadlineExceeded))
}

// requireGone waits until process pid no longer runs (or is a zombie waiting to be reaped).
func requireGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		if err := syscall.Kill(pid, 0); err != nil {
			return errors.Is(err, syscall.ESRCH)
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err == nil && strings.Contains(string(stat), ") Z ") // killed, waiting to be reaped
	}, 10*time.Second, 10*time.Millisecond, "process %d still runs", pid)
}

// Only the agent CLI and the OpenAI executors read the prompt: the worker builds none for a
// command (issue 17).
func TestUsesPrompt(t *testing.T) {
	t.Parallel()
	require.False(t, executor.UsesPrompt(nil))
	require.False(t, executor.UsesPrompt(&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{}}}))
	require.True(t, executor.UsesPrompt(&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"x"}}}}))
	require.True(t, executor.UsesPrompt(&commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Openai{Openai: &commonv1.OpenAIExecutor{Model: "m"}}}))
}
