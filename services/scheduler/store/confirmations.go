package store

import (
	"context"
	"slices"
	"strings"
	"time"
)

// Knowledge confirmations: the outbox between CompleteTask and the Knowledge service. A task
// assignment that completes SUCCEEDED enqueues one in its completion's transaction
// ([ExecTx.EnqueueConfirmation]); the Scheduler's confirmation worker takes the due ones
// ([Confirmations.TakeConfirmations]), confirms the provisional items the task was given, and
// deletes each once done ([Confirmations.DeleteConfirmation]) or puts it back for a later try
// ([Confirmations.RetryConfirmation]). Nothing is lost when a Scheduler dies between taking and
// deleting: the row is taken again once its lease has run out.

// Confirmation is one completed assignment whose knowledge items wait to be confirmed.
type Confirmation struct {
	// AssignmentID is the completed assignment (the key: one confirmation per assignment).
	AssignmentID string
	// ExecutionID, TaskID and InstanceID say whose log names the items given to the task.
	ExecutionID, TaskID, InstanceID string
	// Principal is the completing agent's principal: its own items are never confirmed.
	Principal string
	// Attempts counts the tries that failed so far.
	Attempts int32
	// NextAttempt is when the row may be taken (next); CreateTime when it was enqueued (store
	// times).
	NextAttempt, CreateTime time.Time
}

// Confirmations is the part of [Store] that keeps the confirmation outbox.
type Confirmations interface {
	// TakeConfirmations returns up to limit confirmations whose next attempt is at or before the
	// store's now, chosen oldest next attempt first (then by assignment id) and returned in
	// assignment id order, and moves each one's next
	// attempt to now + lease in the same statement or transaction, so that no other taker (another
	// replica) gets it while it is being worked on. A taker that dies leaves it to be taken again
	// once the lease has passed.
	TakeConfirmations(ctx context.Context, limit int, lease time.Duration) ([]*Confirmation, error)
	// DeleteConfirmation removes a confirmation that is done; deleting one that is gone is not an
	// error.
	DeleteConfirmation(ctx context.Context, assignmentID string) error
	// RetryConfirmation counts a failed try of a confirmation and makes it due again after
	// after (from the store's now). ErrNotFound when it is gone.
	RetryConfirmation(ctx context.Context, assignmentID string, after time.Duration) error
	// ListConfirmations returns up to limit confirmations, due or not, in assignment id order,
	// changing nothing (what is waiting, and how many tries each has had).
	ListConfirmations(ctx context.Context, limit int) ([]*Confirmation, error)
}

// SortConfirmations orders confirmations as TakeConfirmations returns them, by assignment id (the
// backends' UPDATE ... RETURNING keeps no order).
func SortConfirmations(list []*Confirmation) {
	slices.SortFunc(list, func(a, b *Confirmation) int { return strings.Compare(a.AssignmentID, b.AssignmentID) })
}
