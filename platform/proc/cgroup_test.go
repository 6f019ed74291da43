package proc_test

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/proc"
)

// cgroupOnly answers a sandbox with only a cgroup per run, under a parent of the test's own,
// removed (with what is left in it) when the test ends.
func cgroupOnly(t *testing.T) (*proc.Sandbox, string) {
	t.Helper()
	parent, err := proc.CgroupDir("converge-proc-pool-" + strconv.Itoa(os.Getpid()) + "-" + t.Name())
	require.NoError(t, err, "this test needs a writable cgroup v2")
	t.Cleanup(func() { _ = proc.KillCgroups(parent) })
	return &proc.Sandbox{UID: -1, GID: -1, CgroupParent: parent}, parent
}

// runCgroupDirs answers the run cgroups under parent.
func runCgroupDirs(t *testing.T, parent string) []string {
	t.Helper()
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "run-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// ownCgroup runs `cat /proc/self/cgroup` in sb and answers the run's cgroup (its v2 path).
func ownCgroup(t *testing.T, sb *proc.Sandbox, shell string) (string, proc.Result) {
	t.Helper()
	res := proc.Run(t.Context(), proc.Spec{Shell: shell + "\n" + `grep '^0::' /proc/self/cgroup`, Env: proc.Env(nil, nil), Timeout: time.Minute, Sandbox: sb})
	require.NoError(t, res.Err)
	i := strings.LastIndex(res.Output, "0::")
	require.GreaterOrEqual(t, i, 0, res.Output)
	return strings.TrimSpace(res.Output[i:]), res
}

// A run whose processes all ended gives its cgroup back for the next run, which starts with
// none of the earlier run's processes in it.
func TestRunReusesAnEmptiedCgroup(t *testing.T) {
	t.Parallel()
	sb, parent := cgroupOnly(t)
	first, _ := ownCgroup(t, sb, "true")
	require.Len(t, runCgroupDirs(t, parent), 1, "the emptied cgroup is kept")
	second, res := ownCgroup(t, sb, `echo "self=$$"; cat /sys/fs/cgroup/unified$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.procs 2>/dev/null || cat /sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.procs`)
	require.Equal(t, first, second, "the second run reuses the first one's cgroup")
	require.Len(t, runCgroupDirs(t, parent), 1)
	// Its processes are the second run's own: the shell and what it runs, nothing left over.
	self := ""
	var pids []string
	for _, line := range strings.Split(res.Output, "\n") {
		if v, ok := strings.CutPrefix(line, "self="); ok {
			self = v
		} else if _, err := strconv.Atoi(line); err == nil {
			pids = append(pids, line)
		}
	}
	require.Contains(t, pids, self, res.Output)
	require.LessOrEqual(t, len(pids), 3, "only the run's shell and its children: %s", res.Output)
}

// A cgroup that still holds a process once the run ended (a setsid grandchild the group kill
// misses) is killed whole and removed, never given to another run.
func TestRunKillsAndRemovesACgroupWithALeakedProcess(t *testing.T) {
	t.Parallel()
	sb, parent := cgroupOnly(t)
	marker := "5678" + strconv.Itoa(os.Getpid())
	leaky, res := ownCgroup(t, sb, `setsid sleep `+marker+` </dev/null >/dev/null 2>&1 &`)
	require.Zero(t, res.ExitCode, res.Output)
	require.Eventually(t, func() bool { return !markerAlive(marker) }, 10*time.Second, 10*time.Millisecond,
		"the leaked grandchild was killed with its cgroup")
	require.Empty(t, runCgroupDirs(t, parent), "the leaky cgroup was removed, not kept")
	next, _ := ownCgroup(t, sb, "true")
	require.NotEqual(t, leaky, next, "the next run gets a fresh cgroup")
}

// The pool is bounded: of many runs at once, at most a few cgroups are kept once they ended, and
// ReleaseCgroups (a process that stops) and KillCgroups leave none behind.
func TestRunCgroupPoolIsBoundedAndEmptiedAtClose(t *testing.T) {
	t.Parallel()
	sb, parent := cgroupOnly(t)
	const runs = 12
	var writers []*io.PipeWriter
	var wg sync.WaitGroup
	results := make([]proc.Result, runs)
	for i := range runs {
		r, w := io.Pipe()
		writers = append(writers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each run holds its cgroup until its stdin closes.
			results[i] = proc.Run(t.Context(), proc.Spec{Shell: "cat >/dev/null", Stdin: r, Env: proc.Env(nil, nil), Timeout: time.Minute, Sandbox: sb})
		}()
	}
	require.Eventually(t, func() bool { return len(runCgroupDirs(t, parent)) == runs }, 30*time.Second, 10*time.Millisecond,
		"every run has a cgroup of its own")
	for _, w := range writers {
		_ = w.Close()
	}
	wg.Wait()
	for _, res := range results {
		require.NoError(t, res.Err)
		require.Zero(t, res.ExitCode, res.Output)
	}
	kept := len(runCgroupDirs(t, parent))
	require.Positive(t, kept, "emptied cgroups are kept for the next runs")
	require.Less(t, kept, runs, "but not all of them")

	proc.ReleaseCgroups(parent)
	require.Empty(t, runCgroupDirs(t, parent), "no cgroup is left after ReleaseCgroups")
	// Runs after it still work (a new pool).
	_, _ = ownCgroup(t, sb, "true")
	require.NoError(t, proc.KillCgroups(parent))
	_, err := os.Stat(parent)
	require.ErrorIs(t, err, os.ErrNotExist, "KillCgroups removes the pool's cgroups and the parent")
}

// A namespaced run (the init as PID 1) reuses its cgroup too: the PID namespace ends with its
// init, and nothing of it is left in the cgroup.
func TestSandboxedRunReusesItsCgroup(t *testing.T) {
	t.Parallel()
	s := namespaced(t)
	_, parent := cgroupOnly(t)
	sb := *s
	sb.CgroupParent = parent
	sb.Init = builtInit(t)
	dir := openDir(t)
	for range 3 {
		res := proc.Run(t.Context(), proc.Spec{Shell: "true", Dir: dir, Env: proc.Env(nil, nil), Timeout: time.Minute, Sandbox: &sb})
		require.NoError(t, res.Err)
		require.Zero(t, res.ExitCode, res.Output)
		require.Len(t, runCgroupDirs(t, parent), 1, "one cgroup, reused")
	}
	require.NoError(t, proc.KillCgroups(parent))
	_, err := os.Stat(filepath.Join(parent))
	require.ErrorIs(t, err, os.ErrNotExist)
}
