package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A run's cgroup (Sandbox.CgroupParent) is taken from a small pool of emptied run cgroups kept
// per parent, and given back when the run ends, rather than made (mkdir) and removed (cgroup.kill,
// rmdir) per run: 12 % of the agent's CPU per no-op task (issue 17). A cgroup goes back to the pool
// only when none of its processes is left (cgroup.events says "populated 0": the leader was
// reaped, and its group was killed); one that still holds a process (a setsid grandchild the
// group kill missed) is killed whole (cgroup.kill) and removed as before, never reused. The pool
// holds at most cgroupPoolMax cgroups per parent; KillCgroups and ReleaseCgroups empty it.
//
// What a run's cgroup carries from an earlier run: no process (checked), no limit (runs write
// none: a limit a run would write is written per run, on a fresh or a reused cgroup alike), and
// the kernel's cumulative statistics (cpu.stat's usage_usec, the pressure files; memory.peak
// and memory.events where the memory controller is enabled, which converge does not do): none
// can be reset but memory.peak (per open file, kernel 6.12+). converge reads none of them; a
// reader of a run's figures must take the difference between the start and the end of the run.

// cgroupPoolMax bounds the emptied run cgroups kept per parent (about the runs at once).
const cgroupPoolMax = 8

// cgroupPool is the emptied run cgroups of one parent, kept for the next runs.
type cgroupPool struct {
	parent string

	mu     sync.Mutex
	free   []*runCgroup
	closed bool // taken out of use (KillCgroups, ReleaseCgroups): what comes back is removed
}

// cgroupPools holds the pool of each parent in use, by cleaned path.
var cgroupPools = struct {
	mu sync.Mutex
	m  map[string]*cgroupPool
}{m: map[string]*cgroupPool{}}

// poolOf answers the pool of parent, made if missing.
func poolOf(parent string) *cgroupPool {
	parent = filepath.Clean(parent)
	cgroupPools.mu.Lock()
	defer cgroupPools.mu.Unlock()
	p := cgroupPools.m[parent]
	if p == nil {
		p = &cgroupPool{parent: parent}
		cgroupPools.m[parent] = p
	}
	return p
}

// ReleaseCgroups removes the emptied run cgroups this process keeps under parent for reuse (a
// process that stops calls it for each CgroupParent it used, unless it calls KillCgroups); a run
// still going removes its own when it ends. Other processes' cgroups under parent are left alone.
func ReleaseCgroups(parent string) {
	if parent == "" {
		return
	}
	cgroupPools.mu.Lock()
	p := cgroupPools.m[filepath.Clean(parent)]
	delete(cgroupPools.m, filepath.Clean(parent))
	cgroupPools.mu.Unlock()
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	free := p.free
	p.free = nil
	p.mu.Unlock()
	for _, c := range free {
		c.kill()
	}
}

var cgroupSeq atomic.Int64

// get answers a cgroup for a run: an emptied one of the pool, or a new one.
func (p *cgroupPool) get() (*runCgroup, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		c := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	for tries := 0; ; tries++ {
		dir := filepath.Join(p.parent, "run-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(cgroupSeq.Add(1), 10))
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) && tries < 100 {
			continue // left by a dead process that had this pid (its pool's cgroups are empty)
		}
		if err != nil {
			return nil, fmt.Errorf("proc: cgroup: %w", err)
		}
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			_ = os.Remove(dir)
			return nil, fmt.Errorf("proc: cgroup: %w", err)
		}
		return &runCgroup{dir: dir, fd: fd, pool: p}, nil
	}
}

// runCgroup is one run's cgroup.
type runCgroup struct {
	dir  string
	fd   int // the directory, open (-1 once closed): CLONE_INTO_CGROUP's and openat's
	pool *cgroupPool
}

// release ends a run's use of its cgroup: back to the pool when no process is left in it and the
// pool has room, otherwise killed and removed.
func (c *runCgroup) release() {
	if c == nil {
		return
	}
	if p := c.pool; p != nil && c.empty() {
		p.mu.Lock()
		if !p.closed && len(p.free) < cgroupPoolMax {
			p.free = append(p.free, c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	c.kill()
}

// empty reports whether the cgroup holds no process (cgroup.events: "populated 0"); false when
// it cannot tell.
func (c *runCgroup) empty() bool {
	fd, err := syscall.Openat(c.fd, "cgroup.events", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	var buf [128]byte
	n, err := syscall.Read(fd, buf[:])
	_ = syscall.Close(fd)
	if err != nil || n <= 0 {
		return false
	}
	for line := range bytes.Lines(buf[:n]) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return bytes.Equal(bytes.TrimSpace(v), []byte("0"))
		}
	}
	return false
}

// kill kills every process of the cgroup and removes it (waiting, bounded, for them to go).
func (c *runCgroup) kill() {
	if c == nil {
		return
	}
	if c.fd >= 0 {
		_ = syscall.Close(c.fd)
		c.fd = -1
	}
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		// Kernels before 5.14: kill what is listed.
		if b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// CgroupDir makes name in the caller's cgroup (v2) and answers its directory, for
// Sandbox.CgroupParent; an error says why the host allows none (no cgroup v2, not writable).
func CgroupDir(name string) (string, error) { return cgroupDir(name) }

// KillCgroups kills every process of the run cgroups under parent (a CgroupParent whose runs
// were not ended by their Run: its process died, or it stops) and removes them and parent; the
// pool of parent's emptied cgroups in this process goes too (ReleaseCgroups).
func KillCgroups(parent string) error {
	if parent == "" {
		return nil
	}
	ReleaseCgroups(parent)
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("proc: cgroups: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "run-") {
			(&runCgroup{dir: filepath.Join(parent, e.Name()), fd: -1}).kill()
		}
	}
	if err := os.Remove(parent); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("proc: cgroups: %w", err)
	}
	return nil
}

// cgroupDir finds the cgroup v2 hierarchy and the caller's cgroup in it, and makes name there.
func cgroupDir(name string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	rel := ""
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			rel = p
		}
	}
	if rel == "" {
		return "", errors.New("no cgroup v2 hierarchy")
	}
	for _, mnt := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if _, err := os.Stat(filepath.Join(mnt, "cgroup.controllers")); err != nil {
			continue
		}
		dir := filepath.Join(mnt, rel, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("cgroup v2 at %s is not writable: %w", mnt, err)
		}
		return dir, nil
	}
	return "", errors.New("no cgroup v2 mount")
}
