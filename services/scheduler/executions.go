package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

const (
	maxPreviousErrors      = 5
	defaultExecutionsPage  = 100
	defaultAssignmentsPage = 100
)

// StartExecution plans the list's remaining tasks into waves, stores the execution with its
// waves and assignments, and opens the first wave.
func (s *Server) StartExecution(ctx context.Context, req *schedulerv1.StartExecutionRequest) (*schedulerv1.StartExecutionResponse, error) {
	return s.startExecution(ctx, req, nil)
}

// startExecution is StartExecution; fb is set for an iteration of a feature build
// (featurebuild_loop.go): its base commit, run branch and build id.
func (s *Server) startExecution(ctx context.Context, req *schedulerv1.StartExecutionRequest, fb *buildRun) (*schedulerv1.StartExecutionResponse, error) {
	if id := req.GetRequestId(); id != "" && !req.GetOptions().GetDryRun() {
		existing, err := s.store.ExecutionIDByRequest(ctx, req.GetTaskListId(), id)
		if err == nil {
			return s.startResponse(ctx, existing)
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, toStatus(err)
		}
	}
	tl, err := s.store.GetTaskList(ctx, req.GetTaskListId(), store.ViewFull)
	if err != nil {
		return nil, toStatus(err)
	}
	opts := resolved(req.GetOptions())
	trigger := req.GetTriggeredBy()
	if trigger == schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_UNSPECIFIED {
		trigger = schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_USER
	}
	baseCommit := ""
	if prevID := req.GetPreviousExecutionId(); prevID != "" {
		prev, prevWaves, err := s.store.GetExecution(ctx, prevID)
		if err != nil {
			return nil, toStatus(err) // NotFound names the execution
		}
		if prev.GetTaskListId() != tl.ID {
			return nil, toStatus(failedPrecondition("previous execution %s runs task list %s, not %s", prevID, prev.GetTaskListId(), tl.ID))
		}
		if !ended(prev) {
			return nil, toStatus(failedPrecondition("execution %s has not ended: retry it once it has", prevID))
		}
		// The retry starts where the previous run's integrations got to.
		for _, w := range prevWaves {
			if w.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED && w.GetIntegrationCommit() != "" {
				baseCommit = w.GetIntegrationCommit()
			}
		}
	}
	if fb != nil {
		trigger, baseCommit = schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_FEATURE_BUILD, fb.baseCommit
	}
	spec, held := runnable(tl.Spec)
	prepared := s.plannedTasks(tl, spec)
	tasks := prepared.Tasks()
	if len(tasks) == 0 {
		if len(held) > 0 {
			return nil, toStatus(failedPrecondition("nothing to run in task list %s: every task is completed or skipped, and %v wait for a design change (BLOCKED_DCR)", tl.ID, held))
		}
		return nil, toStatus(failedPrecondition("every task of task list %s is already completed or skipped: nothing to run", tl.ID))
	}
	res, err := prepared.Plan(ctx, int(opts.GetMaxParallel()), s.planBudget)
	if err != nil {
		return nil, toStatus(err)
	}
	repo := tl.Spec.GetRepository()
	if repo != nil && baseCommit == "" {
		baseCommit, err = resolveBase(ctx, repo)
		if err != nil {
			return nil, toStatus(failedPrecondition("repository: %v", err))
		}
	}
	now := s.now()
	e := &schedulerv1.Execution{
		TaskListId: tl.ID, TriggeredBy: trigger, Status: schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING,
		Options: opts, TotalTasks: int32(len(tasks)), Repository: repo, BaseCommit: baseCommit,
		WaveCount: int32(len(res.Waves)), PreviousExecutionId: req.GetPreviousExecutionId(), RequestId: req.GetRequestId(),
	}
	planned := plan.Response(tasks, res, nil)
	if req.GetOptions().GetDryRun() {
		waves := make([]*schedulerv1.Wave, len(planned.GetWaves()))
		for i, pw := range planned.GetWaves() {
			waves[i] = &schedulerv1.Wave{WaveNumber: pw.GetWaveNumber(), Status: schedulerv1.WaveStatus_WAVE_STATUS_PENDING,
				TaskCount: int32(len(pw.GetPlacements())), Placements: pw.GetPlacements()}
		}
		return &schedulerv1.StartExecutionResponse{Execution: e, Waves: waves}, nil
	}
	e.Id = ids.New("ex", now)
	if repo != nil {
		e.RunBranch = "converge/" + e.Id
	}
	if fb != nil {
		e.FeatureBuildId = fb.id
		if repo != nil {
			e.RunBranch = fb.runBranch
		}
	}
	var (
		waves       []*schedulerv1.Wave
		assignments []*store.Assignment
	)
	ready, unmet := readyWaves(opts, tasks, res, s.planBudget)
	positions := plan.ClaimPositions(tasks, res) // critical path first
	for wn, pw := range planned.GetWaves() {
		w := &schedulerv1.Wave{Id: ids.New("wv", now), ExecutionId: e.Id, WaveNumber: pw.GetWaveNumber(),
			Status: schedulerv1.WaveStatus_WAVE_STATUS_PENDING, TaskCount: int32(len(pw.GetPlacements())), Placements: pw.GetPlacements()}
		waves = append(waves, w)
		for i, pl := range pw.GetPlacements() {
			assignments = append(assignments, &store.Assignment{
				Assignment: &schedulerv1.Assignment{Id: ids.New("as", now), Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK,
					ExecutionId: e.Id, WaveId: w.Id, WaveNumber: w.WaveNumber, TaskId: pl.GetTaskId(),
					Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1},
				Position: positions[wn][i], ReadyWave: ready[pl.GetTaskId()], UnmetDeps: unmet[pl.GetTaskId()],
			})
		}
	}
	first := entry(commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED, nil,
		fmt.Sprintf("execution run %s of %q: %d tasks in %d waves", e.Id, tl.Spec.GetName(), len(tasks), len(res.Waves)),
		map[string]any{"task_count": float64(len(tasks)), "wave_count": float64(len(res.Waves)), "base_commit": baseCommit,
			"triggered_by": trigger.String()})
	if len(held) > 0 {
		first.Message += fmt.Sprintf("; %d held back by a design change request (BLOCKED_DCR): %s", len(held), strings.Join(held, ", "))
	}
	err = s.store.CreateExecution(ctx, e, waves, assignments, []*commonv1.LogEntry{first},
		store.CreateOptions{AllowConcurrent: req.GetAllowConcurrent() && fb == nil})
	if errors.Is(err, store.ErrAlreadyExists) && req.GetRequestId() != "" {
		existing, gerr := s.store.ExecutionIDByRequest(ctx, tl.ID, req.GetRequestId())
		if gerr != nil {
			return nil, toStatus(gerr)
		}
		return s.startResponse(ctx, existing)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	// The run begins with the list this call read (the runner's cache of it, which its first
	// transaction would otherwise read again from the store: 1,000 tasks are ~10 ms on Postgres).
	cached, idx := s.cacheList(tl)
	s.lists.mu.Lock()
	if len(s.lists.byExecution) > 100000 {
		s.lists.byExecution = map[string]string{}
	}
	s.lists.byExecution[e.Id] = tl.ID
	s.lists.mu.Unlock()
	if err := s.updateWith(ctx, e.Id, cached, idx, beginRun); err != nil {
		return nil, toStatus(err)
	}
	return s.startResponse(ctx, e.Id)
}

// begin moves a PENDING execution to RUNNING and opens its first wave. The driver calls it too,
// for an execution whose starter died between storing and beginning it.
func (s *Server) begin(ctx context.Context, id string) error {
	return s.update(ctx, id, beginRun)
}

// beginRun is begin's change of the execution.
func beginRun(r *runner) error {
	if r.e.GetStatus() != schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING {
		return nil
	}
	r.e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
	r.e.StartTime = r.now()
	r.changed = true
	return r.startWave(1)
}

func (s *Server) startResponse(ctx context.Context, id string) (*schedulerv1.StartExecutionResponse, error) {
	e, waves, err := s.store.GetExecution(ctx, id)
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.StartExecutionResponse{Execution: e, Waves: waves}, nil
}

// GetExecution returns an execution and its waves.
func (s *Server) GetExecution(ctx context.Context, req *schedulerv1.GetExecutionRequest) (*schedulerv1.GetExecutionResponse, error) {
	e, waves, err := s.store.GetExecution(ctx, req.GetExecutionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.GetExecutionResponse{Execution: e, Waves: waves}, nil
}

// ListExecutions pages through executions, newest first.
func (s *Server) ListExecutions(ctx context.Context, req *schedulerv1.ListExecutionsRequest) (*schedulerv1.ListExecutionsResponse, error) {
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultExecutionsPage
	}
	q := store.ListExecutionsQuery{PageSize: size,
		TaskListID: req.GetTaskListId(), Statuses: req.GetStatuses(), FeatureBuildID: req.GetFeatureBuildId()}
	var after store.Cursor
	if ok, err := pagetoken.Decode(req.GetPageToken(), req, &after); err != nil {
		return nil, err
	} else if ok {
		q.After = &after
	}
	es, next, err := s.store.ListExecutions(ctx, q)
	if err != nil {
		return nil, toStatus(err)
	}
	res := &schedulerv1.ListExecutionsResponse{Executions: es}
	if next != nil {
		res.NextPageToken = pagetoken.Encode(req, next)
	}
	return res, nil
}

// ListAssignments pages through an execution's assignments.
func (s *Server) ListAssignments(ctx context.Context, req *schedulerv1.ListAssignmentsRequest) (*schedulerv1.ListAssignmentsResponse, error) {
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultAssignmentsPage
	}
	offset := 0
	if _, err := pagetoken.Decode(req.GetPageToken(), req, &offset); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, &pagetoken.Error{Reason: pagetoken.ReasonMalformed}
	}
	if _, err := s.store.Execution(ctx, req.GetExecutionId()); err != nil {
		return nil, toStatus(err)
	}
	as, next, err := s.store.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: req.GetExecutionId(),
		WaveNumber: req.GetWaveNumber(), TaskID: req.GetTaskId(), Statuses: req.GetStatuses(), InstanceID: req.GetInstanceId(),
		PageSize: size, Offset: offset})
	if err != nil {
		return nil, toStatus(err)
	}
	res := &schedulerv1.ListAssignmentsResponse{}
	for _, a := range as {
		res.Assignments = append(res.Assignments, a.Assignment)
	}
	if next > 0 {
		res.NextPageToken = pagetoken.Encode(req, next)
	}
	return res, nil
}

// PauseExecution stops new claims of a running execution; leased work goes on.
func (s *Server) PauseExecution(ctx context.Context, req *schedulerv1.PauseExecutionRequest) (*schedulerv1.PauseExecutionResponse, error) {
	e, err := s.control(ctx, req.GetExecutionId(), func(r *runner) error {
		switch r.e.GetStatus() {
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED:
			return nil
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING:
		default:
			return failedPrecondition("execution %s is %s: only a running execution can be paused", r.e.GetId(), statusName(r.e))
		}
		r.e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED
		r.e.StatusMessage = "paused: " + orDefault(req.GetReason(), "by request")
		r.changed = true
		return r.log(entry(commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED, nil, r.e.StatusMessage, nil))
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.PauseExecutionResponse{Execution: e}, nil
}

// ResumeExecution lets a paused execution hand out claims again.
func (s *Server) ResumeExecution(ctx context.Context, req *schedulerv1.ResumeExecutionRequest) (*schedulerv1.ResumeExecutionResponse, error) {
	e, err := s.control(ctx, req.GetExecutionId(), func(r *runner) error {
		switch r.e.GetStatus() {
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING:
			return nil
		case schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED:
		default:
			return failedPrecondition("execution %s is %s: only a paused execution can be resumed", r.e.GetId(), statusName(r.e))
		}
		if gate := r.e.GetAwaitingSignoffGate(); gate != "" {
			return failedPrecondition("execution %s awaits the sign-off of gate %s: sign it off (converge signoff %s %s --pass|--fail, or SignOffGate) instead of resuming it",
				r.e.GetId(), gate, r.e.GetId(), gate)
		}
		r.e.Status = schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING
		if r.e.GetStartTime() == nil {
			r.e.StartTime = r.now()
		}
		r.e.StatusMessage = ""
		r.changed = true
		if err := r.log(entry(commonv1.EventType_EVENT_TYPE_EXECUTION_RESUMED, nil, "resumed: "+orDefault(req.GetReason(), "by request"), nil)); err != nil {
			return err
		}
		if r.e.GetCurrentWave() == 0 {
			return r.startWave(1)
		}
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.ResumeExecutionResponse{Execution: e}, nil
}

// CancelExecution ends an execution CANCELLED: nothing more is claimed, leased agents are told
// CANCEL at their next report (they roll back and release their locks).
func (s *Server) CancelExecution(ctx context.Context, req *schedulerv1.CancelExecutionRequest) (*schedulerv1.CancelExecutionResponse, error) {
	e, err := s.control(ctx, req.GetExecutionId(), func(r *runner) error {
		if r.e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
			return nil
		}
		if ended(r.e) {
			return failedPrecondition("execution %s already ended %s", r.e.GetId(), statusName(r.e))
		}
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, commonv1.Outcome_OUTCOME_CANCELLED,
			"cancelled: "+orDefault(req.GetReason(), "by request"))
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.CancelExecutionResponse{Execution: e}, nil
}

// RetryTask requeues a FAILED or SKIPPED task of the open wave (or a BLOCKED_DCR task of a
// paused run) with attempt + 1 and the reason as a hint.
func (s *Server) RetryTask(ctx context.Context, req *schedulerv1.RetryTaskRequest) (*schedulerv1.RetryTaskResponse, error) {
	var out *store.Assignment
	e, err := s.control(ctx, req.GetExecutionId(), func(r *runner) error {
		a, w, err := r.taskAssignment(req.GetTaskId())
		if err != nil {
			return err
		}
		if ended(r.e) {
			return failedPrecondition("execution %s ended %s: start a RETRY execution (triggered_by RETRY, previous_execution_id %s)", r.e.GetId(), statusName(r.e), r.e.GetId())
		}
		// A task of a wave that has not opened yet ran early (eager dispatch): it is retried in
		// its own wave, as one of the open wave.
		if w.GetStatus() != schedulerv1.WaveStatus_WAVE_STATUS_RUNNING && w.GetStatus() != schedulerv1.WaveStatus_WAVE_STATUS_PENDING {
			var err error
			out, err = r.retryInLaterWave(a, w, req.GetReason())
			return err
		}
		switch a.GetStatus() {
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED:
			w.FailedCount--
			r.e.FailedTasks--
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED:
			w.SkippedCount--
			r.e.SkippedTasks--
		default:
			return failedPrecondition("task %s is %s: only a FAILED or SKIPPED task can be retried", req.GetTaskId(), a.GetStatus())
		}
		if a.GetError() != nil {
			a.PreviousErrors = lastErrors(append(a.PreviousErrors, a.GetError()))
		}
		if req.GetReason() != "" {
			a.PreviousErrors = lastErrors(append(a.PreviousErrors, &commonv1.ErrorContext{Code: "RETRY", Message: req.GetReason(), TaskId: a.GetTaskId(), Timestamp: r.now()}))
		}
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING
		a.Attempt++
		a.Result, a.Error, a.CompleteTime = 0, nil, nil
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		if err := r.putWave(w); err != nil {
			return err
		}
		if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_PENDING); err != nil {
			return err
		}
		r.changed = true
		out = a
		return r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_REQUEUED, a,
			fmt.Sprintf("Task %s requeued by request (attempt %d): %s", a.GetTaskId(), a.GetAttempt(), orDefault(req.GetReason(), "retry")), nil))
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.RetryTaskResponse{Assignment: out.Assignment, Execution: e}, nil
}

// SkipTask skips a task that has not run yet, or one that FAILED or is BLOCKED_DCR (and, with
// skip_dependents, every task depending on it that has not run yet). A skipped task counts as
// satisfied for its dependents (seed 001).
func (s *Server) SkipTask(ctx context.Context, req *schedulerv1.SkipTaskRequest) (*schedulerv1.SkipTaskResponse, error) {
	var skipped []string
	e, err := s.control(ctx, req.GetExecutionId(), func(r *runner) error {
		if ended(r.e) {
			return failedPrecondition("execution %s already ended %s", r.e.GetId(), statusName(r.e))
		}
		a, w, err := r.taskAssignment(req.GetTaskId())
		if err != nil {
			return err
		}
		switch a.GetStatus() {
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING:
		case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED: // failed, or blocked by a design change request
			w.FailedCount--
			r.e.FailedTasks--
			if a.GetError() != nil {
				a.PreviousErrors = lastErrors(append(a.PreviousErrors, a.GetError()))
			}
		default:
			return failedPrecondition("task %s is %s: only a PENDING, FAILED or BLOCKED_DCR task can be skipped", req.GetTaskId(), a.GetStatus())
		}
		why := "skipped by request: " + orDefault(req.GetReason(), "no reason given")
		targets := []string{req.GetTaskId()}
		if req.GetSkipDependents() {
			targets = append(targets, r.dependents(req.GetTaskId())...)
		}
		for i, id := range targets {
			ta, tw := a, w
			if i > 0 {
				if ta, tw, err = r.taskAssignment(id); err != nil {
					return err
				}
				if ta.GetStatus() != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING {
					continue
				}
			}
			if err := r.skip(ta, tw, codeSkipped, why); err != nil {
				return err
			}
			if err := r.putWave(tw); err != nil {
				return err
			}
			skipped = append(skipped, id)
			if tw.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_RUNNING {
				if err := r.barrier(tw); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.SkipTaskResponse{SkippedTaskIds: skipped, Execution: e}, nil
}

// taskAssignment returns a task's assignment and wave in this execution.
func (r *runner) taskAssignment(taskID string) (*store.Assignment, *schedulerv1.Wave, error) {
	as, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), TaskID: taskID})
	if err != nil {
		return nil, nil, err
	}
	if len(as) == 0 {
		return nil, nil, fmt.Errorf("task %s in execution %s: %w", taskID, r.e.GetId(), store.ErrNotFound)
	}
	// The latest: a task retried in a later wave has an assignment there too (retry.go).
	last := as[len(as)-1]
	w, err := r.wave(last.GetWaveNumber())
	return last, w, err
}

// dependents returns the tasks of the list that depend on id, directly or not, in list order.
func (r *runner) dependents(id string) []string {
	seen := map[string]bool{id: true}
	var out []string
	for changed := true; changed; {
		changed = false
		for _, t := range r.tl.Spec.GetTasks() {
			if seen[t.GetId()] {
				continue
			}
			for _, d := range t.GetDependsOn() {
				if seen[d] {
					seen[t.GetId()] = true
					out = append(out, t.GetId())
					changed = true
					break
				}
			}
		}
	}
	return out
}

// control runs an operator's change and returns the execution after it.
func (s *Server) control(ctx context.Context, id string, fn func(r *runner) error) (*schedulerv1.Execution, error) {
	if err := s.update(ctx, id, fn); err != nil {
		return nil, err
	}
	e, err := s.store.Execution(ctx, id)
	return e, err
}

func lastErrors(errs []*commonv1.ErrorContext) []*commonv1.ErrorContext {
	if len(errs) > maxPreviousErrors {
		errs = errs[len(errs)-maxPreviousErrors:]
	}
	return errs
}

func statusName(e *schedulerv1.Execution) string {
	return e.GetStatus().String()
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
