package proc_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/proc"
)

const nobody = 65534

// sandbox answers the sandbox this host allows, and logs what it does not isolate.
func sandbox(t *testing.T) *proc.Sandbox {
	t.Helper()
	s, rep := proc.DetectSandbox(t.Context(), nobody, nobody, "converge-proc-test")
	t.Logf("sandbox: %s", rep)
	return s
}

// markerAlive reports whether a process whose command line holds marker runs on the host.
func markerAlive(marker string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if i := bytes.LastIndexByte(st, ')'); i > 0 && bytes.HasPrefix(bytes.TrimSpace(st[i+1:]), []byte("Z")) {
				continue // a zombie is dead
			}
			return true
		}
	}
	return false
}

// In the sandbox the command sees its own processes only, not the caller's /proc/<pid>/environ,
// runs as the unprivileged user on the host, and gets no capability: started by the small init
// (converge-sandbox-init) and by the running binary re-executed as the init.
func TestSandboxHidesTheCallersProcessesAndRunsAsAnotherUser(t *testing.T) {
	t.Parallel()
	s := sandbox(t)
	if os.Geteuid() != 0 || !s.Namespaces {
		t.Fatalf("this test needs a root caller and namespaces (the fallback is tested apart): %+v", s)
	}
	small := *s
	small.Init = builtInit(t)
	for name, sb := range map[string]*proc.Sandbox{"small init": &small, "server binary": s} {
		t.Run(name, func(t *testing.T) { hidesTheCaller(t, sb) })
	}
}

func hidesTheCaller(t *testing.T, s *proc.Sandbox) {
	dir := openDir(t)
	self := strconv.Itoa(os.Getpid())
	res := proc.Run(t.Context(), proc.Spec{
		Shell: `echo "ppid=$PPID"; ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/` + self + `/environ && echo READ; touch made; grep CapEff /proc/self/status`,
		Dir:   dir, Env: proc.Env(nil, nil), Timeout: 30 * time.Second, Sandbox: s,
	})
	require.NoError(t, res.Err)
	require.Contains(t, res.Output, "ppid=0", "the command is PID 1's child... of nothing outside: %s", res.Output)
	require.NotContains(t, res.Output, "READ", "the caller's environ is unreachable: %s", res.Output)
	require.Contains(t, res.Output, "CapEff:\t0000000000000000", res.Output)
	fi, err := os.Stat(filepath.Join(dir, "made"))
	require.NoError(t, err)
	require.Equal(t, uint32(nobody), fi.Sys().(*syscall.Stat_t).Uid, "files are made as the sandbox user")
	lines := strings.Fields(res.Output)
	n, err := strconv.Atoi(lines[1])
	require.NoError(t, err)
	require.LessOrEqual(t, n, 4, "only the sandbox's own processes are visible: %s", res.Output)
}

// A setsid child of a command is dead once its timeout killed it: the PID namespace and the
// cgroup hold it, whichever the host has; without namespaces, the cgroup alone.
func TestSandboxKillsASetsidChildAtTheTimeout(t *testing.T) {
	t.Parallel()
	s := sandbox(t)
	variants := map[string]*proc.Sandbox{"detected": s}
	if s.CgroupParent != "" {
		variants["cgroup only"] = &proc.Sandbox{UID: -1, GID: -1, CgroupParent: s.CgroupParent}
	}
	if s.Namespaces {
		variants["namespaces only"] = &proc.Sandbox{UID: s.UID, GID: s.GID, Namespaces: true}
	}
	for name, sb := range variants {
		marker := "1234" + strconv.Itoa(os.Getpid()) + strconv.Itoa(len(name))
		dir := openDir(t)
		res := proc.Run(t.Context(), proc.Spec{
			Shell: `setsid sleep ` + marker + ` </dev/null >/dev/null 2>&1 & touch started; sleep 600`,
			Dir:   dir, Env: proc.Env(nil, nil), Timeout: 2 * time.Second, Sandbox: sb,
		})
		require.NoError(t, res.Err, name)
		require.True(t, res.TimedOut, name)
		require.FileExists(t, filepath.Join(dir, "started"), name)
		require.Eventually(t, func() bool { return !markerAlive(marker) }, 10*time.Second, 10*time.Millisecond,
			"%s: the setsid child is dead after the timeout", name)
	}
	// Without any of them the child survives: what the sandbox is for.
	marker := "4321" + strconv.Itoa(os.Getpid())
	res := proc.Run(t.Context(), proc.Spec{Shell: `setsid sleep ` + marker + ` </dev/null >/dev/null 2>&1 & sleep 600`,
		Env: proc.Env(nil, nil), Timeout: time.Second})
	require.True(t, res.TimedOut)
	require.True(t, markerAlive(marker), "unsandboxed, a setsid child outlives the timeout")
	killMarker(marker)
}

// killMarker kills the processes whose command line holds marker (the survivor of the
// unsandboxed run).
func killMarker(marker string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(b, []byte(marker)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// openDir is a directory the sandbox user may enter and write (t.TempDir's parent is 0700).
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "converge-sandbox-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o777))
	return dir
}
