package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Issue 12 defect 2: right after a claim, before the work starts, the Registry is told the agent
// is RUNNING the task (an agent killed right after a claim used to stay IDLE and never stale).
func TestClaimIsHeartbeatBeforeTheWorkStarts(t *testing.T) {
	t.Parallel()
	told := tmpFile(t, "told")
	h := startWorker(t, nil)
	h.reg.mu.Lock()
	h.reg.onHeartbeat = func(req *registryv1.HeartbeatRequest) {
		if req.GetStatus() == commonv1.AgentStatus_AGENT_STATUS_RUNNING && req.GetCurrentTaskId() == "2" {
			_ = os.WriteFile(told, nil, 0o644)
		}
	}
	h.reg.mu.Unlock()
	// The command fails unless the Registry was told before it ran.
	h.sched.push(claimed(t, &commonv1.Task{Id: "2", Title: "check", Command: "test -f " + shq(told)}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Equal(t, int32(1), c.GetTries())
}

// Registry heartbeats keep coming, working (with the task) and idle (without).
func TestHeartbeatsComeIdleAndWorking(t *testing.T) {
	t.Parallel()
	release := tmpFile(t, "release")
	h := startWorker(t, func(c *Config) { c.HeartbeatInterval = 20 * time.Millisecond })
	count := func(st commonv1.AgentStatus, task string) int {
		n := 0
		for _, b := range h.reg.beats() {
			if b.GetStatus() == st && b.GetCurrentTaskId() == task {
				n++
			}
		}
		return n
	}
	eventually(t, 20*time.Second, func() bool { return count(commonv1.AgentStatus_AGENT_STATUS_IDLE, "") >= 3 }, "idle heartbeats")
	h.sched.push(claimed(t, &commonv1.Task{Id: "w", Title: "wait", Command: "while [ ! -f " + shq(release) + " ]; do sleep 0.01; done"}, ""))
	eventually(t, 20*time.Second, func() bool { return count(commonv1.AgentStatus_AGENT_STATUS_RUNNING, "w") >= 4 }, "working heartbeats")
	idle := count(commonv1.AgentStatus_AGENT_STATUS_IDLE, "")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	eventually(t, 20*time.Second, func() bool { return count(commonv1.AgentStatus_AGENT_STATUS_IDLE, "") >= idle+3 }, "idle heartbeats after the task")
}

var sessionPattern = regexp.MustCompile(`^s-[0-9a-f]{16}$`)

// Issue 12 defect 4: every process has its own session, sent in RegisterAgent, every Heartbeat
// and every ClaimTask.
func TestSessionIsSentEverywhere(t *testing.T) {
	t.Parallel()
	h := startWorker(t, func(c *Config) { c.HeartbeatInterval = 20 * time.Millisecond })
	other := startWorker(t, nil)
	session := h.w.SessionID()
	require.Regexp(t, sessionPattern, session)
	require.NotEqual(t, session, other.w.SessionID(), "a new session at every start")
	h.sched.push(claimed(t, &commonv1.Task{Id: "s", Title: "ok", Command: "true"}, ""))
	h.complete()
	eventually(t, 20*time.Second, func() bool { return len(h.reg.beats()) >= 4 }, "heartbeats")
	h.reg.mu.Lock()
	require.Len(t, h.reg.registers, 1)
	require.Equal(t, session, h.reg.registers[0].GetSessionId())
	h.reg.mu.Unlock()
	for _, b := range h.reg.beats() {
		require.Equal(t, session, b.GetSessionId())
	}
	h.sched.mu.Lock()
	defer h.sched.mu.Unlock()
	require.NotEmpty(t, h.sched.claims)
	for _, c := range h.sched.claims {
		require.Equal(t, session, c.GetSessionId())
	}
}

// A heartbeat answered Aborted (a newer process registered the same instance id): the worker
// cancels its work (its command is killed), reports nothing, releases nothing, claims nothing
// more, and Run ends with ErrSessionReplaced.
func TestReplacedSessionStopsTheWorker(t *testing.T) {
	t.Parallel()
	started := tmpFile(t, "started")
	h := startWorker(t, func(c *Config) { c.HeartbeatInterval = 20 * time.Millisecond })
	h.sched.push(claimed(t, &commonv1.Task{Id: "r", Title: "long", File: "r.txt",
		Command: "touch " + shq(started) + "; sleep 60"}, origin(t)))
	eventually(t, 20*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, "the task started")
	h.reg.mu.Lock()
	h.reg.replaced = h.w.SessionID()
	h.reg.mu.Unlock()
	err := h.wait()
	require.ErrorIs(t, err, ErrSessionReplaced)
	select {
	case c := <-h.sched.completed:
		t.Fatalf("a replaced session reported its work: %v", c)
	default:
	}
	h.reg.mu.Lock()
	require.Empty(t, h.reg.released, "the locks were the Registry's to release")
	h.reg.mu.Unlock()
	for _, b := range h.reg.beats() {
		require.NotEqual(t, commonv1.AgentStatus_AGENT_STATUS_COMPLETED, b.GetStatus(), "no final status over the newer process's record")
	}
	h.sched.mu.Lock()
	claims := len(h.sched.claims)
	h.sched.mu.Unlock()
	require.Equal(t, 1, claims, "nothing claimed after the replacement")
}

// Issue 12 defect 7: a worker stopped while its registration is unanswered (the Registry may
// have recorded it) still gives the record a final status: FAILED when it stops on an error.
func TestStopWhileRegisteringLeavesNoLiveRecord(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{hangRegister: true}
	w, err := New(Config{InstanceID: "agent-test", Scheduler: newFakeScheduler(), Registry: reg, DataDir: t.TempDir()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	eventually(t, 20*time.Second, func() bool {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		return len(reg.registers) == 1
	}, "registering")
	failure := errors.New("the agent's server failed")
	cancel(failure)
	select {
	case err := <-done:
		require.ErrorIs(t, err, failure)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	beats := reg.beats()
	require.NotEmpty(t, beats)
	require.Equal(t, commonv1.AgentStatus_AGENT_STATUS_FAILED, beats[len(beats)-1].GetStatus())
	require.Contains(t, beats[len(beats)-1].GetErrorContext().GetMessage(), "the agent's server failed")
}

// emptyDir (a scratch directory given back for the next task) removes every entry, however many
// getdents calls they take, descends into directories, removes a symbolic link and not what it
// names, and keeps the directory itself.
func TestEmptyDirRemovesEveryEntryAndKeepsTheDirectory(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	long := strings.Repeat("n", 200)
	for i := range 300 { // ≈ 65 KB of entries: several getdents of the 8 KiB buffer
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d", long, i)), []byte("x"), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "d", "e"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d", "e", "f"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "kept"), nil, 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "link")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".hidden"), nil, 0o644))

	require.NoError(t, emptyDir(dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
	require.FileExists(t, filepath.Join(outside, "kept"), "a link is removed, not what it names")
	require.ErrorIs(t, emptyDir(filepath.Join(dir, "missing")), os.ErrNotExist)
}
