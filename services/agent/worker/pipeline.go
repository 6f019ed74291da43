package worker

import (
	"context"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The worker's sequence of assignments. Each completion also claims the agent's next assignment
// (claim_next, fused complete-and-claim). With Config.Prefetch the worker holds one assignment
// ahead of the one it runs: when the work of the current one ends, the next starts at once and
// the current one's completion (claiming the one after) goes to the Scheduler while the next
// runs, so the completion's round trip is off the agent's path (issue 17: on Postgres it was more
// than half of a short task's wall time in the agent). An assignment held ahead is leased: its
// lease is kept from when it arrives, and it is given back unstarted (NOT_STARTED, which uses
// none of its attempts) when the worker drains or stops first. Prefetch trades fairness for
// throughput: the assignment held ahead waits for the current one to end even when another agent
// is idle, which suits many short tasks, not a few long ones.

// aheadMaxSkip bounds how many assignments in a row the worker runs without trying to claim one
// ahead after such claims found nothing (backoff: a chain of dependent tasks never has one ready).
const aheadMaxSkip = 16

// ahead is the assignment coming after the current one: a claim or a completion in flight, whose
// answer is held (its lease kept) as soon as it arrives.
type ahead struct {
	done chan struct{}
	l    *lease
	bare bool // a ClaimTask of its own, not a completion's claim_next
}

// goAhead runs fn (a claim or a completion) beside the current work and holds what it answers.
func (w *Worker) goAhead(ctx context.Context, bare bool, fn func() *schedulerv1.ClaimedAssignment) *ahead {
	a := &ahead{done: make(chan struct{}), bare: bare}
	go func() {
		defer close(a.done)
		if ca := fn(); ca != nil {
			a.l = w.hold(ctx, ca)
		}
	}()
	return a
}

// wait answers the held assignment, nil when none came (or a is nil).
func (a *ahead) wait() *lease {
	if a == nil {
		return nil
	}
	<-a.done
	return a.l
}

// mayClaim says whether the worker may take (or start) more work: not stopping, draining or
// replaced.
func (w *Worker) mayClaim(ctx context.Context) bool {
	return ctx.Err() == nil && !w.Draining() && w.replacedErr() == nil
}

// aheadRequest is the claim of an assignment to hold ahead: tasks only. A wave's integration is
// the run's barrier: held behind a long task it would stop every agent, so it is only ever claimed
// to start at once.
func (w *Worker) aheadRequest() *schedulerv1.ClaimTaskRequest {
	r := w.claimRequest(0)
	r.Kinds = []schedulerv1.AssignmentKind{schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK}
	return r
}

// claimAhead claims, without waiting, an assignment to hold ahead of the current one.
func (w *Worker) claimAhead(ctx context.Context) *schedulerv1.ClaimedAssignment {
	res, err := w.cfg.Scheduler.ClaimTask(ctx, w.aheadRequest())
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug("claim ahead failed; the next claim follows the completion", "err", err)
		}
		return nil
	}
	return res.GetAssignment()
}

// work runs assignments, from first, for as long as each completion (or, with Config.Prefetch,
// the claim ahead) hands over the next; it returns once the worker holds none.
func (w *Worker) work(ctx context.Context, first *schedulerv1.ClaimedAssignment) {
	cur, fused := w.hold(ctx, first), false
	var next *ahead // what comes after cur
	skip, misses := 0, 0
	for cur != nil {
		if w.replacedErr() != nil {
			// Nothing held is this process's any more: the newer session's Registry record took
			// it back. No completion, no give-back.
			cur.end()
			if l := next.wait(); l != nil {
				l.end()
			}
			return
		}
		if w.cfg.Prefetch && next == nil && w.mayClaim(ctx) {
			if skip > 0 {
				skip--
			} else {
				next = w.goAhead(ctx, true, func() *schedulerv1.ClaimedAssignment { return w.claimAhead(ctx) })
			}
		}
		req := w.runAssignment(ctx, cur, fused)
		var after *lease
		if next != nil {
			after = next.wait()
			if next.bare {
				if after == nil {
					misses++
					skip = min(1<<min(misses, 5), aheadMaxSkip)
				} else {
					misses = 0
				}
			}
			next = nil
		}
		if after != nil && !w.mayClaim(ctx) {
			w.giveBack(ctx, after, "the worker is draining or stopping")
			after = nil
		}
		if req != nil {
			if w.mayClaimAfter(ctx, cur, req) {
				req.ClaimNext = w.claimRequest(0)
				if after != nil {
					req.ClaimNext = w.aheadRequest() // what it claims waits for after
				}
			}
			if after != nil {
				// The next runs now; this completion (and the claim of the one after) goes beside it.
				done := cur
				next = w.goAhead(ctx, false, func() *schedulerv1.ClaimedAssignment { return w.complete(ctx, done, req) })
			} else if ca := w.complete(ctx, cur, req); ca != nil {
				after = w.hold(ctx, ca)
			}
		}
		if after == nil {
			w.setState(func(s *Status) {
				s.State = commonv1.AgentStatus_AGENT_STATUS_IDLE
				s.Assignment, s.Task, s.ProgressPercent, s.ProgressMessage = nil, nil, 0, ""
			})
			w.kick() // the Registry learns at once that the agent is idle again
		}
		cur, fused = after, true
	}
}

// giveBack returns held assignment l, whose work never started, to the Scheduler: CANCELLED with
// NOT_STARTED, requeued without using an attempt. A lost lease or a replaced session has nothing
// to give back.
func (w *Worker) giveBack(ctx context.Context, l *lease, why string) {
	l.end()
	l.mu.Lock()
	lost := l.lost
	l.mu.Unlock()
	if lost != nil || w.replacedErr() != nil {
		return
	}
	a := l.ca.GetAssignment()
	w.complete(ctx, l, &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: w.cfg.InstanceID,
		FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED,
		Error:  &commonv1.ErrorContext{Code: codeNotStarted, Message: why, TaskId: a.GetTaskId(), Timestamp: now()},
		Events: l.takeEvents()})
}

// codeNotStarted is the error code of giveBack (the Scheduler's requeue without an attempt).
const codeNotStarted = "NOT_STARTED"
