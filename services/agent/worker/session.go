package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/converge-dev/converge/platform/proc"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// A process's session in the data dir. Processes are killed with SIGKILL (kill -9, the OOM
// killer, a crash): what they started and the worktrees they used outlive them. Each process
// keeps a record of both under <data>/sessions/<session id>/:
//
//	lock         locked (flock) while the process lives: the kernel unlocks it when it dies
//	groups/      the executor process groups started and ended (proc.GroupDir)
//	worktrees/   one file per worktree in use, by directory name
//	scratch/     the scratch directories of tasks without a repository (session.takeScratch)
//	watchdog     the pid of the session's watchdog
//	cgroup       the session's cgroup (v2) directory, when the host lets it make one: each
//	             executor process runs in a cgroup of its own under it (executor.WithCgroupParent),
//	             killed whole when the process ends, so what a task started with setsid goes too
//
// The watchdog is a small shell process outside the agent's process group that reads a pipe only
// the agent holds open: when the agent dies, even by SIGKILL, the kernel closes the pipe and the
// watchdog kills every process group recorded in groups/ and every process of the session's run
// cgroups at once (each leader also gets SIGKILL from the kernel, Pdeathsig, but what it started
// would live on; in the namespaces sandbox the kernel kills the whole PID namespace with it). Without it a killed agent's
// task keeps running while the Scheduler requeues it, and the task runs twice. The records stay
// for the next agent on the data dir, which kills what is left (if the watchdog was killed too).
//
// An agent starting on the data dir (cleanUpDataDir) takes every other session's lock it can: those
// sessions are dead, so it kills the process groups they recorded and deletes their records
// (their scratch directories with them); then it sweeps every worktree and scratch directory of
// <data>/scratch no live session holds, keeping those with unpushed commits (workspace.Cache.Sweep). A stopping agent kills its live groups and removes
// its record (close).

// sessionDir is where the sessions of a data dir are recorded.
func sessionDir(dataDir string) string { return filepath.Join(dataDir, "sessions") }

// session is this process's record.
type session struct {
	dir    string
	lock   *os.File
	groups *proc.GroupDir
	// cgroup is the parent of the session's run cgroups ("": the host allows none, cgroupErr
	// says why).
	cgroup    string
	cgroupErr error
	// watchdog kills the recorded groups once feed is closed (the agent stops or dies).
	watchdog *exec.Cmd
	feed     *os.File

	mu     sync.Mutex
	closed bool

	// scratchMu guards the scratch directories: free ones (empty) and how many were made.
	scratchMu   sync.Mutex
	scratchFree []string
	scratchMade int
}

// openSession records session id in dataDir and locks it.
func openSession(dataDir, id string) (*session, error) {
	dir := filepath.Join(sessionDir(dataDir), id)
	for _, sub := range []string{"worktrees", "scratch"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("worker: session record: %w", err)
		}
	}
	lock, locked, err := tryLock(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, fmt.Errorf("worker: session record: %w", err)
	}
	if !locked {
		return nil, fmt.Errorf("worker: session %s is already in use in %s", id, dataDir)
	}
	groups, err := proc.NewGroupDir(filepath.Join(dir, "groups"))
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	s := &session{dir: dir, lock: lock, groups: groups}
	if s.cgroup, s.cgroupErr = proc.CgroupDir("converge-agent-" + sanitize(id)); s.cgroupErr == nil {
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(s.cgroup), 0o644); err != nil {
			_ = proc.KillCgroups(s.cgroup)
			s.cgroup, s.cgroupErr = "", err
		}
	}
	if err := s.startWatchdog(); err != nil {
		_ = lock.Close()
		return nil, fmt.Errorf("worker: session watchdog: %w", err)
	}
	return s, nil
}

// watchdogScript waits for end of file on its standard input (the agent is gone), then kills
// every process group the records in the directory $1 (proc.GroupDir's log: "+<pgid> <start>"
// when started, "-<pgid>" when ended) leave live whose leader, if still there, started when its
// record says (else the id was reused by an unrelated process), and every process of the run
// cgroups under $2 (when given).
const watchdogScript = `cat >/dev/null
if [ -f "$1/log" ]; then
  awk '$1 ~ /^[+][0-9]+$/ { s[substr($1, 2)] = $2 } $1 ~ /^-[0-9]+$/ { delete s[substr($1, 2)] } END { for (p in s) print p, s[p] }' "$1/log" |
  while read -r pg want; do
    [ "$pg" -gt 1 ] 2>/dev/null || continue
    if [ -n "$want" ] && [ -r "/proc/$pg/stat" ]; then
      now=$(sed 's/.*) //' "/proc/$pg/stat" | cut -d' ' -f20)
      [ -z "$now" ] || [ "$now" = "$want" ] || continue
    fi
    kill -9 "-$pg" 2>/dev/null
  done
fi
if [ -n "$2" ]; then
  for c in "$2"/run-*; do
    [ -d "$c" ] && echo 1 > "$c/cgroup.kill" 2>/dev/null
  done
fi
exit 0`

// startWatchdog starts the session's watchdog (see the top of this file).
func (s *session) startWatchdog() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command("sh", "-c", watchdogScript, "converge-agent-watchdog", s.groups.Dir(), s.cgroup)
	cmd.Stdin = r
	cmd.Env = proc.Env(nil, nil)
	// A group of its own: a Ctrl-C or a kill of the agent's group must not take it first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return err
	}
	_ = os.WriteFile(filepath.Join(s.dir, "watchdog"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	s.watchdog, s.feed = cmd, w
	return nil
}

// tryLock opens (creating) and locks path without waiting; locked is false when another open
// file holds the lock (a live process's session).
func tryLock(path string) (f *os.File, locked bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}

// hold records a worktree directory name as in use.
func (s *session) hold(name string) {
	_ = os.WriteFile(filepath.Join(s.dir, "worktrees", name), nil, 0o644)
}

// release forgets a worktree directory name.
func (s *session) release(name string) {
	_ = os.Remove(filepath.Join(s.dir, "worktrees", name))
}

// takeScratch answers an empty scratch directory for one task: one emptied by a task before
// (giveScratch), or a new one. They live in the session's own directory, which goes with the
// session (close, or the next process's cleanUpDataDir once this one died): no record per task
// says it is in use, and it is made once, not per task (a directory's creation and removal cost
// ~1 ms of wall time on an ext4 mounted with discard, issue 17). Each is a task's alone until
// given back, by which time every process of the task was killed.
func (s *session) takeScratch() (*workspace.Worktree, error) {
	s.scratchMu.Lock()
	if n := len(s.scratchFree); n > 0 {
		dir := s.scratchFree[n-1]
		s.scratchFree = s.scratchFree[:n-1]
		s.scratchMu.Unlock()
		return &workspace.Worktree{Dir: dir, Name: filepath.Base(dir), Empty: true}, nil
	}
	s.scratchMade++
	name := strconv.Itoa(s.scratchMade)
	s.scratchMu.Unlock()
	dir := filepath.Join(s.dir, "scratch", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("workspace: scratch %s: %w", dir, err)
	}
	return &workspace.Worktree{Dir: dir, Name: name, Empty: true}, nil
}

// giveScratch empties a scratch directory whose task is over and keeps it for the next one; one
// that cannot be emptied is removed instead (and, failing that, left for the session's end).
func (s *session) giveScratch(wt *workspace.Worktree) error {
	if err := emptyDir(wt.Dir); err != nil {
		if rerr := os.RemoveAll(wt.Dir); rerr != nil {
			return errors.Join(err, rerr)
		}
		return nil
	}
	s.scratchMu.Lock()
	s.scratchFree = append(s.scratchFree, wt.Dir)
	s.scratchMu.Unlock()
	return nil
}

// emptyDir removes everything in dir, keeping dir.
func emptyDir(dir string) error {
	names, err := dirNames(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// dirNames answers the names in dir, unsorted: one open, getdents to the end, one close, into a
// pooled buffer. os.ReadDir's own file, buffer, entries and sort were half of emptying a no-op
// task's scratch directory, 6 % of the agent's CPU per task (issue 17).
func dirNames(dir string) ([]string, error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer func() { _ = syscall.Close(fd) }()
	buf := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(buf)
	var names []string
	for {
		n, err := syscall.ReadDirent(fd, *buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = syscall.ParseDirent((*buf)[:n], -1, names)
	}
}

// direntBufs are dirNames' buffers.
var direntBufs = sync.Pool{New: func() any {
	b := make([]byte, 8<<10)
	return &b
}}

// close kills the session's live process groups and removes its record.
func (s *session) close() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0
	}
	s.closed = true
	n := s.groups.KillAll()
	_ = s.groups.Close()
	_ = proc.KillCgroups(s.cgroup)
	_ = os.RemoveAll(s.dir)
	if s.feed != nil {
		_ = s.feed.Close() // the watchdog finds nothing left and exits
		_ = s.watchdog.Wait()
	}
	_ = s.lock.Close()
	return n
}

// recovered is what cleanUpDataDir did.
type recovered struct {
	deadSessions []string
	killed       []int
	swept        []string
}

// cleanUpDataDir cleans up after the dead sessions of the data dir: see the top of this file.
func (w *Worker) cleanUpDataDir(ctx context.Context) (recovered, error) {
	var out recovered
	var errs []error
	root := sessionDir(w.cache.Root())
	entries, err := os.ReadDir(root)
	if err != nil {
		return out, fmt.Errorf("worker: sessions: %w", err)
	}
	held := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == w.cfg.SessionID {
			continue
		}
		dir := filepath.Join(root, e.Name())
		lock, locked, err := tryLock(filepath.Join(dir, "lock"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !locked {
			// A live process (an older one of this instance that was replaced but still runs,
			// or another agent given this data dir): its worktrees are its own.
			names, _ := os.ReadDir(filepath.Join(dir, "worktrees"))
			for _, n := range names {
				held[n.Name()] = true
			}
			continue
		}
		killed, err := proc.KillRecorded(filepath.Join(dir, "groups"))
		out.killed = append(out.killed, killed...)
		if cg, rerr := os.ReadFile(filepath.Join(dir, "cgroup")); rerr == nil && strings.HasPrefix(string(cg), "/sys/fs/cgroup/") {
			// What its tasks left in their cgroups (setsid children of a killed agent whose
			// watchdog was killed too).
			err = errors.Join(err, proc.KillCgroups(filepath.Clean(string(cg))))
		}
		if err != nil {
			errs = append(errs, err)
		}
		out.deadSessions = append(out.deadSessions, e.Name())
		if err == nil {
			_ = os.RemoveAll(dir)
		}
		_ = lock.Close()
	}
	names, _ := os.ReadDir(filepath.Join(w.sess.dir, "worktrees"))
	for _, n := range names {
		held[n.Name()] = true
	}
	swept, err := w.cache.Sweep(ctx, func(name string) bool { return held[name] })
	out.swept = swept
	if err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// holdWorktree records that the worktree asked for by name is in use by this process.
func (w *Worker) holdWorktree(name string) { w.sess.hold(workspace.WorktreeName(name)) }

// removeWorktree removes a worktree the work is done with (kept when it has unpushed commits)
// and forgets it; a scratch directory is emptied for the next task (giveScratch).
func (w *Worker) removeWorktree(ctx context.Context, wt *workspace.Worktree) {
	if !wt.HasRepository() {
		if err := w.sess.giveScratch(wt); err != nil {
			w.log.Warn("scratch directory not emptied", "dir", wt.Dir, "err", err)
		}
		return
	}
	if err := wt.Remove(context.WithoutCancel(ctx)); err != nil {
		w.log.Warn("worktree kept", "dir", wt.Dir, "err", err)
		return
	}
	w.sess.release(wt.Name)
}
