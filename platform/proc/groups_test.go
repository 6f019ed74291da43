package proc_test

import (
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

// The start time a GroupDir records for a group is its leader's starttime in /proc/<pid>/stat,
// whether Run read it there or knew it from the boot clock's tick around the fork (issue 17):
// KillRecorded and the agent's watchdog compare it with /proc's to tell the group from a reused id.
func TestGroupDirRecordsTheLeadersStartTime(t *testing.T) {
	t.Parallel()
	records := filepath.Join(t.TempDir(), "groups")
	groups, err := proc.NewGroupDir(records)
	require.NoError(t, err)
	for range 40 {
		res := proc.Run(t.Context(), proc.Spec{Shell: `cat /proc/$$/stat`, Groups: groups})
		require.NoError(t, res.Err)
		require.Equal(t, 0, res.ExitCode, res.Output)
		stat := res.Output[strings.LastIndexByte(res.Output, ')')+1:]
		pid, _, _ := strings.Cut(res.Output, " ")
		want := strings.Fields(stat)[19]
		log, err := os.ReadFile(filepath.Join(records, proc.LogName))
		require.NoError(t, err)
		require.Contains(t, string(log), "+"+pid+" "+want+"\n", "the record of group %s", pid)
	}
}

// A GroupDir records the groups Run starts while they run, forgets them once killed, and
// KillAll kills the live ones (the caller stops): what they started goes too.
func TestGroupDirRecordsLiveGroupsAndKillsThem(t *testing.T) {
	t.Parallel()
	work, records := t.TempDir(), filepath.Join(t.TempDir(), "groups")
	groups, err := proc.NewGroupDir(records)
	require.NoError(t, err)
	done := make(chan proc.Result, 1)
	go func() {
		done <- proc.Run(t.Context(), proc.Spec{Shell: `sleep 60 & echo $! > child.pid; wait`, Dir: work, Groups: groups})
	}()
	// The shell makes child.pid before it writes the id into it: wait for the whole line.
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(filepath.Join(work, "child.pid"))
		return len(groups.Live()) == 1 && err == nil && strings.HasSuffix(string(b), "\n")
	}, 10*time.Second, 5*time.Millisecond)
	pgid := groups.Live()[0]
	record, err := os.ReadFile(filepath.Join(records, proc.LogName))
	require.NoError(t, err)
	require.Regexp(t, "^[+]"+strconv.Itoa(pgid)+" [0-9]+\n$", string(record), "the group and its leader's start time")
	require.Equal(t, 1, groups.KillAll())
	var res proc.Result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after KillAll")
	}
	require.Equal(t, -1, res.ExitCode)
	requireGone(t, readPid(t, work))
	require.Empty(t, groups.Live())
	record, err = os.ReadFile(filepath.Join(records, proc.LogName))
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(record), "\n-"+strconv.Itoa(pgid)+"\n"), "an ended group is recorded as ended: %q", record)
	killed, err := proc.KillRecorded(records)
	require.NoError(t, err)
	require.Empty(t, killed, "nothing recorded is live")
}

// The records are lines appended to one file (no file created per group, issue 17); past a size
// the file is rewritten with the live groups alone, which KillRecorded still finds.
func TestGroupDirLogIsCompacted(t *testing.T) {
	t.Parallel()
	records := filepath.Join(t.TempDir(), "groups")
	groups, err := proc.NewGroupDir(records)
	require.NoError(t, err)
	leader := exec.Command("sleep", "60")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, leader.Start())
	t.Cleanup(func() { _ = leader.Process.Kill(); _ = leader.Wait() })
	groups.Started(leader.Process.Pid)
	for i := range 30000 { // ids no process has (above the kernel's pid_max)
		groups.Started(1<<23 + i)
		groups.Ended(1<<23 + i)
	}
	st, err := os.Stat(filepath.Join(records, proc.LogName))
	require.NoError(t, err)
	require.Less(t, st.Size(), int64(256<<10), "the log was compacted")
	require.Equal(t, []int{leader.Process.Pid}, groups.Live())
	require.NoError(t, groups.Close())
	killed, err := proc.KillRecorded(records)
	require.NoError(t, err)
	require.Equal(t, []int{leader.Process.Pid}, killed, "the live group's record survived the compaction")
	_, _ = leader.Process.Wait()
	entries, err := os.ReadDir(records)
	require.NoError(t, err)
	require.Empty(t, entries, "the records are gone")
}

// KillRecorded kills what a dead caller's groups left running (a leader that died and the
// children it left in its group), and leaves alone a process that reused a recorded id.
func TestKillRecordedKillsWhatADeadCallerLeft(t *testing.T) {
	t.Parallel()
	work, records := t.TempDir(), filepath.Join(t.TempDir(), "groups")
	groups, err := proc.NewGroupDir(records)
	require.NoError(t, err)
	// A group whose leader exits and leaves a child writing to a file: as after a SIGKILL of
	// the caller (the leader died with it; its children did not).
	leader := exec.Command("sh", "-c", `(while :; do echo x >> out; sleep 0.05; done) & echo $! > child.pid`)
	leader.Dir = work
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, leader.Start())
	groups.Started(leader.Process.Pid)
	require.NoError(t, leader.Wait())
	child := readPid(t, work)
	require.NoError(t, syscall.Kill(child, 0), "the child outlives its leader")

	// A process whose id a record names with another start time: not ours.
	other := exec.Command("sleep", "60")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	require.NoError(t, os.WriteFile(filepath.Join(records, strconv.Itoa(other.Process.Pid)), []byte("1"), 0o644))

	killed, err := proc.KillRecorded(records)
	require.NoError(t, err)
	require.Equal(t, []int{leader.Process.Pid}, killed)
	requireGone(t, child)
	require.NoError(t, syscall.Kill(other.Process.Pid, 0), "a reused id is left alone")
	entries, err := os.ReadDir(records)
	require.NoError(t, err)
	require.Empty(t, entries, "the records are gone")

	killed, err = proc.KillRecorded(filepath.Join(t.TempDir(), "none"))
	require.NoError(t, err)
	require.Empty(t, killed)
}
