// Package gitexec runs the git CLI the one way converge runs it everywhere (the agent's
// workspaces, the Scheduler's base refs, the Verifier's checkouts): a fixed configuration and
// environment that no user or system setting can change (no hooks, no fsmonitor, no pager or
// editor, no prompt, C locale, no inherited GIT_DIR and friends), a timeout, and capped output.
// Results never depend on who runs the binary or where.
package gitexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// baseConfig is passed to every git command so that nothing that changes results depends on the
// user's or the system's git configuration.
var baseConfig = []string{
	"-c", "core.autocrlf=false",
	"-c", "core.fsmonitor=false",
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.excludesFile=/dev/null",
	"-c", "core.quotePath=false",
	"-c", "commit.gpgSign=false",
	"-c", "tag.gpgSign=false",
	"-c", "rerere.enabled=false",
	"-c", "advice.detachedHead=false",
	"-c", "safe.bareRepository=all",
	"-c", "submodule.recurse=false",
	"-c", "fetch.recurseSubmodules=false",
	"-c", "push.recurseSubmodules=no",
	"-c", "gc.autoDetach=false",
	"-c", "maintenance.auto=false",
	"-c", "protocol.ext.allow=never",
}

// noGC turns automatic gc off for commands that do not ask for it: commits and cherry-picks in
// parallel worktrees should not start a gc of a shared repository.
var noGC = []string{"-c", "gc.auto=0"}

// droppedEnv are inherited variables that would make git act on another repository, index or
// identity than the one asked for, or change how pathspecs and config are read.
var droppedEnv = map[string]bool{
	"GIT_DIR": true, "GIT_WORK_TREE": true, "GIT_INDEX_FILE": true, "GIT_OBJECT_DIRECTORY": true,
	"GIT_ALTERNATE_OBJECT_DIRECTORIES": true, "GIT_COMMON_DIR": true, "GIT_NAMESPACE": true,
	"GIT_PREFIX": true, "GIT_CEILING_DIRECTORIES": true, "GIT_DISCOVERY_ACROSS_FILESYSTEM": true,
	"GIT_AUTHOR_NAME": true, "GIT_AUTHOR_EMAIL": true, "GIT_AUTHOR_DATE": true,
	"GIT_COMMITTER_NAME": true, "GIT_COMMITTER_EMAIL": true, "GIT_COMMITTER_DATE": true,
	"GIT_LITERAL_PATHSPECS": true, "GIT_GLOB_PATHSPECS": true, "GIT_NOGLOB_PATHSPECS": true,
	"GIT_ICASE_PATHSPECS": true, "GIT_CONFIG_PARAMETERS": true, "GIT_CONFIG_COUNT": true,
	"GIT_QUARANTINE_PATH": true, "GIT_REPLACE_REF_BASE": true, "GIT_SHALLOW_FILE": true,
	"GIT_GRAFT_FILE": true, "GIT_EDITOR": true, "GIT_SEQUENCE_EDITOR": true, "GIT_PAGER": true,
	"GIT_REFLOG_ACTION": true, "GIT_INTERNAL_SUPER_PREFIX": true, "GIT_ASKPASS": true,
	"SSH_ASKPASS": true, "GIT_SSH_COMMAND": true, "GIT_PROXY_COMMAND": true, "GIT_EXEC_PATH": true,
	"LANG": true, "LANGUAGE": true,
}

// fixedEnv is appended to every git command's environment.
var fixedEnv = []string{
	"GIT_TERMINAL_PROMPT=0",
	"GIT_CONFIG_NOSYSTEM=1",
	"LC_ALL=C",
	"GIT_EDITOR=true",
	"GIT_SEQUENCE_EDITOR=true",
	"GIT_MERGE_AUTOEDIT=no",
	"GIT_PAGER=cat",
	"GIT_NO_REPLACE_OBJECTS=1",
}

// Env is the environment of a git command: the process environment without the variables that
// redirect or reconfigure git (and without LC_*, GIT_CONFIG_KEY_*/VALUE_*), then the fixed
// settings, then extra.
func Env(extra []string) []string {
	inherited := os.Environ()
	env := make([]string, 0, len(inherited)+len(fixedEnv)+len(extra))
	for _, kv := range inherited {
		k, _, _ := strings.Cut(kv, "=")
		if droppedEnv[k] || strings.HasPrefix(k, "LC_") ||
			strings.HasPrefix(k, "GIT_CONFIG_KEY_") || strings.HasPrefix(k, "GIT_CONFIG_VALUE_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, fixedEnv...)
	return append(env, extra...)
}

// Caps of what a command may print.
const (
	// MaxStderr caps the standard error kept in an *Error.
	MaxStderr = 8 << 10
	// DefaultMaxOutput caps the standard output a command may print: past it the command is
	// killed and fails with ErrOutputTooLarge.
	DefaultMaxOutput = 64 << 20
)

// ErrOutputTooLarge: the command printed more than its cap on standard output.
var ErrOutputTooLarge = errors.New("git printed more output than allowed")

// Cmd is one git invocation.
type Cmd struct {
	// Dir is the working directory.
	Dir string
	// Args are git's arguments (after the fixed -c options).
	Args []string
	// Env is extra environment, after the fixed settings.
	Env []string
	// Stdin is the command's standard input, if any.
	Stdin io.Reader
	// GC leaves automatic gc enabled (fetch into a shared mirror, under its lock).
	GC bool
	// Timeout bounds the command; 0 leaves it to ctx.
	Timeout time.Duration
	// MaxOutput caps standard output; 0 is DefaultMaxOutput.
	MaxOutput int
}

// Run executes the command and returns its standard output. A failure is an *Error.
func (c Cmd) Run(ctx context.Context) (string, error) {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	argv := make([]string, 0, len(baseConfig)+len(noGC)+len(c.Args))
	argv = append(argv, baseConfig...)
	if !c.GC {
		argv = append(argv, noGC...)
	}
	argv = append(argv, c.Args...)
	cmd := exec.CommandContext(ctx, "git", argv...)
	cmd.Dir = c.Dir
	cmd.Env = Env(c.Env)
	cmd.Stdin = c.Stdin
	cmd.WaitDelay = 5 * time.Second
	limit := c.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	stdout := &capped{limit: limit}
	var stderr bytes.Buffer
	cmd.Stdout = stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil && !stdout.over {
		return stdout.String(), nil
	}
	ge := &Error{Args: c.Args, Dir: c.Dir, ExitCode: -1, Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ge.ExitCode = ee.ExitCode()
	}
	switch {
	case stdout.over:
		ge.Err = ErrOutputTooLarge
	case ctx.Err() != nil:
		ge.Err = ctx.Err()
	}
	s := stderr.String()
	if len(s) > MaxStderr {
		s = s[:MaxStderr] + "…"
	}
	ge.Stderr = s
	return stdout.String(), ge
}

// Git runs git with args in dir, with no timeout but ctx's.
func Git(ctx context.Context, dir string, args ...string) (string, error) {
	return Cmd{Dir: dir, Args: args}.Run(ctx)
}

// Error is a git command that failed: its arguments (without the -c options every command
// gets), the directory it ran in, its exit code (-1 when it did not run or was killed) and its
// standard error.
type Error struct {
	Args     []string
	Dir      string
	ExitCode int
	Stderr   string
	Err      error
}

// Error is "git <args>: <cause>: <stderr>".
func (e *Error) Error() string {
	msg := "git " + strings.Join(e.Args, " ") + ": " + e.Err.Error()
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// Unwrap returns the underlying exec error (or the context's error when it was cancelled).
func (e *Error) Unwrap() error { return e.Err }

// Reason is git's own last line of explanation (the last line of its standard error), or the
// cause when it printed none: what a client-facing message shows.
func (e *Error) Reason() string {
	msg := strings.TrimSpace(e.Stderr)
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		msg = e.Err.Error()
	}
	return msg
}

// capped is a buffer that stops taking bytes past its limit (and says so), so a runaway command
// cannot exhaust memory. It must not embed bytes.Buffer: io.Copy would use the buffer's ReadFrom
// and bypass Write.
type capped struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.limit - c.buf.Len(); len(p) > room {
		if room > 0 {
			c.buf.Write(p[:room])
		}
		c.over = true
		return 0, ErrOutputTooLarge
	}
	return c.buf.Write(p)
}

func (c *capped) String() string { return c.buf.String() }
