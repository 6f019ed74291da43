package scheduler

import (
	"context"
	"errors"
	"fmt"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// CompleteTask: an agent ends its assignment; a task's result moves the run on (barrier.go), a
// stopped or expired one is requeued.

// escalateAfterFailures consecutive failures of an agent end the run ESCALATED.
const escalateAfterFailures = 3

// CompleteTask ends the holder's assignment with its result and moves the run on.
func (s *Server) CompleteTask(ctx context.Context, req *schedulerv1.CompleteTaskRequest) (*schedulerv1.CompleteTaskResponse, error) {
	res := &schedulerv1.CompleteTaskResponse{Directive: schedulerv1.Directive_DIRECTIVE_CONTINUE}
	eid, err := s.executionOf(ctx, req.GetAssignmentId())
	if err != nil {
		return nil, toStatus(err)
	}
	next := req.GetClaimNext()
	if next != nil && s.claimAdmitted(ctx, next) != nil {
		// The claim is refused (or cannot be checked now): the completion goes on alone, and the
		// agent's ClaimTask answers why.
		next = nil
	}
	fused := false    // the completion was accepted now (not a retry): a next claim may follow
	enqueued := false // it left a knowledge confirmation in the outbox
	uctx := store.WithAssignmentHint(ctx, req.GetAssignmentId())
	if next != nil {
		uctx = store.WithNextPendingHint(uctx) // the claim's NextPending read with the lock
	}
	err = s.updateGrouped(uctx, eid, func(r *runner) error {
		a, err := r.holder(ctx, req.GetAssignmentId(), req.GetInstanceId(), req.GetFencingToken())
		if err != nil {
			return err
		}
		if terminal(a.GetStatus()) && a.GetResult() == req.GetResult() {
			res.Assignment = a.Assignment // a retried completion: same answer
			return nil
		}
		if err := r.live(a); err != nil {
			if !ended(r.e) || !held(a.GetStatus()) {
				return err
			}
			// The run ended while the agent worked: its (late) completion is recorded.
		}
		if err := r.complete(a, req); err != nil {
			return err
		}
		if enqueued, err = r.enqueueConfirmation(a, auth.Name(ctx), req.GetEvents()); err != nil {
			return err
		}
		res.Assignment = a.Assignment
		fused = next != nil
		if fused && (next.GetExecutionId() == "" || next.GetExecutionId() == eid) {
			// The next assignment of the same execution, in the same transaction: no second
			// lock of the execution, no search of the claimable executions.
			res.Next, err = r.claimNext(next, auth.Name(ctx))
		}
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if enqueued {
		s.kickConfirmations() // the knowledge confirmation happens off this path
	}
	if fused && res.GetNext() == nil {
		// Nothing more in this execution for the agent: any other, at once (no wait).
		if res.Next, err = s.claimOnce(ctx, next); err != nil {
			s.log.Warn("claim after a completion", "err", err) // the completion stands; the agent claims again
		}
	}
	return res, nil
}

// claimNext leases the next assignment of r's execution to the claim's agent, or answers nil.
func (r *runner) claimNext(req *schedulerv1.ClaimTaskRequest, principal string) (*schedulerv1.ClaimedAssignment, error) {
	kinds := claimKinds(r.e, req)
	if len(kinds) == 0 {
		return nil, nil
	}
	c, err := r.lease(req.GetInstanceId(), req.GetSessionId(), principal, kinds)
	if errors.Is(err, errNothing) {
		return nil, nil
	}
	return c, err
}

// complete applies a completion to a held assignment.
func (r *runner) complete(a *store.Assignment, req *schedulerv1.CompleteTaskRequest) error {
	w, err := r.wave(a.GetWaveNumber())
	if err != nil {
		return err
	}
	if err := r.log(agentEntries(a, req.GetEvents())...); err != nil {
		return err
	}
	now := r.now()
	a.Result = req.GetResult()
	a.CommitSha, a.TaskRef, a.Error = req.GetCommitSha(), req.GetTaskRef(), req.GetError()
	a.Tries, a.DiscoveriesCount = req.GetTries(), req.GetDiscoveriesCount()
	a.FilesChanged, a.ValidationOutputTail = req.GetFilesChanged(), req.GetValidationOutputTail()
	a.CompleteTime = now
	if a.Error != nil && a.Error.Timestamp == nil {
		a.Error.Timestamp = now
	}
	if w.GetActiveAgents() > 0 {
		w.ActiveAgents--
	}
	isTask := a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK
	if isTask && r.e.GetRunningTasks() > 0 {
		r.e.RunningTasks--
	}
	r.e.TotalAttempts += req.GetTries()
	if u := req.GetUsage(); u != nil {
		a.Usage, r.e.Usage = u, addUsage(r.e.GetUsage(), u)
	}
	r.changed = true
	if ended(r.e) {
		// Recorded, nothing moves: the run is over.
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED
		if err := r.putWave(w); err != nil {
			return err
		}
		return r.tx.PutAssignment(a)
	}
	if !isTask {
		return r.integrated(a, w, req)
	}
	title := r.task(a.GetTaskId()).GetTitle()
	var (
		ev     commonv1.EventType
		msg    string
		status commonv1.TaskStatus
	)
	switch req.GetResult() {
	case schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED:
		a.Status, ev, status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, commonv1.TaskStatus_TASK_STATUS_COMPLETED
		msg = fmt.Sprintf("Task %s: %s completed", a.GetTaskId(), title)
		if a.GetCommitSha() != "" {
			msg += " at " + short(a.GetCommitSha())
		}
	case schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED:
		a.Status, ev, status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, commonv1.EventType_EVENT_TYPE_TASK_FAILED, commonv1.TaskStatus_TASK_STATUS_FAILED
		msg = fmt.Sprintf("Task %s: %s failed after %d tries: %s", a.GetTaskId(), title, a.GetTries(), a.GetError().GetMessage())
	case schedulerv1.CompletionResult_COMPLETION_RESULT_SKIPPED:
		a.Status, ev, status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED, commonv1.EventType_EVENT_TYPE_TASK_SKIPPED, commonv1.TaskStatus_TASK_STATUS_SKIPPED
		msg = fmt.Sprintf("Task %s: %s skipped by the agent: %s", a.GetTaskId(), title, a.GetError().GetMessage())
	case schedulerv1.CompletionResult_COMPLETION_RESULT_BLOCKED_DCR:
		// A design change request: the task waits for a person (RetryTask or SkipTask) and the
		// run pauses.
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED
		w.FailedCount++
		r.e.FailedTasks++
		r.e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED
		r.e.StatusMessage = fmt.Sprintf("task %s needs a design change: %s", a.GetTaskId(), a.GetError().GetMessage())
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		if err := r.putWave(w); err != nil {
			return err
		}
		if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR); err != nil {
			return err
		}
		return r.log(entry(commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED, a, r.e.StatusMessage, nil))
	case schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED:
		// The agent stopped on its own (drain deadline), or gave the task back for a reason of its
		// own (its error's code, e.g. LOCK_UNAVAILABLE: the Registry could not answer): the task
		// was not done; it goes back to the queue.
		code := a.GetError().GetCode()
		if code == codeNotStarted {
			// Held ahead (the agent's prefetch) and given back before anything of it ran: back in
			// the queue without using one of the task's attempts.
			return r.putBack(a, w, code, "the agent gave the task back before starting it: "+a.GetError().GetMessage(), false)
		}
		if code != "" && code != "CANCELLED" {
			return r.requeue(a, w, code, "the agent gave the task back: "+a.GetError().GetMessage())
		}
		return r.requeue(a, w, "CANCELLED", "the agent stopped before finishing: "+a.GetError().GetMessage())
	}
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	if err := r.tx.SetTaskStatus(a.GetTaskId(), status); err != nil {
		return err
	}
	if err := r.log(entry(ev, a, msg, map[string]any{"commit": a.GetCommitSha(), "tries": float64(a.GetTries()),
		"files_changed": float64(len(a.GetFilesChanged()))})); err != nil {
		return err
	}
	if a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED && a.GetCommitSha() == "" {
		// Nothing of it to integrate: its dependents need not wait for its wave (eager.go).
		if err := r.satisfied(a.GetTaskId()); err != nil {
			return err
		}
	}
	if req.GetConsecutiveFailures() >= escalateAfterFailures {
		r.e.EscalatedTaskId, r.e.EscalatedInstanceId = a.GetTaskId(), a.GetInstanceId()
		why := fmt.Sprintf("agent %s is STUCK: %d consecutive failures (last on task %s)", a.GetInstanceId(), req.GetConsecutiveFailures(), a.GetTaskId())
		if err := r.log(entry(commonv1.EventType_EVENT_TYPE_AGENT_ESCALATED, a, why, map[string]any{"consecutive_failures": float64(req.GetConsecutiveFailures())})); err != nil {
			return err
		}
		if err := r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED, why); err != nil {
			return err
		}
		return r.putWave(w)
	}
	return r.taskEnded(a, w)
}

// codeNotStarted is the error code of a CANCELLED completion by which an agent gives back an
// assignment it held ahead of its current one (converge-agent --prefetch) and never started.
const codeNotStarted = "NOT_STARTED"

// requeue puts a held assignment back in the queue with attempt + 1, or fails it once it has
// used its attempts.
func (r *runner) requeue(a *store.Assignment, w *schedulerv1.Wave, code, why string) error {
	return r.putBack(a, w, code, why, true)
}

// putBack is requeue; attempted says the assignment's work ran (or may have run), which uses
// one of its attempts; one given back unstarted keeps its attempt number.
func (r *runner) putBack(a *store.Assignment, w *schedulerv1.Wave, code, why string, attempted bool) error {
	errCtx := &commonv1.ErrorContext{Code: code, Message: why, TaskId: a.GetTaskId(), Timestamp: r.now()}
	a.PreviousErrors = lastErrors(append(a.PreviousErrors, errCtx))
	if attempted && a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && a.GetAttempt() > r.e.GetOptions().GetMaxRetries() {
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED
		a.Result = schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED
		a.Error = &commonv1.ErrorContext{Code: code, Message: fmt.Sprintf("%s (attempt %d of %d)", why, a.GetAttempt(), r.e.GetOptions().GetMaxRetries()+1), TaskId: a.GetTaskId(), Timestamp: r.now()}
		a.CompleteTime = r.now()
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_FAILED); err != nil {
			return err
		}
		if err := r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_FAILED, a, fmt.Sprintf("Task %s: %s failed: %s", a.GetTaskId(), r.task(a.GetTaskId()).GetTitle(), a.GetError().GetMessage()), nil)); err != nil {
			return err
		}
		return r.taskEnded(a, w)
	}
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
	if attempted {
		a.Attempt++
	}
	a.Result, a.CompleteTime = 0, nil
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	if err := r.putWave(w); err != nil {
		return err
	}
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
		if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_PENDING); err != nil {
			return err
		}
	}
	return r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_REQUEUED, a, fmt.Sprintf("requeued (attempt %d): %s", a.GetAttempt(), why),
		map[string]any{"attempt": float64(a.GetAttempt()), "reason": why}))
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
