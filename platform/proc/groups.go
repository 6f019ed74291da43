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

// GroupDir is a Recorder that keeps one file per live process group in a directory: a process
// killed with SIGKILL cannot clean up after itself, but the next one reads the directory and
// kills what it left (KillRecorded). Each file is named after the group id and holds the
// leader's start time (Linux: the starttime of /proc/<pid>/stat), which tells a group that still
// runs from an unrelated process that reused the id. It is safe for concurrent use.
type GroupDir struct {
	dir string

	mu   sync.Mutex
	live map[int]bool
}

// NewGroupDir records groups in dir, created if missing.
func NewGroupDir(dir string) (*GroupDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("proc: group records: %w", err)
	}
	return &GroupDir{dir: dir, live: map[int]bool{}}, nil
}

// Dir is the directory of the records.
func (g *GroupDir) Dir() string { return g.dir }

// Started records the group (best effort: a record that cannot be written is a group the next
// process will not find).
func (g *GroupDir) Started(pgid int) {
	// The record first: a group Live answers has its record.
	_ = os.WriteFile(filepath.Join(g.dir, strconv.Itoa(pgid)), []byte(startTime(pgid)), 0o644)
	g.mu.Lock()
	g.live[pgid] = true
	g.mu.Unlock()
}

// Ended forgets the group.
func (g *GroupDir) Ended(pgid int) {
	g.mu.Lock()
	delete(g.live, pgid)
	g.mu.Unlock()
	_ = os.Remove(filepath.Join(g.dir, strconv.Itoa(pgid)))
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
	for _, e := range entries {
		pgid, err := strconv.Atoi(e.Name())
		if err != nil || pgid <= 1 {
			continue // not a record
		}
		path := filepath.Join(dir, e.Name())
		recorded, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if now := startTime(pgid); now != "" && strings.TrimSpace(string(recorded)) != "" && now != strings.TrimSpace(string(recorded)) {
			_ = os.Remove(path) // the id was reused: not ours
			continue
		}
		switch err := syscall.Kill(-pgid, syscall.SIGKILL); {
		case err == nil:
			killed = append(killed, pgid)
		case errors.Is(err, syscall.ESRCH):
			// Nothing of the group is left.
		default:
			errs = append(errs, fmt.Errorf("proc: kill group %d: %w", pgid, err))
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return killed, errors.Join(errs...)
}

// startTime answers the start time of process pid as /proc says (clock ticks since boot), or ""
// when it cannot tell (no such process, or no /proc).
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
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
