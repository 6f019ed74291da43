package scheduler

import (
	"errors"
	"fmt"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// codeRetried marks the assignment a task was retried from (RetryTask of a task whose wave is no
// longer running): SKIPPED with this code, it counts as satisfied for the barrier, and the new
// assignment in a later wave decides whether the task completes.
const codeRetried = "RETRIED"

// retryInLaterWave retries task assignment a of wave w, which is no longer running (integrating,
// or integrated: e.g. a task blocked by a merge conflict), in the earliest wave that has not
// started integrating (RUNNING or PENDING), as RetryTask's contract says: a new assignment there,
// attempt + 1, with a's errors and the reason as hints. FailedPrecondition when a is not FAILED,
// BLOCKED or SKIPPED, when no such wave is left (then a RETRY execution runs it), or when a task
// depending on it would run before it or alongside it.
func (r *runner) retryInLaterWave(a *store.Assignment, w *schedulerv1.Wave, reason string) (*store.Assignment, error) {
	if a.GetStatus() != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED && a.GetStatus() != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED {
		return nil, failedPrecondition("task %s is %s: only a FAILED, BLOCKED_DCR or SKIPPED task can be retried", a.GetTaskId(), a.GetStatus())
	}
	ws, err := r.allWaves()
	if err != nil {
		return nil, err
	}
	var target *schedulerv1.Wave
	for _, x := range ws {
		if x.GetWaveNumber() > w.GetWaveNumber() && (x.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_RUNNING || x.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_PENDING) {
			target = x
			break
		}
	}
	if target == nil {
		return nil, failedPrecondition("task %s is in wave %d, which is %s, and no later wave is left to run it in: retry it with a RETRY execution once this one ended",
			a.GetTaskId(), w.GetWaveNumber(), w.GetStatus())
	}
	// A task that depends on it must not run before it or alongside it.
	for _, d := range r.dependents(a.GetTaskId()) {
		da, dw, err := r.taskAssignment(d)
		if errors.Is(err, store.ErrNotFound) {
			continue // not part of this execution
		}
		if err != nil {
			return nil, err
		}
		if !terminal(da.GetStatus()) && dw.GetWaveNumber() <= target.GetWaveNumber() {
			return nil, failedPrecondition("task %s depends on task %s and would run before it or alongside it in wave %d: skip %s first, or retry %s with a RETRY execution once this one ended",
				d, a.GetTaskId(), dw.GetWaveNumber(), d, a.GetTaskId())
		}
	}
	if a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED {
		r.e.FailedTasks--
	} else {
		r.e.SkippedTasks--
	}
	prev := a.PreviousErrors
	if a.GetError() != nil {
		prev = lastErrors(append(prev, a.GetError()))
	}
	if reason != "" {
		prev = lastErrors(append(prev, &commonv1.ErrorContext{Code: "RETRY", Message: reason, TaskId: a.GetTaskId(), Timestamp: r.now()}))
	}
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED
	a.Error = &commonv1.ErrorContext{Code: codeRetried, Message: fmt.Sprintf("retried in wave %d", target.GetWaveNumber()), TaskId: a.GetTaskId(), Timestamp: r.now()}
	if err := r.tx.PutAssignment(a); err != nil {
		return nil, err
	}
	next := &store.Assignment{
		Assignment: &schedulerv1.Assignment{Id: ids.New("as", r.tx.Now()), Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK,
			ExecutionId: r.e.GetId(), WaveId: target.GetId(), WaveNumber: target.GetWaveNumber(), TaskId: a.GetTaskId(),
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: a.GetAttempt() + 1},
		Position: a.Position, PreviousErrors: prev,
	}
	if err := r.tx.InsertAssignment(next); err != nil {
		return nil, err
	}
	// Its dependents' ready waves counted on its old wave: no more early starts in this run.
	r.stopEager()
	target.TaskCount++
	if err := r.putWave(target); err != nil {
		return nil, err
	}
	if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_PENDING); err != nil {
		return nil, err
	}
	r.changed = true
	return next, r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_REQUEUED, next,
		fmt.Sprintf("Task %s requeued by request in wave %d (attempt %d): %s", a.GetTaskId(), target.GetWaveNumber(), next.GetAttempt(), orDefault(reason, "retry")), nil))
}
