package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The claim path: ClaimTask finds a claimable execution whose assignments the agent can do
// (capability matching), leases the next pending assignment of the open wave and answers the
// ClaimedAssignment the agent works from.

const (
	integrationCapability = "integration"
	claimPollInterval     = 100 * time.Millisecond
)

// errNothing: an execution had nothing to claim after all (another claim was faster).
var errNothing = errors.New("nothing to claim")

// ClaimTask leases the next ready assignment the agent can do, waiting up to req.wait for one;
// a claim filtered on an execution this replica knows has ended answers at once, with no
// assignment.
func (s *Server) ClaimTask(ctx context.Context, req *schedulerv1.ClaimTaskRequest) (*schedulerv1.ClaimTaskResponse, error) {
	wait := req.GetWait().AsDuration()
	deadline := time.Now().Add(wait)
	if err := s.claimAdmitted(ctx, req); err != nil {
		return nil, toStatus(err)
	}
	for {
		woken := s.wake.wait()
		claimed, err := s.claimOnce(ctx, req)
		if err != nil {
			return nil, toStatus(err)
		}
		if claimed != nil {
			return &schedulerv1.ClaimTaskResponse{Assignment: claimed}, nil
		}
		left := time.Until(deadline)
		if left <= 0 || (req.GetExecutionId() != "" && s.wake.hasEnded(req.GetExecutionId())) {
			// Nothing came within wait, or the execution the claim is filtered on has ended
			// (before the claim or while it waited): no work will come for it.
			return &schedulerv1.ClaimTaskResponse{}, nil
		}
		// Changes wake the poll at once: this replica's directly, other replicas' through the
		// store's notifications (Postgres LISTEN/NOTIFY); polling is the fallback.
		t := time.NewTimer(min(left, claimPollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, toStatus(ctx.Err())
		case <-woken:
		case <-t.C:
		}
		t.Stop()
	}
}

// claimAdmitted checks a claim before anything is leased (ClaimTask, CompleteTask's claim_next):
// the caller may act for the instance, the Registry knows it live, and a new session of the
// instance (its process restarted) takes back what the old one held.
func (s *Server) claimAdmitted(ctx context.Context, req *schedulerv1.ClaimTaskRequest) error {
	if err := s.checkInstance(ctx, req.GetInstanceId()); err != nil {
		return err
	}
	if err := s.admit(ctx, req.GetInstanceId()); err != nil {
		return err
	}
	return s.replaceSessions(ctx, req.GetInstanceId(), req.GetSessionId())
}

// canDo reports whether an agent with caps may take assignments of kind k of execution e.
func canDo(e *schedulerv1.Execution, caps []string, k schedulerv1.AssignmentKind) bool {
	if k == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
		return slices.Contains(caps, integrationCapability)
	}
	if !slices.Contains(caps, executorCapability(e.GetOptions())) {
		return false
	}
	for _, c := range e.GetOptions().GetRequiredCapabilities() {
		if !slices.Contains(caps, c) {
			return false
		}
	}
	return true
}

// claimKinds are the kinds of assignment of e the claim may take.
func claimKinds(e *schedulerv1.Execution, req *schedulerv1.ClaimTaskRequest) []schedulerv1.AssignmentKind {
	var kinds []schedulerv1.AssignmentKind
	for _, k := range []schedulerv1.AssignmentKind{schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION} {
		if (len(req.GetKinds()) == 0 || slices.Contains(req.GetKinds(), k)) && canDo(e, req.GetCapabilities(), k) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

func (s *Server) claimOnce(ctx context.Context, req *schedulerv1.ClaimTaskRequest) (*schedulerv1.ClaimedAssignment, error) {
	candidates, err := s.store.ClaimableExecutions(ctx, 64)
	if err != nil {
		return nil, err
	}
	for _, e := range candidates {
		if req.GetExecutionId() != "" && e.GetId() != req.GetExecutionId() {
			continue
		}
		kinds := claimKinds(e, req)
		if len(kinds) == 0 {
			continue
		}
		var claimed *schedulerv1.ClaimedAssignment
		err := s.updateGrouped(ctx, e.GetId(), func(r *runner) error {
			var err error
			claimed, err = r.lease(req.GetInstanceId(), req.GetSessionId(), auth.Name(ctx), kinds)
			return err
		})
		if errors.Is(err, errNothing) || errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return claimed, nil
	}
	return nil, nil
}

// lease hands the next pending assignment of the open wave to instance (its process's session),
// claimed by principal ("" when the server authenticates nobody).
func (r *runner) lease(instance, session, principal string, kinds []schedulerv1.AssignmentKind) (*schedulerv1.ClaimedAssignment, error) {
	if r.e.GetStatus() != schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING || r.e.GetCurrentWave() == 0 {
		return nil, errNothing
	}
	a, err := r.tx.NextPending(r.e.GetCurrentWave(), kinds)
	if err != nil {
		return nil, err
	}
	eager := false
	if a == nil {
		// Nothing left in the open wave: a later wave's task that may start now (eager.go).
		if a, err = r.nextEager(kinds); err != nil {
			return nil, err
		}
		eager = a != nil
	}
	if a == nil {
		return nil, errNothing
	}
	w, err := r.wave(a.GetWaveNumber())
	if err != nil {
		return nil, err
	}
	base := w.GetBaseCommit()
	if eager {
		// It starts from the last integration: the open wave's base.
		open, err := r.wave(r.e.GetCurrentWave())
		if err != nil {
			return nil, err
		}
		base = open.GetBaseCommit()
	}
	d := leaseDuration(r.e.GetOptions())
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED
	a.InstanceId = instance
	a.SessionID = session
	a.Principal = principal
	a.FencingToken++
	a.LeaseExpireTime = timestamppb.New(r.tx.Now().Add(d))
	a.AssignTime = r.now()
	a.LastReportSeq = 0
	a.Tries = 0
	a.ProgressPercent, a.ProgressMessage, a.LastReportTime = 0, "", nil
	if err := r.tx.PutAssignment(a); err != nil {
		return nil, err
	}
	// The holder's reports and completion name the assignment: no store read to find its run.
	r.s.owners.put(a.GetId(), r.e.GetId())
	w.ActiveAgents++
	if err := r.putWave(w); err != nil {
		return nil, err
	}
	what := "integration of wave " + fmt.Sprint(a.GetWaveNumber())
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
		r.e.RunningTasks++
		r.changed = true
		what = fmt.Sprintf("Task %s: %s", a.GetTaskId(), r.task(a.GetTaskId()).GetTitle())
		if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS); err != nil {
			return nil, err
		}
	}
	data := map[string]any{"attempt": float64(a.GetAttempt()), "fencing_token": float64(a.GetFencingToken()), "assignment_id": a.GetId()}
	if eager {
		what += fmt.Sprintf(" (early: wave %d is open)", r.e.GetCurrentWave())
		data["eager"], data["open_wave"] = true, float64(r.e.GetCurrentWave())
	}
	if err := r.log(entry(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, a,
		fmt.Sprintf("%s leased to %s (attempt %d, token %d, lease %s)", what, instance, a.GetAttempt(), a.GetFencingToken(), d), data)); err != nil {
		return nil, err
	}
	return r.claimed(a, base, d, what)
}

// claimed is what the agent gets for a lease.
func (r *runner) claimed(a *store.Assignment, base string, d time.Duration, _ string) (*schedulerv1.ClaimedAssignment, error) {
	c := &schedulerv1.ClaimedAssignment{
		Assignment:        a.Assignment,
		TaskListId:        r.tl.ID,
		TaskListName:      r.tl.Spec.GetName(),
		Repository:        r.e.GetRepository(),
		BaseCommit:        base,
		RunBranch:         r.e.GetRunBranch(),
		Options:           r.e.GetOptions(),
		Context:           r.tl.Spec.GetContext(),
		Validation:        r.tl.Spec.GetValidation(),
		Merges:            a.Merges,
		FinalIntegration:  a.FinalIntegration,
		PreviousErrors:    a.PreviousErrors,
		HeartbeatInterval: r.e.GetOptions().GetAgentConfig().GetHeartbeatInterval(),
		LeaseDuration:     durationpb.New(d),
	}
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
		c.Task = r.task(a.GetTaskId())
		if r.e.GetRepository() != nil {
			c.TaskRef = taskRef(r.e.GetId(), a.GetTaskId())
		}
	}
	return c, nil
}

// taskRef is the ref a task's commit is pushed to.
func taskRef(execution, task string) string { return "refs/converge/" + execution + "/" + task }
