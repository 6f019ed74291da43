package scheduler

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/backoff"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A passing task confirms the provisional knowledge it was given (the design's "new items capped
// below the injection threshold until confirmed by a second principal or a passing task"). The
// agent logs the knowledge_item_ids of the items given to each try's prompt (a command task, which
// reads no prompt, is given none and logs none); when a task's assignment
// completes SUCCEEDED, the Scheduler — its own principal, an operator, never the recorder —
// confirms each provisional item its log names through the Knowledge service's ConfirmItem.
//
// Off CompleteTask's path: the completion's transaction only enqueues a row in the store's
// confirmation outbox (store.Confirmations); a worker started by Start takes the due rows, makes
// the Knowledge calls and deletes each row once done. A Knowledge service that is down or slow
// neither slows nor fails a completion: the row is tried again with a growing delay
// (platform/backoff, WithConfirmRetry) until Knowledge answers, and a Scheduler that dies while
// confirming leaves the row to be taken again once its lease (confirmLease) has passed, by this
// replica after a restart or by another one.
//
// Trust: the agent asserts which items it was given, so an item the completing agent's own
// principal recorded is never confirmed by its pass (an agent cannot launder its own item
// through a task it reports passed); items already unprovisional are left alone (a pass does not
// inflate a trusted item's confidence); a failed, skipped or cancelled task confirms nothing.

// maxConfirmedPerTask bounds the items one completion confirms (the agent's prompt takes a few
// per file).
const maxConfirmedPerTask = 64

// confirmTimeout bounds the Knowledge calls of one confirmation.
const confirmTimeout = 10 * time.Second

const (
	// confirmBatch is how many outbox rows the worker takes at once.
	confirmBatch = 32
	// confirmLease is how long a taken row is left to its taker before another may take it.
	confirmLease = 2 * time.Minute
	// confirmPoll is how often the worker looks for due rows without being woken (rows of
	// another replica's completions, rows whose retry has come).
	confirmPoll = 5 * time.Second
	// Default delays between two tries of one confirmation: doubling from 1 s to 5 min.
	defaultConfirmFirst = time.Second
	defaultConfirmMax   = 5 * time.Minute
)

// WithConfirmRetry sets the first and the longest delay between two tries of a knowledge
// confirmation whose Knowledge call failed (default 1 s doubling to 5 min).
func WithConfirmRetry(first, longest time.Duration) Option {
	return func(s *Server) { s.confirmRetry = backoffPolicy{first: first, max: max(first, longest)} }
}

// enqueueConfirmation leaves, in the completion's transaction, the outbox row of a task
// assignment that passed; principal is the completing agent's, events the completion's own.
//
// No row is left when the log cannot name an item: the assignment's first lease (attempt 1: every
// return to the queue counts an attempt) with no progress report applied (LastReportSeq is reset
// at each lease and set by every report that logs) has, under this task and instance, only the
// Scheduler's entries and the completion's events, so when none of those carries
// knowledge_item_ids the worker would read the log, find nothing and delete the row. A short
// task given no knowledge — every command task, and most others — thus costs the outbox nothing
// (an INSERT in the completion, a take and a delete by the worker).
//
// It answers whether it left a row (the worker is woken only then).
func (r *runner) enqueueConfirmation(a *store.Assignment, principal string, events []*schedulerv1.AgentEvent) (bool, error) {
	if r.s.knowledge == nil || a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK ||
		a.GetResult() != schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED {
		return false, nil
	}
	if a.GetAttempt() <= 1 && a.LastReportSeq == 0 && !slices.ContainsFunc(events, namesKnowledge) {
		return false, nil
	}
	if !readsPrompt(r.e.GetOptions()) {
		// A command reads no prompt, so it was given no knowledge, whatever an agent logs (an
		// agent from before this rule logged the ids of a command task's gotchas too).
		return false, nil
	}
	err := r.tx.EnqueueConfirmation(&store.Confirmation{AssignmentID: a.GetId(), TaskID: a.GetTaskId(),
		InstanceID: a.GetInstanceId(), Principal: principal})
	return err == nil, err
}

// readsPrompt reports whether the executor of o reads the agent's prompt (an agent CLI or an
// OpenAI-compatible model), where the task's gotchas are given; a command (the default) does not.
func readsPrompt(o *schedulerv1.ExecutionOptions) bool {
	return executorCapability(o) != executorCapabilityOf+"command"
}

// knowledgeItemIDs is the log context field in which an agent names the knowledge items it gave
// a try (an INFO entry of the try).
const knowledgeItemIDs = "knowledge_item_ids"

// namesKnowledge reports whether an agent's event may name knowledge items given to its try
// (confirmGiven reads knowledge_item_ids from the INFO entries).
func namesKnowledge(ev *schedulerv1.AgentEvent) bool {
	_, ok := ev.GetContext().GetFields()[knowledgeItemIDs]
	return ok
}

// kickConfirmations wakes the confirmation worker (a completion enqueued a row; a completion that
// enqueued none does not wake it: its take would be a write transaction that finds nothing).
func (s *Server) kickConfirmations() {
	select {
	case s.confirmKick <- struct{}{}:
	default:
	}
}

// confirmLoop is the confirmation worker: it drains the due rows, then waits for a completion,
// the earliest retry it scheduled, or confirmPoll.
func (s *Server) confirmLoop(ctx context.Context) {
	if s.knowledge == nil {
		return
	}
	for {
		wait := min(confirmPoll, s.confirmDue(ctx))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.confirmKick:
		case <-t.C:
		}
		t.Stop()
	}
}

// confirmDue confirms the rows due now and answers how soon the earliest retry it scheduled is
// due (confirmPoll when none).
func (s *Server) confirmDue(ctx context.Context) time.Duration {
	next := confirmPoll
	for ctx.Err() == nil {
		list, err := s.store.TakeConfirmations(ctx, confirmBatch, confirmLease)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("knowledge: take the confirmations due", "err", err)
			}
			return next
		}
		for _, c := range list {
			if err := s.confirmGiven(ctx, c); err != nil {
				delay := s.confirmDelay(c.Attempts + 1)
				next = min(next, delay)
				s.log.Warn("knowledge: confirm the items given to a passing task; will try again", "execution", c.ExecutionID,
					"task", c.TaskID, "attempt", c.Attempts+1, "in", delay, "err", err)
				if err := s.store.RetryConfirmation(ctx, c.AssignmentID, delay); err != nil && !errors.Is(err, store.ErrNotFound) {
					s.log.Warn("knowledge: put a confirmation back", "assignment", c.AssignmentID, "err", err)
				}
				continue
			}
			if err := s.store.DeleteConfirmation(ctx, c.AssignmentID); err != nil {
				s.log.Warn("knowledge: delete a done confirmation", "assignment", c.AssignmentID, "err", err)
			}
		}
		if len(list) < confirmBatch {
			return next
		}
	}
	return next
}

// confirmDelay is the delay before try attempts+1 of a confirmation.
func (s *Server) confirmDelay(attempts int32) time.Duration {
	p := s.confirmRetry
	if p.first <= 0 {
		p = backoffPolicy{first: defaultConfirmFirst, max: defaultConfirmMax}
	}
	b := &backoff.Backoff{Initial: p.first, Max: p.max}
	d := b.Next()
	for range min(attempts-1, 64) {
		d = b.Next()
	}
	return d
}

// confirmGiven confirms the provisional knowledge items the log of c's try names. It answers an
// error when the confirmation should be tried again (the store or Knowledge could not answer);
// what asking again would not change (the run is gone, an item is gone or refused) is done.
func (s *Server) confirmGiven(ctx context.Context, c *store.Confirmation) error {
	ctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	entries, _, _, err := s.store.ReadLog(ctx, store.LogQuery{ExecutionID: c.ExecutionID, TaskID: c.TaskID, InstanceID: c.InstanceID,
		EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_INFO}, Limit: 500, Tail: true})
	if errors.Is(err, store.ErrNotFound) {
		return nil // the run was deleted
	}
	if err != nil {
		return err
	}
	var ids []string
	for _, e := range entries {
		for _, v := range e.GetContext().GetFields()[knowledgeItemIDs].GetListValue().GetValues() {
			if id := v.GetStringValue(); id != "" && !slices.Contains(ids, id) && len(ids) < maxConfirmedPerTask {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		got, err := s.knowledge.GetItem(ctx, &knowledgev1.GetItemRequest{Id: id})
		if retryableKnowledge(err) {
			return err
		}
		if err != nil {
			s.log.Debug("knowledge: item given to a passing task", "item", id, "err", err)
			continue
		}
		it := got.GetItem()
		if !it.GetProvisional() || it.GetRecordedBy() == c.Principal {
			continue
		}
		_, err = s.knowledge.ConfirmItem(ctx, &knowledgev1.ConfirmItemRequest{Id: id,
			Evidence: "task " + c.TaskID + " of execution " + c.ExecutionID + " passed with it in its prompt (assignment " + c.AssignmentID + ")"})
		if retryableKnowledge(err) {
			return err // the items confirmed already are left alone next time (no longer provisional)
		}
		if err != nil {
			s.log.Warn("knowledge: confirm an item given to a passing task", "item", id, "err", err)
		}
	}
	return nil
}

// retryableKnowledge reports whether a Knowledge error may pass on its own (the service is down,
// slow or busy); every other answer is Knowledge refusing the request.
func retryableKnowledge(err error) bool {
	if err == nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.ResourceExhausted, codes.Canceled:
		return true
	}
	return false
}
