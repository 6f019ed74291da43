package worker

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// exists says whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// waitFor polls until path exists or d passes; it says whether it does.
func waitFor(path string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for !exists(path) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // a poll with a deadline, in a stand-in's answer
	}
	return exists(path)
}

// With Prefetch the next assignment runs while the current one's completion is in flight: here
// a's CompleteTask is not answered until b's command has run. Without prefetch b could only come
// with that answer.
func TestPrefetchRunsTheNextWhileTheCompletionIsInFlight(t *testing.T) {
	t.Parallel()
	ranB := tmpFile(t, "ran-b")
	overlapped := make(chan bool, 1)
	h := startWorker(t, func(c *Config) { c.Prefetch = true })
	h.sched.mu.Lock()
	h.sched.fuse = true
	h.sched.gate = func(req *schedulerv1.CompleteTaskRequest) {
		if req.GetAssignmentId() == "as_a" {
			overlapped <- waitFor(ranB, 20*time.Second)
		}
	}
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "a", Title: "first", Command: "true"}, ""),
		claimed(t, &commonv1.Task{Id: "b", Title: "second", Command: "touch " + shq(ranB)}, ""),
		claimed(t, &commonv1.Task{Id: "c", Title: "third", Command: "true"}, ""))
	got := map[string]int{}
	for range 3 {
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
		got[c.GetAssignmentId()]++
	}
	require.True(t, <-overlapped, "b did not run while a's completion was in flight")
	require.Equal(t, map[string]int{"as_a": 1, "as_b": 1, "as_c": 1}, got)
	eventually(t, 20*time.Second, func() bool { return h.w.Snapshot().State == commonv1.AgentStatus_AGENT_STATUS_IDLE },
		"the worker is idle once nothing is held")
	require.EqualValues(t, 3, h.w.Snapshot().Completed)
}

// The assignment held ahead is leased from when it arrives: its lease is kept (reported) while
// the current one runs, before its own work starts.
func TestPrefetchKeepsTheLeaseOfTheAssignmentHeldAhead(t *testing.T) {
	t.Parallel()
	kept := tmpFile(t, "kept")
	h := startWorker(t, func(c *Config) { c.Prefetch = true; c.startedGrace = -1 })
	h.sched.mu.Lock()
	h.sched.onReport = func(req *schedulerv1.ReportProgressRequest) {
		if req.GetAssignmentId() == "as_b" && len(req.GetEvents()) == 0 {
			_ = os.WriteFile(kept, nil, 0o644)
		}
	}
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "a", Title: "long", Command: "while [ ! -f " + shq(kept) + " ]; do sleep 0.01; done"}, ""),
		claimed(t, &commonv1.Task{Id: "b", Title: "held", Command: "true"}, ""))
	for _, want := range []string{"as_a", "as_b"} {
		c := h.complete()
		require.Equal(t, want, c.GetAssignmentId())
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	}
}

// A drain gives back the assignment held ahead without running it: CANCELLED with NOT_STARTED
// (requeued without using an attempt); the current one finishes and claims nothing more.
func TestPrefetchGivesBackWhatItHeldWhenDraining(t *testing.T) {
	t.Parallel()
	release, ranB := tmpFile(t, "release"), tmpFile(t, "ran-b")
	h := startWorker(t, func(c *Config) { c.Prefetch = true })
	h.sched.push(claimed(t, &commonv1.Task{Id: "a", Title: "running", Command: "while [ ! -f " + shq(release) + " ]; do sleep 0.01; done"}, ""),
		claimed(t, &commonv1.Task{Id: "b", Title: "held", Command: "touch " + shq(ranB)}, ""))
	eventually(t, 20*time.Second, func() bool {
		h.sched.mu.Lock()
		defer h.sched.mu.Unlock()
		return len(h.sched.claims) >= 2 && len(h.sched.queue) == 0
	}, "b is claimed ahead while a runs")
	h.w.Drain(0)
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	// b goes back first (free for another agent at once), then a's result.
	b := h.complete()
	require.Equal(t, "as_b", b.GetAssignmentId())
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, b.GetResult())
	require.Equal(t, codeNotStarted, b.GetError().GetCode())
	a := h.complete()
	require.Equal(t, "as_a", a.GetAssignmentId())
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, a.GetResult(), "%v", a.GetError())
	require.Nil(t, a.GetClaimNext(), "a draining worker claims nothing with its completion")
	require.NoError(t, h.wait())
	require.False(t, exists(ranB), "the assignment given back ran")
}

// What the worker claims to hold ahead is a task, never a wave's integration (the run's barrier,
// which must not wait behind a task): the claim ahead and the completions sent beside the next
// task ask for tasks only; a completion with nothing held asks for any kind.
func TestPrefetchHoldsOnlyTasksAhead(t *testing.T) {
	t.Parallel()
	h := startWorker(t, func(c *Config) { c.Prefetch = true })
	h.sched.mu.Lock()
	h.sched.fuse = true
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "a", Title: "a", Command: "true"}, ""),
		claimed(t, &commonv1.Task{Id: "b", Title: "b", Command: "true"}, ""),
		claimed(t, &commonv1.Task{Id: "c", Title: "c", Command: "true"}, ""))
	byID := map[string]*schedulerv1.CompleteTaskRequest{}
	for range 3 {
		c := h.complete()
		byID[c.GetAssignmentId()] = c
	}
	task := []schedulerv1.AssignmentKind{schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK}
	h.sched.mu.Lock()
	require.GreaterOrEqual(t, len(h.sched.claims), 2)
	require.Empty(t, h.sched.claims[0].GetKinds(), "the first claim, to start at once, takes any kind")
	require.Equal(t, task, h.sched.claims[1].GetKinds(), "the claim ahead takes tasks only")
	h.sched.mu.Unlock()
	// a completes beside b (held ahead): it claims a task only; c, with nothing held, any kind.
	require.Equal(t, task, byID["as_a"].GetClaimNext().GetKinds())
	require.NotNil(t, byID["as_c"].GetClaimNext())
	require.Empty(t, byID["as_c"].GetClaimNext().GetKinds())
}
