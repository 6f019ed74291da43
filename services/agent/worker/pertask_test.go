package worker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The agent's own cost per task (issue 17): what each task asks the services for, and when.

// Prime asks the Registry for the owner and the locks of the task's files at once: GetOwner,
// held until AcquireLocks arrives, sees it (asked one after the other, it would wait 20 s and
// give up first).
func TestPrimeAsksOwnerAndLocksAtOnce(t *testing.T) {
	t.Parallel()
	h := startWorker(t, nil)
	h.reg.mu.Lock()
	h.reg.ownerWaitsForLocks = make(chan struct{})
	h.reg.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "p", Title: "one file", File: "a.txt", Command: "true"}, origin(t)))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	h.reg.mu.Lock()
	defer h.reg.mu.Unlock()
	require.Equal(t, 1, h.reg.owners)
	require.True(t, h.reg.ownerSawLocks, "GetOwner and AcquireLocks were asked together")
	require.Len(t, h.reg.releases, 1)
}

// A task without a repository works in a scratch directory of its own and writes nothing shared:
// it asks for no owner and no lock, and fences nothing before finishing (no progress report or
// lock renewal; the keeper's first report waits startedGrace, here longer than the task). The
// same task on a repository does all three.
func TestTaskWithoutRepositoryAsksForNoOwnerLocksOrFence(t *testing.T) {
	t.Parallel()
	task := &commonv1.Task{Id: "s", Title: "scratch", File: "out/a", Files: []*commonv1.FileImpact{{Path: "out/b"}}, Command: "mkdir -p out && echo x > out/a"}
	for _, repo := range []bool{false, true} {
		h := startWorker(t, func(c *Config) { c.startedGrace = time.Hour })
		src := ""
		if repo {
			src = origin(t)
		}
		ca := claimed(t, task, src)
		ca.HeartbeatInterval = durationpb.New(time.Hour) // the keeper reports once, at the start
		h.sched.push(ca)
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
		h.reg.mu.Lock()
		h.sched.mu.Lock()
		owners, batches, renews, reports := h.reg.owners, len(h.reg.batches), h.reg.renews, len(h.sched.reports)
		h.sched.mu.Unlock()
		h.reg.mu.Unlock()
		first := c.GetEvents() // TASK_STARTED goes with the first message to the Scheduler
		if repo {
			require.Equal(t, 2, owners, "a repository's task asks who owns each file")
			require.Equal(t, 1, batches, "and locks them")
			require.Equal(t, 2, renews, "and renews both locks in the fence")
			require.Equal(t, 1, reports, "the fence's report")
			h.sched.mu.Lock()
			first = h.sched.reports[0].GetEvents()
			h.sched.mu.Unlock()
		} else {
			require.Zero(t, owners, "no GetOwner without a repository")
			require.Zero(t, batches, "no AcquireLocks without a repository")
			require.Zero(t, renews)
			require.Zero(t, reports, "no report: no fence, and the task ended within startedGrace")
		}
		require.NotEmpty(t, first)
		require.Equal(t, commonv1.EventType_EVENT_TYPE_TASK_STARTED, first[0].GetEventType())
	}
}

// A task that ends within startedGrace sends no progress report: its TASK_STARTED event, stamped
// when the task started (before its command ran), goes first in its completion's events, in the
// completion's one Scheduler transaction (issue 17).
func TestShortTaskStartedRidesOnTheCompletion(t *testing.T) {
	t.Parallel()
	ran := tmpFile(t, "ran")
	h := startWorker(t, func(c *Config) { c.startedGrace = time.Hour }) // "short": whatever the machine's load
	ca := claimed(t, &commonv1.Task{Id: "q", Title: "quick", Command: "date +%s.%N > " + shq(ran)}, "")
	ca.HeartbeatInterval = durationpb.New(4 * time.Hour) // the grace is at most half of it
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	h.sched.mu.Lock()
	reports := len(h.sched.reports)
	h.sched.mu.Unlock()
	require.Zero(t, reports, "no ReportProgress for a task that ended within the grace")
	events := c.GetEvents()
	require.NotEmpty(t, events)
	require.Equal(t, commonv1.EventType_EVENT_TYPE_TASK_STARTED, events[0].GetEventType(), "%v", events)
	require.Len(t, eventsOf(events, commonv1.EventType_EVENT_TYPE_TASK_STARTED), 1)
	got := lines(t, ran)
	require.Len(t, got, 1)
	sec, err := strconv.ParseFloat(got[0], 64)
	require.NoError(t, err)
	cmdTime := time.Unix(0, int64(sec*1e9))
	require.False(t, events[0].GetTime().AsTime().After(cmdTime.Add(time.Millisecond)),
		"TASK_STARTED at %s, after the command ran at %s: stamped when the task started, not when sent", events[0].GetTime().AsTime(), cmdTime)
}

// A task that outlives startedGrace reports TASK_STARTED on its own, before its completion: its
// command waits until the Scheduler has received that report (a hook, no sleep), and the
// completion does not repeat it.
func TestLongTaskReportsStartedBeforeItsCompletion(t *testing.T) {
	t.Parallel()
	reported := tmpFile(t, "reported")
	h := startWorker(t, nil) // the default startedGrace
	h.sched.mu.Lock()
	h.sched.onReport = func(req *schedulerv1.ReportProgressRequest) {
		if len(eventsOf(req.GetEvents(), commonv1.EventType_EVENT_TYPE_TASK_STARTED)) > 0 {
			_ = os.WriteFile(reported, nil, 0o644)
		}
	}
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "l", Title: "long", Command: "while [ ! -f " + shq(reported) + " ]; do sleep 0.01; done"}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	first := h.sched.firstReportEvents(t)
	require.NotEmpty(t, first)
	require.Equal(t, commonv1.EventType_EVENT_TYPE_TASK_STARTED, first[0].GetEventType(), "the keeper's first report carries it")
	require.Empty(t, eventsOf(c.GetEvents(), commonv1.EventType_EVENT_TYPE_TASK_STARTED), "the completion does not repeat it")
}

// A report still in flight when the work ends is answered, not cut off: the Scheduler may already
// have recorded it, and its events, requeued for the completion, would be logged twice. Here the
// Scheduler records the report carrying TASK_STARTED, the task's command then ends, and the
// answer comes only after that (or when the agent gives up on it, as an agent that cancelled
// the report when its work ended did): the completion must not carry TASK_STARTED again.
func TestReportInFlightWhenTheWorkEndsIsNotResent(t *testing.T) {
	t.Parallel()
	reported, exited := tmpFile(t, "reported"), tmpFile(t, "exited")
	h := startWorker(t, func(c *Config) { c.startedGrace = time.Millisecond })
	h.sched.mu.Lock()
	h.sched.answerReport = func(ctx context.Context) {
		_ = os.WriteFile(reported, nil, 0o644)
		for {
			if _, err := os.Stat(exited); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		// The command has ended; its work ends right after. An agent that cancels its report
		// then sees Canceled here; one that waits for the answer gets it after this bound.
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "r", Title: "raced",
		Command: "while [ ! -f " + shq(reported) + " ]; do sleep 0.01; done; : > " + shq(exited)}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	first := h.sched.firstReportEvents(t)
	require.NotEmpty(t, eventsOf(first, commonv1.EventType_EVENT_TYPE_TASK_STARTED), "the report carried TASK_STARTED")
	require.Empty(t, eventsOf(c.GetEvents(), commonv1.EventType_EVENT_TYPE_TASK_STARTED), "the completion does not repeat it")
}

// An assignment handed over with the previous one's completion (fused) goes on from a RUNNING
// agent: no IDLE heartbeat between the two tasks, and the Registry is told of the second task by
// the heartbeat loop (within HeartbeatCoalesce: the second task runs until it was).
func TestFusedAssignmentsHeartbeatNoIdleBetween(t *testing.T) {
	t.Parallel()
	told := tmpFile(t, "told")
	h := startWorker(t, nil)
	h.reg.mu.Lock()
	h.reg.onHeartbeat = func(req *registryv1.HeartbeatRequest) {
		if req.GetStatus() == commonv1.AgentStatus_AGENT_STATUS_RUNNING && req.GetCurrentTaskId() == "b" {
			_ = os.WriteFile(told, nil, 0o644)
		}
	}
	h.reg.mu.Unlock()
	h.sched.mu.Lock()
	h.sched.fuse = true
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "a", Title: "first", Command: "true"}, ""))
	h.sched.push(claimed(t, &commonv1.Task{Id: "b", Title: "second", Command: "while [ ! -f " + shq(told) + " ]; do sleep 0.01; done"}, ""))
	for range 2 {
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	}
	h.sched.mu.Lock()
	claims := len(h.sched.claims)
	h.sched.mu.Unlock()
	require.GreaterOrEqual(t, claims, 1)
	eventually(t, 20*time.Second, func() bool {
		for _, b := range h.reg.beats() {
			if b.GetStatus() == commonv1.AgentStatus_AGENT_STATUS_RUNNING && b.GetCurrentTaskId() == "b" {
				return true
			}
		}
		return false
	}, "the Registry is told of task b")
	seenA := false
	for _, b := range h.reg.beats() {
		switch {
		case b.GetCurrentTaskId() == "a":
			seenA = true
		case b.GetCurrentTaskId() == "b":
			return
		case seenA && b.GetStatus() == commonv1.AgentStatus_AGENT_STATUS_IDLE:
			t.Fatalf("an IDLE heartbeat between the fused tasks: %v", h.reg.beats())
		}
	}
}

// Fused tasks that follow each other within HeartbeatCoalesce are not each named to the Registry
// (a Registry write per task, issue 17); the change of status at the end (IDLE) is sent at once.
func TestFusedTaskHeartbeatsAreCoalesced(t *testing.T) {
	t.Parallel()
	h := startWorker(t, func(c *Config) { c.HeartbeatCoalesce = time.Hour }) // HeartbeatInterval's 10 s
	h.sched.mu.Lock()
	h.sched.fuse = true
	h.sched.mu.Unlock()
	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		h.sched.push(claimed(t, &commonv1.Task{Id: id, Title: id, Command: "true"}, ""))
	}
	for range ids {
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	}
	eventually(t, 20*time.Second, func() bool {
		beats := h.reg.beats()
		return beats[len(beats)-1].GetStatus() == commonv1.AgentStatus_AGENT_STATUS_IDLE
	}, "the Registry is told the agent is idle")
	named := 0
	for _, b := range h.reg.beats() {
		if id := b.GetCurrentTaskId(); id != "" && id != "a" {
			named++
		}
	}
	require.Less(t, named, 3, "fused tasks named one heartbeat each: %v", h.reg.beats())
}

// Every phase of a task is measured in converge_agent_task_phase_seconds.
func TestTaskPhasesAreMeasured(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := startWorker(t, func(c *Config) { c.Metrics = reg })
	h.sched.push(claimed(t, &commonv1.Task{Id: "m", Title: "measured", File: "a.txt", Command: "echo x > a.txt"}, origin(t)))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	counts := map[string]uint64{}
	eventually(t, 20*time.Second, func() bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		clear(counts)
		for _, mf := range mfs {
			if mf.GetName() != "converge_agent_task_phase_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
		return counts[phaseComplete] == 1
	}, "the completion is measured")
	for _, p := range []string{phaseClaimHeartbeat, phasePrime, phaseWorkspace, phaseExecute, phaseValidate, phaseFinish, phaseCleanup, phaseComplete} {
		require.Equal(t, uint64(1), counts[p], "phase %s of the one task", p)
	}
}

// A task's scratch directory is emptied beside its completion, not before it, and kept in the
// session's directory for the next task (made once, not per task: issue 17); no record per task
// says it is in use, nothing goes to the data dir's shared scratch/, and the next task starts in
// an empty directory.
func TestScratchDirectoryIsEmptiedAfterTheTaskAndReused(t *testing.T) {
	t.Parallel()
	h := startWorker(t, nil)
	h.sched.push(claimed(t, &commonv1.Task{Id: "r", Title: "scratch", File: "a", Command: "mkdir d && echo x > d/a && pwd > ../first"}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	scratch := filepath.Join(h.w.sess.dir, "scratch")
	first, err := os.ReadFile(filepath.Join(scratch, "first"))
	require.NoError(t, err)
	dir := strings.TrimSpace(string(first))
	require.Equal(t, scratch, filepath.Dir(dir), "the scratch directory is the session's")
	eventually(t, 20*time.Second, func() bool {
		h.w.sess.scratchMu.Lock()
		defer h.w.sess.scratchMu.Unlock()
		return slices.Contains(h.w.sess.scratchFree, dir)
	}, "the scratch directory is given back")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "the scratch directory was emptied")
	records, _ := os.ReadDir(filepath.Join(h.w.sess.dir, "worktrees"))
	require.Empty(t, records, "no record per scratch directory")
	shared, _ := os.ReadDir(filepath.Join(h.w.cache.Root(), "scratch"))
	require.Empty(t, shared, "nothing in the data dir's shared scratch/")

	h.sched.push(claimed(t, &commonv1.Task{Id: "s", Title: "scratch again", File: "b", Command: `[ -z "$(ls -A)" ] && [ "$(pwd)" = ` + shq(dir) + ` ]`}, ""))
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "the next task runs in the same, empty, directory: %v", c.GetError())
}

// The project's files are read for an executor that reads a prompt, not for a command (issue 17):
// a named convention that is missing is a warning for an agent CLI and nothing for a command.
func TestProjectFilesAreReadOnlyForAPrompt(t *testing.T) {
	t.Parallel()
	h := startWorker(t, nil)
	warned := func(spec *commonv1.ExecutorSpec, id string) bool {
		ca := claimed(t, &commonv1.Task{Id: id, Title: id, File: "a", Command: "true"}, "")
		ca.Options.Executor = spec
		ca.Context = &schedulerv1.ProjectContext{Conventions: []*schedulerv1.ConventionsSource{{Path: "MISSING.md"}}}
		h.sched.push(ca)
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
		for _, e := range eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_WARNING) {
			if strings.Contains(e.GetMessage(), "MISSING.md") {
				return true
			}
		}
		return false
	}
	require.False(t, warned(nil, "command"), "a command's project files are not read")
	cli := &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", "-c", "cat >/dev/null"}}}}
	require.True(t, warned(cli, "cli"), "an agent CLI's are")
}
