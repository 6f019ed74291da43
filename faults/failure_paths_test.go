package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// Failure paths (issue 12): production-like timing and tasks that fail. The suite's other
// scenarios use a 0.5–1 s heartbeat and tasks that succeed, which hid how long a dead agent's
// work waited and how failures were reported. These run with the agents' heartbeat and the
// Registry's and Scheduler's stale window as a deployment has them: in full mode the defaults
// (30 s heartbeat, 30 s stale window); in ci mode a 5 s heartbeat and a 12 s stale window (the
// agents' idle Registry heartbeat is 10 s, so a shorter window would call idle agents stale).

// productionTiming is the deployment of the failure-path scenarios.
func productionTiming(cfg config) clusterOptions {
	if cfg.mode == "full" {
		return clusterOptions{stale: 30 * time.Second, agents: 4} // heartbeat: the agents' default, 30 s
	}
	return clusterOptions{heartbeat: 5 * time.Second, stale: 12 * time.Second, agents: 4}
}

// staleWindow is the deployment's stale window.
func (c *cluster) staleWindow() time.Duration {
	if c.opts.stale > 0 {
		return c.opts.stale
	}
	return 30 * time.Second
}

func failurePaths() []scenario {
	pick := func(ci, full int) func(cfg config) int {
		return func(cfg config) int {
			if cfg.mode == "full" {
				return full
			}
			return ci
		}
	}
	// Two tasks per layer and four agents: a requeued task finds an idle agent at once, so
	// death → running again measures the failure path, not a queue.
	narrow := func(sleep string) func(r *run) *schedulerv1.TaskListSpec {
		return func(r *run) *schedulerv1.TaskListSpec {
			return clustertest.LayeredWidth(r.res.scenario, r.repo, r.tasks, 2, sleep)
		}
	}
	return []scenario{
		{name: "agent-kill-after-claim", cluster: productionTiming, tasks: pick(8, 16), spec: narrow("2"), inject: killAfterClaim},
		{name: "agent-restart-same-id", cluster: productionTiming, tasks: pick(8, 16), spec: narrow("2"), inject: restartAfterClaim, check: checkRestarted},
		{name: "task-always-fails", cluster: func(cfg config) clusterOptions {
			o := productionTiming(cfg)
			o.execOptions = func(eo *schedulerv1.ExecutionOptions) { eo.MaxRetries = proto.Int32(failingRetries) }
			return o
			// FAILED by the stop rules, or ESCALATED: its agent failed more than three tries in a
			// row, so it is STUCK (the seed's rule); either way after the other tasks integrated.
		}, tasks: pick(4, 8), spec: withFailingTask, outcomes: []commonv1.Outcome{commonv1.Outcome_OUTCOME_FAILED, commonv1.Outcome_OUTCOME_ESCALATED},
			notCommitted: []string{failingTask},
			inject:       func(*run) {}, check: checkFailingTask},
		{name: "verifier-refuses", cluster: func(cfg config) clusterOptions {
			o := productionTiming(cfg)
			o.refusingVerifier = true
			return o
		}, tasks: pick(4, 8), spec: narrow("0.2"), outcomes: []commonv1.Outcome{commonv1.Outcome_OUTCOME_BLOCKED}, timeout: 2 * time.Minute,
			inject: func(*run) {}, check: checkVerifierRefused},
	}
}

// kills of the failure-path scenarios: ci, full.
func (r *run) kills() int {
	if r.c.cfg.mode == "full" {
		return 4
	}
	return 2
}

// fileOf answers the file task id writes, from the list.
func (r *run) fileOf(id string) string {
	for _, t := range r.spec.GetTasks() {
		if t.GetId() == id {
			return t.GetFile()
		}
	}
	return ""
}

// nextClaim waits (bounded) for a task assignment leased after since to a live agent of the
// suite, polling often so that it sees the claim at once.
func (c *cluster) nextClaim(id string, since time.Time, timeout time.Duration) (string, *schedulerv1.Assignment) {
	var victim string
	var got *schedulerv1.Assignment
	clustertest.Eventually(timeout, func() bool {
		for _, a := range c.assignments(id, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING) {
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && a.GetAssignTime().AsTime().After(since) && c.agentProc(a.GetInstanceId()) != nil {
				victim, got = a.GetInstanceId(), a
				return true
			}
		}
		return false
	})
	return victim, got
}

// lockOn answers the lock held on resource now, or nil.
func (c *cluster) lockOn(resource string) *registryv1.Lock {
	for _, l := range c.locksHeld(resource) {
		if l.GetResource() == resource {
			return l
		}
	}
	return nil
}

// waitLock waits (bounded) until holder holds the lock on resource and answers it (nil: it did
// not within timeout).
func (c *cluster) waitLock(resource, holder string, timeout time.Duration) *registryv1.Lock {
	var lk *registryv1.Lock
	clustertest.Eventually(timeout, func() bool {
		lk = c.lockOn(resource)
		return lk != nil && lk.GetHolder() == holder
	})
	if lk != nil && lk.GetHolder() == holder {
		return lk
	}
	return nil
}

// waitRerun waits (bounded) until d's task runs again: its assignment leased again (a newer
// fencing token; to another instance unless d.restarted) and that holder holding the task's file
// lock (a newer grant than lockToken), or the task completed meanwhile. It answers when it saw
// that, or the zero time; finishedFirst when the victim itself completed the assignment under
// the token it was taken out with (its completion committed before the kill, or in flight then):
// nothing of it can run again.
func (c *cluster) waitRerun(id string, d death, resource string, lockToken int64, timeout time.Duration) (at time.Time, finishedFirst bool) {
	clustertest.Eventually(timeout, func() bool {
		for _, a := range c.assignments(id) {
			if a.GetId() != d.assignment {
				continue
			}
			if a.GetFencingToken() == d.token && a.GetInstanceId() == d.instance &&
				a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED {
				finishedFirst = true
				return true
			}
			if a.GetFencingToken() <= d.token || (!d.restarted && a.GetInstanceId() == d.instance) {
				break
			}
			if a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED {
				at = time.Now()
				return true
			}
			if lk := c.lockOn(resource); lk != nil && lk.GetHolder() == a.GetInstanceId() && lk.GetToken() > lockToken {
				at = time.Now()
				return true
			}
		}
		return false
	})
	return at, finishedFirst
}

// takeOut kill -9s (restart: and starts again under the same instance id) an agent right after
// it claimed a task and took the task's file lock, then waits until the task runs again. It
// answers the death, or false when no claim came. A victim whose completion of the task was
// committed around the kill (a short task, a slow lock or a slow poll on a loaded machine) took
// nothing out with it: the suite picks the next claim instead of waiting for a rerun that cannot
// come (as agent-stop does).
func (r *run) takeOut(n int, restart bool) (death, bool) {
	c := r.c
	for try := range 5 {
		wait := 60 * time.Second
		if try > 0 {
			wait = 20 * time.Second
		}
		victim, a := c.nextClaim(r.e.GetId(), time.Now(), wait)
		if victim == "" {
			if try == 0 {
				r.t.Errorf("no task was claimed for 60 s")
			} else {
				r.t.Logf("no task was claimed for %s after a victim finished first: nothing taken out", wait)
			}
			return death{}, false
		}
		resource := r.e.GetId() + "/" + r.fileOf(a.GetTaskId())
		var lockToken int64
		if lk := c.waitLock(resource, victim, 5*time.Second); lk != nil {
			lockToken = lk.GetToken()
		} else {
			r.t.Logf("%s did not take the lock on %s within 5 s of its claim: killed without it", victim, resource)
		}
		d := death{instance: victim, assignment: a.GetId(), task: a.GetTaskId(), token: a.GetFencingToken(), restarted: restart}
		if restart {
			d.at = c.restartAgent(victim, n)
		} else {
			d.at = time.Now()
			c.killAgent(victim) // and a replacement starts
		}
		rerun, finishedFirst := c.waitRerun(r.e.GetId(), d, resource, lockToken, c.staleWindow()+90*time.Second)
		if finishedFirst {
			r.t.Logf("%s completed task %s (token %d) before its kill landed: nothing taken out; picking the next claim", victim, d.task, d.token)
			continue
		}
		d.rerun = rerun
		r.res.faultsInjected++
		if d.rerun.IsZero() {
			r.t.Errorf("task %s of %s (killed at %s) did not run again within %s", d.task, victim, d.at.Format(time.RFC3339Nano), c.staleWindow()+90*time.Second)
		}
		r.deaths = append(r.deaths, d)
		return d, true
	}
	r.t.Logf("five victims in a row completed their task before the kill landed: nothing taken out")
	return death{}, false
}

// a. kill -9 an agent right after it claimed a task (it holds the task's file lock, and the
// Registry may still see it idle): the task runs again on another agent within the stale window
// + 2 s (issue 12: the dead agent is reaped early whatever its Registry status, and its lock is
// released on the requeue).
func killAfterClaim(r *run) {
	bound := r.c.staleWindow() + 2*time.Second
	var taken []string
	for i := range r.kills() {
		if !r.at(float64(i) / float64(r.kills())) {
			break
		}
		d, ok := r.takeOut(i+1, false)
		if !ok {
			continue
		}
		taken = append(taken, fmt.Sprintf("%.1fs", d.rerun.Sub(d.at).Seconds()))
		if !d.rerun.IsZero() {
			assert.LessOrEqual(r.t, d.rerun.Sub(d.at), bound, "task %s ran again on another agent %s after its agent was killed right after the claim: more than the stale window + 2 s (%s)",
				d.task, d.rerun.Sub(d.at).Round(time.Millisecond), bound)
		}
	}
	r.res.notes = fmt.Sprintf("%d agents killed -9 right after a claim (holding the file lock); running again after %s (bound: stale window + 2 s = %s)",
		r.res.faultsInjected, strings.Join(taken, ", "), bound)
}

// b. kill -9 an agent right after a claim and start it again at once under the same instance id
// (a new session): its old session's task is requeued at once with AGENT_RESTARTED and its lock
// released, well before the stale window or the lease would.
func restartAfterClaim(r *run) {
	var taken []string
	for i := range r.kills() {
		if !r.at(float64(i) / float64(r.kills())) {
			break
		}
		d, ok := r.takeOut(i+1, true)
		if !ok {
			continue
		}
		taken = append(taken, fmt.Sprintf("%.1fs", d.rerun.Sub(d.at).Seconds()))
		if !d.rerun.IsZero() {
			assert.Less(r.t, d.rerun.Sub(d.at), r.c.staleWindow(), "task %s ran again %s after its agent restarted under the same id: not before the stale window (%s), so the new session did not take it back",
				d.task, d.rerun.Sub(d.at).Round(time.Millisecond), r.c.staleWindow())
		}
	}
	r.res.notes = fmt.Sprintf("%d agents killed -9 right after a claim and restarted under the same --instance-id; running again (lease and lock) after %s",
		r.res.faultsInjected, strings.Join(taken, ", "))
}

// checkRestarted: every restarted agent's task was taken back because its instance restarted
// (code AGENT_RESTARTED, or a reason saying so, in the log), before the stale window.
func checkRestarted(r *run, e *schedulerv1.Execution, log []*commonv1.LogEntry) {
	for _, d := range r.deaths {
		var requeued time.Time
		why := ""
		for _, en := range log {
			if en.GetTaskId() != d.task || !en.GetTime().AsTime().After(d.at) {
				continue
			}
			switch en.GetEventType() {
			case commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, commonv1.EventType_EVENT_TYPE_TASK_REQUEUED:
				if requeued.IsZero() || en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_REQUEUED {
					why += en.GetMessage() + " " + en.GetContext().String() + " "
				}
				if en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_REQUEUED && requeued.IsZero() {
					requeued = en.GetTime().AsTime()
				}
			}
			if !requeued.IsZero() {
				break
			}
		}
		if !assert.False(r.t, requeued.IsZero(), "task %s was never requeued after its agent restarted", d.task) {
			continue
		}
		assert.Less(r.t, requeued.Sub(d.at), r.c.staleWindow(), "task %s requeued %s after the restart", d.task, requeued.Sub(d.at))
		lower := strings.ToLower(why)
		assert.True(r.t, strings.Contains(why, "AGENT_RESTARTED") || strings.Contains(lower, "restarted") || strings.Contains(lower, "new session"),
			"task %s was not requeued because its instance restarted: %s", d.task, why)
	}
}

// The failing task of task-always-fails: it counts its runs in a file outside the repository.
const (
	failingTask    = "tfail"
	failingRetries = 3
	failingMarker  = "boom: the widget is missing"
)

func withFailingTask(r *run) *schedulerv1.TaskListSpec {
	spec := clustertest.LayeredWidth(r.res.scenario, r.repo, r.tasks, 2, "1")
	count := filepath.Join(r.dir, "count")
	// After the others (it depends on the last layer), so that they are integrated whatever the
	// failure does to the run.
	n := len(spec.Tasks)
	spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: failingTask, Title: "always fails", File: "out/fail.txt",
		Action:    commonv1.TaskAction_TASK_ACTION_CREATE,
		DependsOn: []string{clustertest.LayeredTaskID(n - 1), clustertest.LayeredTaskID(n - 2)},
		Command:   fmt.Sprintf("sh -c 'echo run >> %s; echo %q >&2; exit 1'", count, failingMarker)})
	return spec
}

// c. a task that always fails, max_retries 3: it ran exactly 4 times and the run reports it
// FAILED with the command's error (EXECUTOR_FAILED, exit status 1, its output), not as an agent
// that stopped before finishing.
func checkFailingTask(r *run, e *schedulerv1.Execution, log []*commonv1.LogEntry) {
	b, err := os.ReadFile(filepath.Join(r.dir, "count"))
	assert.NoError(r.t, err)
	runs := strings.Count(string(b), "run\n")
	assert.Equal(r.t, failingRetries+1, runs, "the always-failing task with max_retries %d ran %d times", failingRetries, runs)
	var a *schedulerv1.Assignment
	for _, x := range r.c.assignments(e.GetId()) {
		if x.GetTaskId() == failingTask {
			a = x
		}
	}
	if !assert.NotNil(r.t, a, "no assignment of %s", failingTask) {
		return
	}
	assert.Equal(r.t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, a.GetStatus())
	assert.Equal(r.t, "EXECUTOR_FAILED", a.GetError().GetCode(), "%s", a.GetError().GetMessage())
	assert.Contains(r.t, a.GetError().GetMessage(), "exit status 1")
	assert.NotContains(r.t, a.GetError().GetMessage(), "stopped before finishing")
	assert.EqualValues(r.t, failingRetries+1, a.GetTries())
	// The command's output reaches the report: the error, or the task's log entries.
	seen := strings.Contains(a.GetError().GetMessage()+a.GetError().GetStackTrace(), failingMarker)
	requeues := 0
	for _, en := range log {
		if en.GetTaskId() != failingTask {
			continue
		}
		if en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_REQUEUED {
			requeues++
		}
		if strings.Contains(en.GetMessage(), failingMarker) || strings.Contains(en.GetContext().String(), failingMarker) {
			seen = true
		}
	}
	assert.True(r.t, seen, "the failing command's output (%q) is nowhere in its report", failingMarker)
	assert.Zero(r.t, requeues, "the failed task was requeued %d times: a FAILED outcome is final", requeues)
	r.res.notes = fmt.Sprintf("max_retries %d: the command ran %d times; task reported %s %s: %s; run %s: %s", failingRetries, runs,
		strings.TrimPrefix(a.GetStatus().String(), "ASSIGNMENT_STATUS_"), a.GetError().GetCode(), firstLineOf(a.GetError().GetMessage()),
		strings.TrimPrefix(e.GetOutcome().String(), "OUTCOME_"), firstLineOf(e.GetStatusMessage()))
}

// d. a Verifier that refuses the request (no --allowed-root, handed a local directory): Verify
// Done ends BLOCKED at once with the Verifier's message in the verdict, the status and the log.
func checkVerifierRefused(r *run, e *schedulerv1.Execution, log []*commonv1.LogEntry) {
	const refusal = "allows no local directories"
	assert.Contains(r.t, e.GetVerification().GetBlockReason(), refusal)
	assert.Contains(r.t, e.GetStatusMessage(), refusal)
	var started, ended time.Time
	inLog := false
	for _, en := range log {
		switch {
		case en.GetEventType() == commonv1.EventType_EVENT_TYPE_VERIFICATION_STARTED && started.IsZero():
			started = en.GetTime().AsTime()
		case en.GetEventType() == commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, en.GetEventType() == commonv1.EventType_EVENT_TYPE_EXECUTION_CANCELLED:
			ended = en.GetTime().AsTime()
		}
		if strings.Contains(en.GetMessage(), refusal) {
			inLog = true
		}
	}
	if ended.IsZero() && e.GetEndTime() != nil {
		ended = e.GetEndTime().AsTime()
	}
	assert.True(r.t, inLog, "the Verifier's refusal is in no log entry")
	if assert.False(r.t, started.IsZero(), "no VERIFICATION_STARTED in the log") && !ended.IsZero() {
		took := ended.Sub(started)
		// At once: a non-retryable answer is not retried (a retryable one is, a bounded number of
		// times with backoff); 10 s is far beyond one round trip and far below endless retries.
		assert.Less(r.t, took, 10*time.Second, "Verify Done took %s to end BLOCKED on a refusal", took)
		r.res.notes = fmt.Sprintf("Verifier without --allowed-root: BLOCKED %.1fs after Verify Done started: %s", took.Seconds(), firstLineOf(e.GetVerification().GetBlockReason()))
	}
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
