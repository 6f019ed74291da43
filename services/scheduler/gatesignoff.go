package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// A milestone or phase gate's human sign-off (issue 15 part 9; seed 004: the phase gate check and
// its Phase Gate Log of date, result and notes). A gate task with requires_signoff (an execution
// plan's `**Sign-off:** required`) runs its command like any gate; once its wave is integrated
// and the gate COMPLETED, the execution does not open the next wave: it is PAUSED with
// awaiting_signoff_gate set and an EXECUTION_PAUSED entry naming the gate. SignOffGate records a
// person's decision in gate_signoffs: PASS runs the execution again and opens the next wave (or
// hands it to Verify Done); FAIL ends it FAILED naming the gate. All of it is the execution's
// row, so a Scheduler restart (or another replica) finds the run waiting where it was.

// signoffGate is the gate of wave w that waits for a person's sign-off: a gate that requires
// one, COMPLETED in this wave, without a PASS recorded. nil when there is none. A list without
// such a gate costs no read (the transaction's waves carry no placements: the wave's completed
// assignments say what ran in it).
func (r *runner) signoffGate(w *schedulerv1.Wave) (*commonv1.Task, error) {
	if !slices.ContainsFunc(r.s.signoffGates(r.tl), func(id string) bool { return !r.signedOff(id) }) {
		return nil, nil
	}
	done, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), WaveNumber: w.GetWaveNumber(),
		Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED}})
	if err != nil {
		return nil, err
	}
	for _, a := range done {
		if a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			continue
		}
		if t := r.task(a.GetTaskId()); tasklist.IsGate(t) && t.GetRequiresSignoff() && !r.signedOff(t.GetId()) {
			return t, nil
		}
	}
	return nil, nil
}

// signedOff reports whether gate id has a PASS sign-off in this execution.
func (r *runner) signedOff(id string) bool {
	for _, so := range r.e.GetGateSignoffs() {
		if so.GetGateId() == id && so.GetDecision() == schedulerv1.GateDecision_GATE_DECISION_PASS {
			return true
		}
	}
	return false
}

// awaitSignoff pauses the execution at gate t of wave w until SignOffGate decides.
func (r *runner) awaitSignoff(t *commonv1.Task, w *schedulerv1.Wave) error {
	r.e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED
	r.e.AwaitingSignoffGate = t.GetId()
	r.e.StatusMessage = fmt.Sprintf("awaiting the sign-off of gate %s (%s): its check passed; sign it off with converge signoff %s %s --pass|--fail --note TEXT",
		t.GetId(), t.GetTitle(), r.e.GetId(), t.GetId())
	r.changed = true
	return r.log(waveEntry(commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED, w.GetWaveNumber(), r.e.GetStatusMessage(),
		map[string]any{"gate": t.GetId(), "awaiting": "signoff", "wave_number": float64(w.GetWaveNumber())}))
}

// SignOffGate records a person's decision at the gate the execution waits at.
func (s *Server) SignOffGate(ctx context.Context, req *schedulerv1.SignOffGateRequest) (*schedulerv1.SignOffGateResponse, error) {
	who := signoffWho(ctx, req.GetWho())
	var so *schedulerv1.GateSignOff
	e, err := s.control(ctx, req.GetExecutionId(), func(r *runner) error {
		id := req.GetGateId()
		t := r.task(id)
		if t == nil || !tasklist.IsGate(t) {
			return fmt.Errorf("gate %s of execution %s (its task list has no such gate): %w", id, r.e.GetId(), store.ErrNotFound)
		}
		if ended(r.e) {
			return failedPrecondition("execution %s ended %s: its gates take no sign-off any more", r.e.GetId(), statusName(r.e))
		}
		switch waiting := r.e.GetAwaitingSignoffGate(); {
		case waiting == id:
		case waiting != "":
			return failedPrecondition("execution %s awaits the sign-off of gate %s, not of %s", r.e.GetId(), waiting, id)
		case !t.GetRequiresSignoff():
			return failedPrecondition("gate %s does not require a sign-off: it passes when its check passes", id)
		case r.signedOff(id):
			return failedPrecondition("gate %s of execution %s is signed off already", id, r.e.GetId())
		default:
			return failedPrecondition("execution %s does not await the sign-off of gate %s yet: its check has not passed", r.e.GetId(), id)
		}
		w, err := r.wave(r.e.GetCurrentWave())
		if err != nil {
			return err
		}
		so = &schedulerv1.GateSignOff{GateId: id, Decision: req.GetDecision(), Who: who, Note: req.GetNote(), Time: r.now()}
		r.e.GateSignoffs = append(r.e.GateSignoffs, so)
		r.e.AwaitingSignoffGate = ""
		r.changed = true
		said := ""
		if n := strings.TrimSpace(req.GetNote()); n != "" {
			said = ": " + n
		}
		if req.GetDecision() == schedulerv1.GateDecision_GATE_DECISION_FAIL {
			return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
				fmt.Sprintf("gate %s (%s) signed off FAIL by %s%s", id, t.GetTitle(), who, said))
		}
		r.e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
		r.e.StatusMessage = ""
		if err := r.log(waveEntry(commonv1.EventType_EVENT_TYPE_EXECUTION_RESUMED, w.GetWaveNumber(),
			fmt.Sprintf("resumed: gate %s (%s) signed off PASS by %s%s", id, t.GetTitle(), who, said),
			map[string]any{"gate": id, "decision": "PASS", "who": who})); err != nil {
			return err
		}
		return r.afterWave(w)
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.SignOffGateResponse{Signoff: so, Execution: e}, nil
}

// signoffWho is who signed a gate off: the authenticated principal, with the request's who in
// parentheses when it names someone else; the request's who (or "anonymous") on a server that
// authenticates nobody.
func signoffWho(ctx context.Context, given string) string {
	p, ok := auth.FromContext(ctx)
	switch {
	case !ok && given == "":
		return "anonymous"
	case !ok:
		return given
	case given == "" || given == p.Name:
		return p.Name
	}
	return p.Name + " (" + given + ")"
}
