package scheduler

import (
	"context"
	"fmt"
	"time"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The lease: how long it lasts, and the checks every call of a lease holder passes (fencing
// token, holder, deadline) before ReportProgress, RecordCheckpoint or CompleteTask act.

// leaseHeartbeats: a lease lasts this many heartbeat intervals.
const leaseHeartbeats = 3

// leaseDuration is how long one lease (or one report) keeps an assignment.
func leaseDuration(o *schedulerv1.ExecutionOptions) time.Duration {
	return leaseHeartbeats * o.GetAgentConfig().GetHeartbeatInterval().AsDuration()
}

// holder checks that the caller still holds assignment id with token: Aborted otherwise.
func (r *runner) holder(ctx context.Context, id, instance string, token int64) (*store.Assignment, error) {
	a, err := r.tx.Assignment(id)
	if err != nil {
		return nil, err
	}
	// Whose it is comes first: another principal learns nothing of the lease's token.
	if err := checkAssignment(ctx, a); err != nil {
		return nil, err
	}
	switch {
	case token < a.GetFencingToken():
		return nil, aborted("fencing token %d of assignment %s is stale: it was leased again with token %d", token, id, a.GetFencingToken())
	case token > a.GetFencingToken():
		return nil, aborted("fencing token %d of assignment %s was never granted (current %d)", token, id, a.GetFencingToken())
	case a.GetInstanceId() != instance:
		return nil, aborted("assignment %s is held by %s, not %s", id, a.GetInstanceId(), instance)
	}
	return a, nil
}

// live checks that a held assignment's lease has not run out.
func (r *runner) live(a *store.Assignment) error {
	if !held(a.GetStatus()) {
		return aborted("assignment %s is %s: its lease ended", a.GetId(), a.GetStatus())
	}
	if exp := a.GetLeaseExpireTime().AsTime(); !r.tx.Now().Before(exp) {
		return aborted("the lease of assignment %s expired at %s", a.GetId(), exp.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// directive tells a lease holder whether to go on: CANCEL once the run ended (cancelled, failed,
// ...: stop now), DRAIN while it is paused (finish this assignment; the run hands out nothing
// more until it is resumed, and the agent goes on serving other runs), else CONTINUE.
func (r *runner) directive(a *store.Assignment) (schedulerv1.Directive, string) {
	if ended(r.e) {
		return schedulerv1.Directive_DIRECTIVE_CANCEL, fmt.Sprintf("execution %s: %s", statusName(r.e), r.e.GetStatusMessage())
	}
	if r.e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED {
		return schedulerv1.Directive_DIRECTIVE_DRAIN, fmt.Sprintf("execution %s paused: finish this assignment; the run hands out no more work until it is resumed%s",
			r.e.GetId(), prefixed(": ", r.e.GetStatusMessage()))
	}
	return schedulerv1.Directive_DIRECTIVE_CONTINUE, ""
}

// prefixed is p+s, or "" when s is empty.
func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}
