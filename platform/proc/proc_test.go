package proc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/proc"
)

func TestRunShellSucceeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	res := proc.Run(t.Context(), proc.Spec{
		Shell: `pwd; echo out; echo err >&2; cat`,
		Dir:   dir,
		Env:   proc.Env(nil, nil),
		Stdin: strings.NewReader("from stdin"),
	})
	require.NoError(t, res.Err)
	require.Equal(t, 0, res.ExitCode)
	require.False(t, res.TimedOut)
	require.Equal(t, "exit status 0", res.Status)
	require.Equal(t, dir+"\nout\nerr\nfrom stdin", res.Output)
	require.False(t, res.Truncated)
	require.Zero(t, res.Discarded)
	require.Positive(t, res.Duration)
}

func TestRunArgvExitCode(t *testing.T) {
	t.Parallel()
	res := proc.Run(t.Context(), proc.Spec{Argv: []string{"sh", "-c", "echo failing; exit 3"}})
	require.NoError(t, res.Err)
	require.Equal(t, 3, res.ExitCode)
	require.Equal(t, "exit status 3", res.Status)
	require.Equal(t, "failing\n", res.Output)
}

func TestRunDoesNotStart(t *testing.T) {
	t.Parallel()
	res := proc.Run(t.Context(), proc.Spec{Argv: []string{"converge-no-such-program"}})
	require.ErrorIs(t, res.Err, exec.ErrNotFound)
	require.Equal(t, -1, res.ExitCode)

	res = proc.Run(t.Context(), proc.Spec{Shell: "true", Dir: filepath.Join(t.TempDir(), "missing")})
	require.ErrorIs(t, res.Err, fs.ErrNotExist)

	res = proc.Run(t.Context(), proc.Spec{})
	require.ErrorIs(t, res.Err, proc.ErrNoCommand)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res = proc.Run(ctx, proc.Spec{Shell: "true"})
	require.ErrorIs(t, res.Err, context.Canceled)
	require.Equal(t, -1, res.ExitCode)
}

func TestRunTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Now()
	res := proc.Run(t.Context(), proc.Spec{
		Shell:   `sleep 60 & echo $! > child.pid; echo started; wait`,
		Dir:     dir,
		Timeout: 300 * time.Millisecond,
	})
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, res.Err)
	require.True(t, res.TimedOut)
	require.False(t, res.Canceled)
	require.Equal(t, -1, res.ExitCode)
	require.Equal(t, "signal: killed", res.Status)
	require.Equal(t, "started\n", res.Output)
	requireGone(t, readPid(t, dir))
}

func TestRunCancelKillsTheGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	res := proc.Run(ctx, proc.Spec{Shell: `sleep 60 & echo $! > child.pid; wait`, Dir: dir, Timeout: time.Minute})
	require.True(t, res.Canceled)
	require.False(t, res.TimedOut, "the caller's deadline is not the run's timeout")
	require.Equal(t, -1, res.ExitCode)
	requireGone(t, readPid(t, dir))
}

// A process that exits and leaves a grandchild holding its output does not make Run wait for
// the grandchild, nor for the WaitDelay: the group is killed when the leader exits.
func TestRunKillsWhatTheProcessLeftBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Now()
	res := proc.Run(t.Context(), proc.Spec{
		Shell:     `sleep 60 & echo $! > child.pid; echo done`,
		Dir:       dir,
		WaitDelay: 30 * time.Second,
	})
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, 0, res.ExitCode)
	require.False(t, res.TimedOut)
	require.Equal(t, "done\n", res.Output)
	requireGone(t, readPid(t, dir))
}

// A process that left the group (setsid) and holds the output pipe is waited for at most
// WaitDelay.
func TestRunWaitDelayBoundsAnEscapedProcess(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid is not installed")
	}
	dir := t.TempDir()
	start := time.Now()
	res := proc.Run(t.Context(), proc.Spec{
		Shell:     `setsid sh -c 'echo $$ > child.pid; exec sleep 60' & sleep 0.2; echo done`,
		Dir:       dir,
		Env:       proc.Env(nil, nil),
		WaitDelay: 300 * time.Millisecond,
	})
	elapsed := time.Since(start)
	require.Equal(t, 0, res.ExitCode)
	require.Contains(t, res.Output, "done\n")
	require.Less(t, elapsed, 10*time.Second)
	pid := readPid(t, dir)
	_ = syscall.Kill(pid, syscall.SIGKILL) // not ours to keep
}

func TestRunOutputCapKeepsTheTail(t *testing.T) {
	t.Parallel()
	res := proc.Run(t.Context(), proc.Spec{
		Shell:     `i=0; while [ $i -lt 1000 ]; do echo "line $i"; i=$((i+1)); done; echo last >&2`,
		OutputCap: 100,
	})
	require.Equal(t, 0, res.ExitCode)
	require.Len(t, res.Output, 100)
	require.True(t, strings.HasSuffix(res.Output, "line 999\nlast\n"), res.Output)
	require.True(t, res.Truncated)
	var total int64 = 5 // "last\n"
	for i := range 1000 {
		total += int64(len(fmt.Sprintf("line %d\n", i)))
	}
	require.Equal(t, total-100, res.Discarded)
}

func TestRunSeparateStreams(t *testing.T) {
	t.Parallel()
	var stdout bytes.Buffer
	stderr := proc.NewTailBuffer(3)
	res := proc.Run(t.Context(), proc.Spec{
		Shell:  `echo to-stdout; echo to-stderr >&2`,
		Stdout: &stdout,
		Stderr: stderr,
	})
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, "to-stdout\n", stdout.String())
	require.Equal(t, "rr\n", stderr.String())
	require.Equal(t, int64(10), stderr.Total())
	require.True(t, stderr.Truncated())
	require.Empty(t, res.Output)

	// Only stderr of its own: stdout goes to Output.
	stderr = proc.NewTailBuffer(100)
	res = proc.Run(t.Context(), proc.Spec{Shell: `echo a; echo b >&2`, Stderr: stderr})
	require.Equal(t, "a\n", res.Output)
	require.Equal(t, "b\n", stderr.String())
}

func TestRunNilEnvIsEmpty(t *testing.T) {
	t.Setenv("CONVERGE_PROC_SECRET", "s3cret")
	res := proc.Run(t.Context(), proc.Spec{Argv: []string{"/usr/bin/env"}})
	if res.Err != nil {
		res = proc.Run(t.Context(), proc.Spec{Argv: []string{"env"}})
	}
	require.NoError(t, res.Err)
	require.NotContains(t, res.Output, "s3cret")
}

func TestEnv(t *testing.T) {
	t.Setenv("CONVERGE_PROC_PASSED", "yes")
	t.Setenv("CONVERGE_PROC_SECRET", "s3cret")
	t.Setenv("HOME", "/home/converge")
	env := proc.Env([]string{"CONVERGE_PROC_PASSED", "CONVERGE_PROC_UNSET"}, map[string]string{"CONVERGE_TASK_ID": "1.2"})
	require.Contains(t, env, "CONVERGE_PROC_PASSED=yes")
	require.Contains(t, env, "CONVERGE_TASK_ID=1.2")
	require.Contains(t, env, "HOME=/home/converge")
	require.Contains(t, env, "PATH="+os.Getenv("PATH"))
	for _, kv := range env {
		require.NotContains(t, kv, "s3cret")
		require.False(t, strings.HasPrefix(kv, "CONVERGE_PROC_UNSET="))
	}
	require.IsNonDecreasing(t, env)

	res := proc.Run(t.Context(), proc.Spec{Shell: `echo "$CONVERGE_PROC_PASSED/$CONVERGE_PROC_SECRET/$CONVERGE_TASK_ID"`, Env: env})
	require.Equal(t, "yes//1.2\n", res.Output)
}

func TestEnvFrom(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"LANG": "C.UTF-8", "TOKEN": "t", "OTHER": "o"}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	env, missing := proc.EnvFrom(lookup, []string{"TOKEN", "ABSENT", "MODE"}, map[string]string{"MODE": "ci", "X": "1"})
	require.Equal(t, []string{"LANG=C.UTF-8", "MODE=ci", "PATH=" + proc.DefaultPath, "TOKEN=t", "X=1"}, env)
	require.Equal(t, []string{"ABSENT", "MODE"}, missing)

	// A passthrough name that is set wins over extra.
	vars["MODE"] = "from-env"
	env, missing = proc.EnvFrom(lookup, []string{"MODE"}, map[string]string{"MODE": "ci"})
	require.Contains(t, env, "MODE=from-env")
	require.Empty(t, missing)
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	b := proc.NewTailBuffer(5)
	require.Empty(t, b.String())
	for _, s := range []string{"ab", "cd", "efg", "", "h", "ijklmnop", "q"} {
		n, err := b.Write([]byte(s))
		require.NoError(t, err)
		require.Equal(t, len(s), n)
	}
	require.Equal(t, "mnopq", b.String())
	require.Equal(t, int64(17), b.Total())
	require.Equal(t, int64(12), b.Discarded())
	require.True(t, b.Truncated())

	b = proc.NewTailBuffer(0) // at least one byte
	_, _ = b.Write([]byte("xyz"))
	require.Equal(t, "z", b.String())
}

func readPid(t *testing.T, dir string) int {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(dir, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(text)))
	require.NoError(t, err)
	return pid
}

// requireGone waits until process pid no longer runs: it was sent SIGKILL, and the kernel
// removes it once its parent (init, for an orphan) reaps it.
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

// The shell of a Spec.Shell is looked up once per value of PATH (issue 17), not once for all:
// another PATH finds another sh.
func TestShellIsLookedUpPerPath(t *testing.T) {
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "sh"), []byte("#!/bin/sh\necho fake sh\n"), 0o755))
	first := proc.Run(t.Context(), proc.Spec{Shell: "echo real sh", Env: proc.Env(nil, nil)})
	require.NoError(t, first.Err)
	require.Equal(t, "real sh\n", first.Output)

	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	fake := proc.Run(t.Context(), proc.Spec{Shell: "echo real sh", Env: proc.Env(nil, nil)})
	require.NoError(t, fake.Err)
	require.Equal(t, "fake sh\n", fake.Output, "the sh of the new PATH")
}
