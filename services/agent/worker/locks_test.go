package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// A task locks all of its files in one AcquireLocks call and releases them in one ReleaseLocks
// call; against a Registry without them it locks and releases file by file.
func TestTaskLocksItsFilesInOneCall(t *testing.T) {
	t.Parallel()
	task := func(id string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "three files", File: "a.txt", Command: "true",
			Files: []*commonv1.FileImpact{{Path: "a.txt"}, {Path: "src/b.go"}, {Path: "src/c.go"}, {Path: "docs/*.md"}}}
	}
	want := []string{"ex_1/a.txt", "ex_1/src/b.go", "ex_1/src/c.go"}
	t.Run("batch", func(t *testing.T) {
		t.Parallel()
		h := startWorker(t, nil)
		h.sched.push(claimed(t, task("t1"), origin(t)))
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c)
		h.reg.mu.Lock()
		defer h.reg.mu.Unlock()
		require.Equal(t, [][]string{want}, h.reg.batches, "one AcquireLocks call with every concrete file, once each")
		require.Equal(t, [][]string{want}, h.reg.releases, "one ReleaseLocks call")
	})
	t.Run("registry without batches", func(t *testing.T) {
		t.Parallel()
		h := startWorker(t, nil)
		h.reg.mu.Lock()
		h.reg.noBatch = true
		h.reg.mu.Unlock()
		h.sched.push(claimed(t, task("t2"), origin(t)))
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c)
		h.reg.mu.Lock()
		defer h.reg.mu.Unlock()
		require.Empty(t, h.reg.batches)
		require.Equal(t, want, h.reg.released, "released one by one")
		require.EqualValues(t, 3, h.reg.token, "locked one by one")
	})
}

// A lock request the Registry cannot answer (its Redis restarting) is retried, and the task runs
// once it answers; so is a release; a Registry that stays down gives the task back to the queue
// (CANCELLED, which the Scheduler requeues) instead of failing it and with it the run.
func TestLocksWaitOutARegistryThatCannotAnswer(t *testing.T) {
	t.Parallel()
	task := func(id string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "one file", File: "a.txt", Command: "true"}
	}
	// runOne runs one task against the fake Registry, set as set, and answers the Registry once
	// the task succeeded.
	runOne := func(t *testing.T, id string, set func(*fakeRegistry)) *fakeRegistry {
		h := startWorker(t, nil)
		h.reg.mu.Lock()
		set(h.reg)
		h.reg.mu.Unlock()
		h.sched.push(claimed(t, task(id), origin(t)))
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c)
		return h.reg
	}
	t.Run("back after two tries", func(t *testing.T) {
		t.Parallel()
		reg := runOne(t, "t1", func(r *fakeRegistry) { r.unavailable = 2 })
		reg.mu.Lock()
		defer reg.mu.Unlock()
		require.Equal(t, 3, reg.acquireCalls, "two answered Unavailable, the third granted")
		require.Equal(t, [][]string{{"ex_1/a.txt"}}, reg.releases, "the granted lock released")
	})
	t.Run("release after two tries", func(t *testing.T) {
		t.Parallel()
		reg := runOne(t, "t3", func(r *fakeRegistry) { r.releaseUnavailable = 2 })
		reg.mu.Lock()
		defer reg.mu.Unlock()
		require.Equal(t, 3, reg.releaseCalls, "two answered Unavailable, the third released")
		require.Equal(t, [][]string{{"ex_1/a.txt"}}, reg.releases, "released, not left held for a lease")
	})
	t.Run("down for good", func(t *testing.T) {
		t.Parallel()
		h := startWorker(t, func(c *Config) { c.RegistryRetry = 300 * time.Millisecond })
		h.reg.mu.Lock()
		h.reg.unavailable = 1 << 30
		h.reg.mu.Unlock()
		h.sched.push(claimed(t, task("t2"), origin(t)))
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, c.GetResult(), "%v", c)
		require.Equal(t, "LOCK_UNAVAILABLE", c.GetError().GetCode())
		require.Contains(t, c.GetError().GetMessage(), "the Registry could not answer")
		h.reg.mu.Lock()
		defer h.reg.mu.Unlock()
		require.Greater(t, h.reg.acquireCalls, 1, "retried before giving up")
	})
}
