package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Recorder is told about the process groups Run starts (Spec.Groups), so that they can be killed
// by someone else than Run: when the caller stops (GroupDir.KillAll), or after it died without
// cleaning up (KillRecorded, by the next process).
type Recorder interface {
	// Started is called once a group's leader started, with its process group id (its pid).
	Started(pgid int)
	// Ended is called once Run killed the whole group.
	Ended(pgid int)
}

// GroupDir is a Recorder that keeps the live process groups on disk, in a directory: a process
// killed with SIGKILL cannot clean up after itself, but the next one reads the directory and
// kills what it left (KillRecorded). Each group is recorded with its id and the leader's start
// time (Linux: the starttime of /proc/<pid>/stat), which tells a group that still runs from an
// unrelated process that reused the id. The records are lines appended to one file, LogName:
// "+<pgid> <start time>" when a group starts, "-<pgid>" once it ended (a write to an open file,
// where a file per group cost a file's creation and removal per process: issue 17); the live
// groups are those started and not ended. A file named after a group id holding its start time
// (the records of earlier versions) is read too. It is safe for concurrent use.
type GroupDir struct {
	dir string

	mu   sync.Mutex
	live map[int]string // pgid → the leader's start time
	log  *os.File       // nil: it could not be opened (records are best effort)
	size int64          // bytes written to log
}

// LogName is the file of a GroupDir's records in its directory.
const LogName = "log"

// compactAt is the size of the log beyond which it is rewritten with the live groups alone.
const compactAt = 256 << 10

// NewGroupDir records groups in dir, created if missing.
func NewGroupDir(dir string) (*GroupDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("proc: group records: %w", err)
	}
	g := &GroupDir{dir: dir, live: map[int]string{}}
	f, err := os.OpenFile(filepath.Join(dir, LogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("proc: group records: %w", err)
	}
	if st, err := f.Stat(); err == nil {
		g.size = st.Size()
	}
	g.log = f
	return g, nil
}

// Dir is the directory of the records.
func (g *GroupDir) Dir() string { return g.dir }

// Started records the group (best effort: a record that cannot be written is a group the next
// process will not find).
func (g *GroupDir) Started(pgid int) { g.startedAt(pgid, startTime(pgid)) }

// startedAt records the group whose leader's start time Run knows already (see bootTicks).
func (g *GroupDir) startedAt(pgid int, start string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// The record first: a group Live answers has its record.
	g.append("+" + strconv.Itoa(pgid) + " " + start + "\n")
	g.live[pgid] = start
}

// Ended forgets the group.
func (g *GroupDir) Ended(pgid int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.live, pgid)
	g.append("-" + strconv.Itoa(pgid) + "\n")
	if g.size >= compactAt {
		g.compact()
	}
}

// append writes one record line (g.mu held).
func (g *GroupDir) append(line string) {
	if g.log == nil {
		return
	}
	n, _ := g.log.WriteString(line)
	g.size += int64(n)
}

// compact replaces the log with the live groups' records (g.mu held): written aside, then
// renamed over it, so that a crash leaves one or the other whole.
func (g *GroupDir) compact() {
	path := filepath.Join(g.dir, LogName)
	var b strings.Builder
	for pgid, start := range g.live {
		fmt.Fprintf(&b, "+%d %s\n", pgid, start)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		_ = os.Remove(tmp)
		return
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return
	}
	_ = g.log.Close()
	g.log, g.size = f, int64(b.Len())
}

// Close closes the records' file (the records stay: KillRecorded reads them).
func (g *GroupDir) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.log == nil {
		return nil
	}
	err := g.log.Close()
	g.log = nil
	return err
}

// Live answers the groups recorded as running.
func (g *GroupDir) Live() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]int, 0, len(g.live))
	for pgid := range g.live {
		out = append(out, pgid)
	}
	return out
}

// KillAll sends SIGKILL to every live group (the caller is stopping: nothing it started may
// outlive it) and answers how many there were. Run still reports each as killed and ends it.
func (g *GroupDir) KillAll() int {
	pgids := g.Live()
	for _, pgid := range pgids {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	return len(pgids)
}

// KillRecorded kills the process groups recorded in dir by a GroupDir whose process is gone
// (the caller must know it is: a live process's groups would be killed too), removes the records
// and answers the groups it killed. A group whose leader still runs but started at another time
// than recorded is an unrelated process that reused the id: it is left alone. A dir that does not
// exist records nothing.
func KillRecorded(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("proc: group records: %w", err)
	}
	var killed []int
	var errs []error
	// kill kills one recorded group; false when it failed (its record must stay).
	kill := func(pgid int, recorded string) bool {
		if now := startTime(pgid); now != "" && recorded != "" && now != recorded {
			return true // the id was reused: not ours
		}
		switch err := syscall.Kill(-pgid, syscall.SIGKILL); {
		case err == nil:
			killed = append(killed, pgid)
		case errors.Is(err, syscall.ESRCH):
			// Nothing of the group is left.
		default:
			errs = append(errs, fmt.Errorf("proc: kill group %d: %w", pgid, err))
			return false
		}
		return true
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.Name() == LogName {
			b, err := os.ReadFile(path)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			ok := true
			for pgid, recorded := range liveInLog(string(b)) {
				ok = kill(pgid, recorded) && ok
			}
			if ok {
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
			continue
		}
		pgid, err := strconv.Atoi(e.Name())
		if err != nil || pgid <= 1 {
			continue // not a record
		}
		recorded, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !kill(pgid, strings.TrimSpace(string(recorded))) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// liveInLog answers the groups a GroupDir's log records as started and not ended, with their
// leaders' start times. A line cut short (the log is appended to by whole lines; a torn one can
// only be the last) or not a record is skipped.
func liveInLog(log string) map[int]string {
	live := map[int]string{}
	for line := range strings.Lines(log) {
		if !strings.HasSuffix(line, "\n") || len(line) < 3 {
			continue
		}
		fields := strings.Fields(line[1:])
		if len(fields) == 0 {
			continue
		}
		pgid, err := strconv.Atoi(fields[0])
		if err != nil || pgid <= 1 {
			continue
		}
		switch line[0] {
		case '+':
			start := ""
			if len(fields) > 1 {
				start = fields[1]
			}
			live[pgid] = start
		case '-':
			delete(live, pgid)
		}
	}
	return live
}

// startTime answers the start time of process pid as /proc says (clock ticks since boot), or ""
// when it cannot tell (no such process, or no /proc).
func startTime(pid int) string {
	// One open, read and close (os.ReadFile also stats the file and reads to EOF: this runs for
	// every process a task starts, issue 17); a line longer than the buffer is read whole.
	var buf [1024]byte
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	n, err := syscall.Read(fd, buf[:])
	_ = syscall.Close(fd)
	if err != nil || n <= 0 {
		return ""
	}
	b := buf[:n]
	if n == len(buf) {
		if b, err = os.ReadFile(path); err != nil {
			return ""
		}
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields count from the
	// last ')'. starttime is field 22, the 20th after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}
