package gitexec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/gitexec"
)

// A repository's own hooks and the caller's GIT_* environment change nothing.
func TestRunIgnoresHooksAndInheritedGitEnvironment(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	_, err := gitexec.Git(ctx, dir, "init", "-q", "-b", "main")
	require.NoError(t, err)
	hook := filepath.Join(dir, ".git", "hooks", "pre-commit")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\necho hooked > hooked\nexit 1\n"), 0o755))

	other := t.TempDir()
	t.Setenv("GIT_DIR", filepath.Join(other, ".git")) // would redirect every command
	t.Setenv("GIT_AUTHOR_NAME", "Mallory")
	ident := []string{"-c", "user.name=converge", "-c", "user.email=converge@localhost"}
	_, err = gitexec.Git(ctx, dir, append(ident, "commit", "-q", "--allow-empty", "-m", "first")...)
	require.NoError(t, err, "the failing pre-commit hook must not run")
	require.NoFileExists(t, filepath.Join(dir, "hooked"))
	author, err := gitexec.Git(ctx, dir, "log", "-1", "--format=%an")
	require.NoError(t, err)
	require.Equal(t, "converge", strings.TrimSpace(author))
}

// A failure is an *Error with git's exit code and its reason; a timeout ends the command.
func TestRunReportsFailuresAndTimeouts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := gitexec.Git(t.Context(), dir, "rev-parse", "--verify", "no-such-ref")
	var ge *gitexec.Error
	require.ErrorAs(t, err, &ge)
	require.Equal(t, 128, ge.ExitCode)
	require.Contains(t, ge.Reason(), "not a git repository")

	// ext:: transports stay off whatever the configuration says.
	_, err = gitexec.Git(t.Context(), dir, "ls-remote", "ext::sh -c touch% "+filepath.Join(dir, "pwned"))
	require.Error(t, err)
	require.NoFileExists(t, filepath.Join(dir, "pwned"))

	_, err = gitexec.Cmd{Dir: dir, Args: []string{"-c", "alias.wait=!sleep 30", "wait"}, Timeout: 200 * time.Millisecond}.Run(context.Background())
	require.ErrorAs(t, err, &ge)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}

// Output past the cap fails the command instead of filling memory.
func TestRunCapsOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := gitexec.Git(t.Context(), dir, "init", "-q")
	require.NoError(t, err)
	out, err := gitexec.Cmd{Dir: dir, Args: []string{"-c", "alias.loud=!yes converge | head -c 100000", "loud"}, MaxOutput: 1000}.Run(t.Context())
	require.ErrorIs(t, err, gitexec.ErrOutputTooLarge)
	require.LessOrEqual(t, len(out), 1000)
}
