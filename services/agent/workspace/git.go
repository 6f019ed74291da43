package workspace

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
}

// noGC turns automatic gc off for commands other than fetch: commits and cherry-picks in
// parallel worktrees should not start a gc of the shared mirror. Fetch (under the mirror's
// exclusive lock) keeps git's default so the mirror is still packed over time.
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
	"GIT_REFLOG_ACTION": true, "GIT_INTERNAL_SUPER_PREFIX": true,
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

// gitEnv is the environment of a git command: the process environment without droppedEnv (and
// without LC_*, GIT_CONFIG_KEY_*/VALUE_*), then fixedEnv, then extra.
func gitEnv(extra []string) []string {
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

// gitCmd is one git invocation.
type gitCmd struct {
	dir   string    // working directory
	env   []string  // extra environment, after fixedEnv
	stdin io.Reader // optional
	gc    bool      // leave automatic gc enabled (fetch only)
	args  []string
}

// maxStderr caps the stderr kept in a *GitError.
const maxStderr = 8 << 10

// run executes the command and returns its standard output. A failure is a *GitError.
func (c gitCmd) run(ctx context.Context) (string, error) {
	argv := make([]string, 0, len(baseConfig)+len(noGC)+len(c.args))
	argv = append(argv, baseConfig...)
	if !c.gc {
		argv = append(argv, noGC...)
	}
	argv = append(argv, c.args...)
	cmd := exec.CommandContext(ctx, "git", argv...)
	cmd.Dir = c.dir
	cmd.Env = gitEnv(c.env)
	cmd.Stdin = c.stdin
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	ge := &GitError{Args: c.args, Dir: c.dir, ExitCode: -1, Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ge.ExitCode = ee.ExitCode()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		ge.Err = ctxErr
	}
	s := stderr.String()
	if len(s) > maxStderr {
		s = s[:maxStderr] + "…"
	}
	ge.Stderr = s
	return stdout.String(), ge
}

// git runs git with args in dir.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	return gitCmd{dir: dir, args: args}.run(ctx)
}
