package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/proc"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// readPid reads a pid file.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// alive reports whether pid runs (a zombie, killed and waiting to be reaped, does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || !strings.Contains(string(stat), ") Z ")
}

// background is a command that leaves a child appending to out every 50 ms, its pid in pidFile.
func background(out, pidFile string) string {
	return fmt.Sprintf("(while :; do echo x >> %s; sleep 0.05; done) & echo $! > %s", shq(out), shq(pidFile))
}

// Issue 12 defect 8: what a task's command leaves running in the background is killed when the
// try ends, whether the try failed or succeeded.
func TestBackgroundChildrenDieWithTheirTry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, tail string
		want       schedulerv1.CompletionResult
	}{
		{"failed", "; exit 1", schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED},
		{"succeeded", "", schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, pidFile := tmpFile(t, "out"), tmpFile(t, "child.pid")
			h := startWorker(t, nil)
			ca := claimed(t, &commonv1.Task{Id: "8", Title: "leaves a child", Command: background(out, pidFile) + tc.tail}, "")
			ca.Options.MaxRetries = proto.Int32(0)
			h.sched.push(ca)
			c := h.complete()
			require.Equal(t, tc.want, c.GetResult(), "%v", c.GetError())
			pid := readPid(t, pidFile)
			eventually(t, 10*time.Second, func() bool { return !alive(pid) }, "the child %d still runs after its try", pid)
		})
	}
}

// An agent starting on a data dir cleans up after the dead processes that used it: it kills the
// process groups they recorded (a child still writing into a worktree) and removes their clean
// worktrees and scratch directories; it keeps a worktree with unpushed commits, and whatever a
// live process holds.
func TestStartCleansUpAfterADeadSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	repo := origin(t)
	data := t.TempDir()
	cache, err := workspace.NewCache(data)
	require.NoError(t, err)
	r, err := cache.Open(ctx, repo)
	require.NoError(t, err)
	add := func(name string) *workspace.Worktree {
		wt, err := r.AddWorktree(ctx, name, "main")
		require.NoError(t, err)
		return wt
	}

	// A dead session: its lock file is not locked; a group it recorded still runs (the leader
	// died with the agent, its child did not) and writes into its worktree.
	dead := filepath.Join(data, "sessions", "s-dead")
	groups, err := proc.NewGroupDir(filepath.Join(dead, "groups"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dead, "worktrees"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dead, "lock"), nil, 0o644))
	clean := add("ex_1-t1-1")
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	leader := exec.Command("sh", "-c", background(filepath.Join(clean.Dir, "out.txt"), pidFile))
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, leader.Start())
	groups.Started(leader.Process.Pid)
	require.NoError(t, leader.Wait())
	child := readPid(t, pidFile)
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	require.True(t, alive(child))

	unpushed := add("ex_1-t2-1")
	require.NoError(t, os.WriteFile(filepath.Join(unpushed.Dir, "work.txt"), []byte("work\n"), 0o644))
	_, _, err = unpushed.Commit(ctx, "unpushed work", []string{"work.txt"}, identity)
	require.NoError(t, err)
	scratch, err := workspace.Scratch(data, "ex_2-t1-1")
	require.NoError(t, err)

	// A live session (another process: its lock is held) and the worktree it holds.
	live := filepath.Join(data, "sessions", "s-live")
	require.NoError(t, os.MkdirAll(filepath.Join(live, "worktrees"), 0o755))
	lock, locked, err := tryLock(filepath.Join(live, "lock"))
	require.NoError(t, err)
	require.True(t, locked)
	defer lock.Close()
	held := add("ex_1-t3-1")
	require.NoError(t, os.WriteFile(filepath.Join(live, "worktrees", held.Name), nil, 0o644))

	h := startWorker(t, func(c *Config) { c.DataDir = data })
	eventually(t, 20*time.Second, func() bool { return len(h.reg.beats()) > 0 }, "the worker registered")
	require.False(t, alive(child), "the dead session's child was killed")
	require.NoDirExists(t, clean.Dir, "the dead session's clean worktree was removed")
	require.NoDirExists(t, scratch.Dir)
	require.DirExists(t, unpushed.Dir, "a worktree with unpushed commits is never removed")
	require.DirExists(t, held.Dir, "a live session's worktree is its own")
	require.NoDirExists(t, dead, "the dead session's record is gone")
	require.DirExists(t, live)
	require.DirExists(t, filepath.Join(data, "sessions", h.w.SessionID()))

	// When the worker stops, its own record goes.
	h.stop()
	require.NoError(t, h.wait())
	require.NoDirExists(t, filepath.Join(data, "sessions", h.w.SessionID()))
}
