// Package executor does one task in a worktree, the way an ExecutorSpec says (DESIGN §6):
//
//   - command: runs the task's command with `sh -c` in the worktree;
//   - agent-cli: runs an external coding-agent CLI (claude, codex, aider, ...) in the worktree,
//     the prompt on its standard input or in a file;
//   - openai: asks an OpenAI-compatible chat-completions endpoint (Ollama, vLLM, llama.cpp,
//     hosted) for the content of the task's file and writes it.
//
// Processes run through platform/proc: an exact, minimal environment (PATH, HOME, LANG, LC_ALL,
// TMPDIR, the spec's env_passthrough names and CONVERGE_TASK_ID, CONVERGE_TASK_FILE and
// CONVERGE_ATTEMPT), a timeout that kills the whole process group, and output kept up to a cap.
// Secrets stay in the environment: an API key is read when a request is sent and is never
// logged, stored or put in an error.
//
// Validate runs a task's validation command, the proof that the executor's work is done.
//
// An Executor does not commit, check out or roll back: the worker's workspace does that around
// it.
package executor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// Defaults for zero fields of a Request.
const (
	// DefaultTimeout bounds a task whose Request sets no Timeout (AgentConfig.task_timeout's
	// default).
	DefaultTimeout = 300 * time.Second
	// DefaultOutputCap is how much output a Request without OutputCap keeps.
	DefaultOutputCap = 64 << 10
	// DefaultValidationTimeout bounds a validation command when neither the validation nor the
	// caller sets a timeout (AgentConfig.validation_timeout's default).
	DefaultValidationTimeout = 120 * time.Second
)

// Error codes of an *Error.
const (
	// CodeExecutorFailed: the executor ran and did not do the task (a non-zero exit, an
	// endpoint's error answer, a program that does not start).
	CodeExecutorFailed = "EXECUTOR_FAILED"
	// CodeTimeout: the task ran out of time and was killed (or its request abandoned).
	CodeTimeout = "TIMEOUT"
	// CodeCanceled: the caller's context ended first (drain, lost lease); errors.Is(err,
	// context.Canceled) or context.DeadlineExceeded also holds.
	CodeCanceled = "CANCELED"
	// CodeBadResponse: an endpoint answered something that is not a usable answer.
	CodeBadResponse = "BAD_RESPONSE"
	// CodeUnsafePath: a path leaves the worktree (absolute, "..", a symlink out) or enters .git.
	CodeUnsafePath = "UNSAFE_PATH"
	// CodeNoCommand: there is nothing to run (a task without command for the command executor,
	// an agent CLI without argv).
	CodeNoCommand = "NO_COMMAND"
	// CodeNoFile: the openai executor was given a task without a file to write.
	CodeNoFile = "NO_FILE"
)

// Executor does tasks. Implementations are safe for concurrent use.
type Executor interface {
	// Run does req's task in req.Dir. It answers a non-nil error, always an *Error, when the
	// task was not done; the Result then holds what is known (exit code, output, duration).
	Run(ctx context.Context, req Request) (Result, error)
}

// Request is one task to do.
type Request struct {
	// Dir is the worktree, an absolute path; every path the executor writes is inside it.
	Dir string
	// Task is the task.
	Task *commonv1.Task
	// Prompt is the prompt built for the task (see package prompt); the command executor does
	// not use it.
	Prompt string
	// Attempt is the 1-based attempt number, passed to processes as CONVERGE_ATTEMPT.
	Attempt int
	// Timeout bounds the run (default DefaultTimeout).
	Timeout time.Duration
	// OutputCap is how many bytes of output the Result keeps: the last ones
	// (default DefaultOutputCap).
	OutputCap int64
}

// check refuses a request whose Dir is not an absolute path: a process must never run in the
// agent's own working directory by accident.
func (r Request) check() *Error {
	if r.Dir == "" || !filepath.IsAbs(r.Dir) {
		return newError(CodeExecutorFailed, "the request's directory %q is not an absolute path", r.Dir)
	}
	return nil
}

func (r Request) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

func (r Request) outputCap() int64 {
	if r.OutputCap > 0 {
		return r.OutputCap
	}
	return DefaultOutputCap
}

// Result is what a run did.
type Result struct {
	// ExitCode is the process's exit status (-1 when killed or not started); 0 for the openai
	// executor when the file was written.
	ExitCode int
	// Output is the tail of the process's combined output, or of the endpoint's answer, valid
	// UTF-8, at most the request's OutputCap bytes.
	Output string
	// Duration is how long the run took.
	Duration time.Duration
	// FilesWritten are the worktree-relative files the executor itself wrote or deleted (the
	// openai executor's task file). The command and agent-cli executors leave it empty: what
	// their processes changed is for the workspace's diff to tell.
	FilesWritten []string
	// Usage is the model usage the run reported: the openai executor's from the answer's usage,
	// the agent-cli executor's from the last "converge-usage:" line of its output (ParseUsage).
	// Zero when none was reported.
	Usage Usage
}

// Error is why a run did not do its task.
type Error struct {
	// Code is one of the Code constants.
	Code string
	// Message says what happened, for people; it never holds a secret.
	Message string
	// Output is the tail of the process's output or of the endpoint's answer, if any.
	Output string
	// Err is the underlying error, if any (a context's error for CodeCanceled and CodeTimeout).
	Err error
}

// Error answers "CODE: message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap answers the underlying error.
func (e *Error) Unwrap() error { return e.Err }

func newError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Option configures New and Validate.
type Option func(*options)

type options struct {
	lookupEnv   func(string) (string, bool)
	httpClient  *http.Client
	passthrough []string
	groups      proc.Recorder
	// allowedEnv, when restrictEnv, are the only variables a spec may name (env_passthrough,
	// api_key_env).
	allowedEnv  map[string]bool
	restrictEnv bool
	sandbox     Sandbox
	// cgroupParent gives each process a cgroup under it (WithCgroupParent); "": none.
	cgroupParent string
}

// WithLookupEnv reads the agent's environment through lookup instead of os.LookupEnv: for
// env_passthrough, the base variables (PATH, HOME, ...) and the openai API key.
func WithLookupEnv(lookup func(string) (string, bool)) Option {
	return func(o *options) { o.lookupEnv = lookup }
}

// WithHTTPClient sends the openai executor's requests with c (default: a client of its own
// without a timeout; each request is bounded by its context).
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) { o.httpClient = c }
}

// WithEnvPassthrough passes these variables of the agent's environment through to processes
// as well: to Validate's command, and to New's command and agent-cli processes in addition to
// the spec's env_passthrough.
func WithEnvPassthrough(names ...string) Option {
	return func(o *options) { o.passthrough = append(o.passthrough, names...) }
}

// WithProcessGroups tells r about the process group of every process New's executors and
// Validate start (proc.Spec.Groups): the agent records them so that they are killed when it
// stops, or by the next agent when it was killed.
func WithProcessGroups(r proc.Recorder) Option {
	return func(o *options) { o.groups = r }
}

// WithAllowedEnv restricts the variables of the agent's environment an executor spec may name
// (env_passthrough, api_key_env) to names: a task list is written by whoever may submit one,
// and without the restriction it could have any secret of the agent's environment passed to
// its command or sent to the base_url of its choice. New refuses a spec naming another
// variable. Without this option every name is allowed (embedders that judge specs themselves);
// the agent always gives it (--allow-env), and a CONVERGE_* name is refused either way.
func WithAllowedEnv(names ...string) Option {
	return func(o *options) {
		o.restrictEnv = true
		if o.allowedEnv == nil {
			o.allowedEnv = map[string]bool{}
		}
		for _, n := range names {
			o.allowedEnv[n] = true
		}
	}
}

// checkEnvNames refuses the names a spec may not name: CONVERGE_* (the agent's own
// configuration and secrets), and with WithAllowedEnv every name not on the list.
func (o *options) checkEnvNames(field string, names ...string) error {
	for _, n := range names {
		if n == "" {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(n), "CONVERGE_") {
			return fmt.Errorf("executor: %s names %s: the agent's CONVERGE_* variables are never passed to a task", field, n)
		}
		if o.restrictEnv && !o.allowedEnv[n] {
			return fmt.Errorf("executor: %s names %s, which is not on this agent's allow-list of variables (its --allow-env flag, CONVERGE_AGENT_ALLOW_ENV)", field, n)
		}
	}
	return nil
}

func newOptions(opts []Option) *options {
	o := &options{lookupEnv: os.LookupEnv}
	for _, opt := range opts {
		opt(o)
	}
	if o.httpClient == nil {
		o.httpClient = &http.Client{}
	}
	return o
}

// env builds a process's environment: the base variables, passthrough names and the task's
// CONVERGE_* variables.
func (o *options) env(passthrough []string, req Request) []string {
	names := append(append([]string(nil), passthrough...), o.passthrough...)
	extra := map[string]string{
		"CONVERGE_TASK_ID":   req.Task.GetId(),
		"CONVERGE_TASK_FILE": req.Task.GetFile(),
		"CONVERGE_ATTEMPT":   strconv.Itoa(req.Attempt),
	}
	env, _ := proc.EnvFrom(o.lookupEnv, names, extra)
	return env
}

// UsesPrompt reports whether the executor spec chooses reads Request.Prompt (an agent CLI or an
// OpenAI-compatible model); the command executor does not, and its caller need not build one.
func UsesPrompt(spec *commonv1.ExecutorSpec) bool {
	return spec.GetAgentCli() != nil || spec.GetOpenai() != nil
}

// New returns the executor spec chooses; a nil spec is the command executor without
// passthrough. It answers an error for a spec that cannot work (no executor chosen, an agent
// CLI without argv, an openai endpoint without a usable base URL or model).
func New(spec *commonv1.ExecutorSpec, opts ...Option) (Executor, error) {
	o := newOptions(opts)
	if spec == nil {
		return &commandExecutor{opts: o}, nil
	}
	switch {
	case spec.GetCommand() != nil:
		if err := o.checkEnvNames("command.env_passthrough", spec.GetCommand().GetEnvPassthrough()...); err != nil {
			return nil, err
		}
		return &commandExecutor{spec: spec.GetCommand(), opts: o}, nil
	case spec.GetAgentCli() != nil:
		cli := spec.GetAgentCli()
		if len(cli.GetArgv()) == 0 || cli.GetArgv()[0] == "" {
			return nil, errors.New("executor: agent_cli.argv names no program")
		}
		if err := o.checkEnvNames("agent_cli.env_passthrough", cli.GetEnvPassthrough()...); err != nil {
			return nil, err
		}
		return &agentCLIExecutor{spec: cli, opts: o}, nil
	case spec.GetOpenai() != nil:
		oa := spec.GetOpenai()
		if err := o.checkEnvNames("openai.api_key_env", oa.GetApiKeyEnv()); err != nil {
			return nil, err
		}
		u, err := url.Parse(oa.GetBaseUrl())
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("executor: openai.base_url %q is not an http(s) URL", oa.GetBaseUrl())
		}
		if oa.GetModel() == "" {
			return nil, errors.New("executor: openai.model is not set")
		}
		return &openAIExecutor{spec: oa, opts: o}, nil
	default:
		return nil, errors.New("executor: the executor spec chooses no executor")
	}
}

// Capability is the agent capability an executor spec needs ("executor:command",
// "executor:agent-cli" or "executor:openai"): agents advertise the ones they can run and are
// given matching work. A nil spec, or one choosing nothing, is the command executor.
func Capability(spec *commonv1.ExecutorSpec) string {
	switch {
	case spec.GetAgentCli() != nil:
		return "executor:agent-cli"
	case spec.GetOpenai() != nil:
		return "executor:openai"
	default:
		return "executor:command"
	}
}

// processError turns a process's result into the executor's error, or nil when it exited 0.
// what names the process in messages.
func processError(ctx context.Context, what string, res proc.Result, timeout time.Duration, output string) *Error {
	switch {
	case res.Err != nil && ctx.Err() != nil:
		return &Error{Code: CodeCanceled, Message: what + " was not started: " + ctx.Err().Error(), Err: ctx.Err()}
	case res.Err != nil:
		return &Error{Code: CodeExecutorFailed, Message: what + " could not start: " + res.Err.Error(), Err: res.Err}
	case res.TimedOut:
		return &Error{Code: CodeTimeout, Message: fmt.Sprintf("%s was killed after its %s timeout", what, timeout),
			Output: output, Err: context.DeadlineExceeded}
	case res.Canceled:
		return &Error{Code: CodeCanceled, Message: what + " was killed: " + context.Cause(ctx).Error(),
			Output: output, Err: ctx.Err()}
	case res.ExitCode != 0:
		return &Error{Code: CodeExecutorFailed, Message: fmt.Sprintf("%s failed: %s", what, res.Status), Output: output}
	}
	return nil
}

// clean answers s as valid UTF-8 and at most n bytes (n > 0), its end kept, cut at a rune
// boundary.
func clean(s string, n int64) string {
	s = strings.ToValidUTF8(tailBytes(s, n), "\uFFFD")
	return tailBytes(s, n) // a replacement character is longer than the byte it replaces
}

// tailBytes answers at most the last n bytes of s, starting at a rune boundary.
func tailBytes(s string, n int64) string {
	if n <= 0 || int64(len(s)) <= n {
		return s
	}
	s = s[int64(len(s))-n:]
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0 && !utf8.RuneStart(s[0]); i++ {
		s = s[1:]
	}
	return s
}

// excerptHead answers s as valid UTF-8, cut to its first n bytes at a rune boundary with "…"
// when longer.
func excerptHead(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
