package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The engine: every state change of an execution is a function of the execution's rows, run
// inside store.UpdateExecution (one transaction holding the execution's write lock), so any
// number of Scheduler replicas can serve claims, progress and completions at once. The rules:
//
//   - A wave is RUNNING while its task assignments are open; an assignment is leased by ClaimTask
//     (fencing token + 1, lease deadline = store now + lease), kept by ReportProgress and ended by
//     CompleteTask with the current token before the deadline, or requeued (attempt + 1) by the
//     reaper once the deadline passed.
//   - When every task of a wave is terminal, the wave's integration assignment merges the completed
//     task commits onto the run branch and runs the codebase validation (the last wave's: every
//     triggered level); its commit is the next wave's base. A wave with nothing to merge and
//     nothing to validate completes at once.
//   - A task whose dependency did not complete is SKIPPED when its wave starts.
//   - Stop rules end the run FAILED: a failed milestone or phase gate (a GATE- task, seed 004),
//     more than max_failed_tasks failed tasks, a failed task of a
//     critical phase, a failed integration or validation level. Three consecutive failures of an
//     agent, or a spent budget, end it ESCALATED.
//   - After the last wave, the leader replica's driver asks the Verifier (Verify Done); only a
//     CONVERGED verdict makes the run COMPLETED with outcome CONVERGED.

// entry builds a log entry.
func entry(t commonv1.EventType, a *store.Assignment, msg string, ctx map[string]any) *commonv1.LogEntry {
	e := &commonv1.LogEntry{EventType: t, Message: msg}
	if a != nil {
		e.TaskId = a.GetTaskId()
		e.InstanceId = a.GetInstanceId()
		e.WaveNumber = a.GetWaveNumber()
	}
	if len(ctx) > 0 {
		if st, err := structpb.NewStruct(ctx); err == nil {
			e.Context = st
		}
	}
	return e
}

// waveEntry builds a log entry of wave n (not of one assignment).
func waveEntry(t commonv1.EventType, n int32, msg string, ctx map[string]any) *commonv1.LogEntry {
	e := entry(t, nil, msg, ctx)
	e.WaveNumber = n
	return e
}

// ended reports whether the execution has ended.
func ended(e *schedulerv1.Execution) bool {
	switch e.GetStatus() {
	case schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED,
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return true
	}
	return false
}

// terminal reports whether an assignment status is final.
func terminal(st schedulerv1.AssignmentStatus) bool {
	switch st {
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED,
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED,
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED,
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED:
		return true
	}
	return false
}

// held reports whether an assignment status is leased.
func held(st schedulerv1.AssignmentStatus) bool {
	return st == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED ||
		st == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING
}

// runner changes one execution inside one transaction.
type runner struct {
	s   *Server
	tx  store.ExecTx
	e   *schedulerv1.Execution
	tl  *store.TaskList
	idx map[string]int
	// waves, read once per transaction when needed; one, the waves read one by one before.
	waves []*schedulerv1.Wave
	one   map[int32]*schedulerv1.Wave
	// changed: e must be stored; notify: waiters should wake.
	changed bool
	// dirty are the waves of waves/one changed by this transaction, written once each at its
	// end (putWave): a completion and the fused claim after it change the same wave.
	dirty []*schedulerv1.Wave
	// verifyDue: this transaction integrated the last wave; once it commits, the driver is kicked
	// to start Verify Done at once instead of at its next round.
	verifyDue bool
}

// update runs fn on the execution id in one transaction and wakes this replica's waiters. The
// task list is read before the transaction (never while it holds the execution's lock and a
// pooled connection).
func (s *Server) update(ctx context.Context, id string, fn func(r *runner) error) error {
	tl, idx, err := s.listOfExecution(ctx, id)
	if err != nil {
		return err
	}
	return s.updateWith(ctx, id, tl, idx, fn)
}

// listOfExecution reads the task list of execution id (cached) and its task index.
func (s *Server) listOfExecution(ctx context.Context, id string) (*store.TaskList, map[string]int, error) {
	listID, err := s.listOf(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return s.taskList(ctx, listID)
}

// updateWith is update with the execution's task list already read.
func (s *Server) updateWith(ctx context.Context, id string, tl *store.TaskList, idx map[string]int, fn func(r *runner) error) error {
	var out ran
	err := s.store.UpdateExecution(ctx, id, func(tx store.ExecTx) error {
		var err error
		out, err = s.run(tx, tl, idx, fn)
		return err
	})
	s.afterCommit(id, err, out)
	return err
}

// afterCommit wakes this replica's waiters once a transaction of execution id ended with err,
// after ran out, and kicks the driver when Verify Done is due. A transaction that failed, or in
// which no request applied, changed nothing and wakes nobody: a long-polling claim that found
// nothing for it (claim.go) would otherwise wake itself and every other waiter, and all of them
// try again at once, for as long as they wait (TestAClaimThatFindsNothingForItDoesNotWakeItself).
// A commit whose outcome is unknown (the connection lost during COMMIT) wakes nobody here; if it
// did commit, other replicas hear of it (Postgres NOTIFY) and this one's waiters find it at their
// next poll (the store does not announce this replica's own commits back to it: listen.go).
func (s *Server) afterCommit(id string, err error, out ran) {
	if err != nil || !out.applied {
		return
	}
	if out.ended {
		// Claims filtered on it answer at once (claim.go).
		s.wake.end(id)
	}
	s.wake.broadcast()
	if err == nil && out.verifyDue {
		s.kickDriver()
	}
}

// ran is what a committed transaction asks of this replica: applied, a request's function
// succeeded (what it changed is committed with the transaction); verifyDue, the driver should
// start Verify Done; ended, the execution ended.
type ran struct{ applied, verifyDue, ended bool }

// merge is what two requests of one transaction ask.
func (a ran) merge(b ran) ran {
	return ran{a.applied || b.applied, a.verifyDue || b.verifyDue, a.ended || b.ended}
}

// run runs fn with a runner on tx and stores what it changed.
func (s *Server) run(tx store.ExecTx, tl *store.TaskList, idx map[string]int, fn func(r *runner) error) (ran, error) {
	r := &runner{s: s, tx: tx, e: tx.Execution(), tl: tl, idx: idx}
	if err := fn(r); err != nil {
		return ran{}, err
	}
	out := ran{applied: true, verifyDue: r.verifyDue, ended: ended(r.e)}
	for _, w := range r.dirty {
		if err := tx.PutWave(w); err != nil {
			return ran{}, err
		}
	}
	if r.changed {
		if err := tx.PutExecution(r.e); err != nil {
			return ran{}, err
		}
	}
	return out, nil
}

func (r *runner) task(id string) *commonv1.Task {
	if i, ok := r.idx[id]; ok {
		return r.tl.Spec.GetTasks()[i]
	}
	return nil
}

func (r *runner) now() *timestamppb.Timestamp { return timestamppb.New(r.tx.Now()) }

func (r *runner) log(entries ...*commonv1.LogEntry) error { return r.tx.Append(entries...) }

// allWaves reads every wave once per transaction (a wave read before by wave keeps its copy, so
// no change to it is lost).
func (r *runner) allWaves() ([]*schedulerv1.Wave, error) {
	if r.waves == nil {
		ws, err := r.tx.Waves()
		if err != nil {
			return nil, err
		}
		for i, w := range ws {
			if seen, ok := r.one[w.GetWaveNumber()]; ok {
				ws[i] = seen
			}
		}
		r.waves = ws
	}
	return r.waves, nil
}

// wave reads wave n once per transaction: one row, not the execution's every wave (a chain of n
// tasks has n waves; a claim or a completion touches one).
func (r *runner) wave(n int32) (*schedulerv1.Wave, error) {
	if r.waves != nil {
		if n < 1 || int(n) > len(r.waves) {
			return nil, fmt.Errorf("wave %d of execution %s: %w", n, r.e.GetId(), store.ErrNotFound)
		}
		return r.waves[n-1], nil
	}
	if w, ok := r.one[n]; ok {
		return w, nil
	}
	w, err := r.tx.Wave(n)
	if err != nil {
		return nil, err
	}
	if r.one == nil {
		r.one = map[int32]*schedulerv1.Wave{}
	}
	r.one[n] = w
	return w, nil
}

// putWave stores wave w's changes. A wave this transaction read (wave, allWaves: every later
// read of it in the transaction is that copy) is written once, at the transaction's end,
// however often it changed; any other is written now.
func (r *runner) putWave(w *schedulerv1.Wave) error {
	if slices.Contains(r.dirty, w) {
		return nil
	}
	if r.one[w.GetWaveNumber()] != w && !slices.Contains(r.waves, w) {
		return r.tx.PutWave(w)
	}
	r.dirty = append(r.dirty, w)
	return nil
}

// finish ends the execution.
func (r *runner) finish(status schedulerv1.ExecutionStatus, outcome commonv1.Outcome, msg string) error {
	if ended(r.e) {
		return nil
	}
	r.e.Status, r.e.Outcome, r.e.StatusMessage = status, outcome, msg
	r.e.EndTime = r.now()
	r.e.AwaitingSignoffGate = "" // an ended run waits for nothing
	r.e.RunningTasks = 0
	r.changed = true
	// Open assignments end: pending ones now, held ones are told CANCEL at their next report
	// and end when their agents complete (or their lease runs out).
	open, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(),
		Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING}})
	if err != nil {
		return err
	}
	for _, a := range open {
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED
		a.CompleteTime = r.now()
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
	}
	ws, err := r.allWaves()
	if err != nil {
		return err
	}
	for _, w := range ws {
		if w.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_PENDING || w.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_RUNNING || w.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING {
			w.Status = schedulerv1.WaveStatus_WAVE_STATUS_CANCELLED
			w.EndTime = r.now()
			w.ActiveAgents = 0
			if err := r.putWave(w); err != nil {
				return err
			}
		}
	}
	t := commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED
	if status == schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
		t = commonv1.EventType_EVENT_TYPE_EXECUTION_CANCELLED
	}
	return r.log(entry(t, nil, fmt.Sprintf("execution %s: %s", outcomeName(outcome), msg),
		map[string]any{"outcome": outcomeName(outcome), "completed_tasks": float64(r.e.GetCompletedTasks()),
			"failed_tasks": float64(r.e.GetFailedTasks()), "skipped_tasks": float64(r.e.GetSkippedTasks())}))
}

func outcomeName(o commonv1.Outcome) string {
	return strings.TrimPrefix(o.String(), "OUTCOME_")
}
