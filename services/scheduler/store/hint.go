package store

import "context"

type assignmentHintKey struct{}

// WithAssignmentHint tells UpdateExecution, through its context, that its function starts by
// reading assignment id (a lease holder's report or completion): a backend may read the
// assignment and its wave in the same round trip as the execution's lock, and answer the
// transaction's first Assignment(id) and Wave of that wave from them. Only a hint: the reads
// answer the same either way.
func WithAssignmentHint(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, assignmentHintKey{}, id)
}

// AssignmentHint is the assignment named by [WithAssignmentHint], or "".
func AssignmentHint(ctx context.Context) string {
	id, _ := ctx.Value(assignmentHintKey{}).(string)
	return id
}

type nextPendingHintKey struct{}

// WithNextPendingHint tells UpdateExecution, through its context, that its function will also
// ask NextPending of the hinted assignment's wave ([WithAssignmentHint]; a completion that leases
// the agent's next assignment in the same transaction): a backend may read it with the lock too.
// Only a hint: NextPending answers the same either way, the transaction's own writes included.
func WithNextPendingHint(ctx context.Context) context.Context {
	return context.WithValue(ctx, nextPendingHintKey{}, true)
}

// NextPendingHint reports whether [WithNextPendingHint] is set.
func NextPendingHint(ctx context.Context) bool {
	on, _ := ctx.Value(nextPendingHintKey{}).(bool)
	return on
}
