package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// errNothing: an execution had nothing to claim after all (another claim was faster).
var errNothing = errors.New("nothing to claim")

// ClaimTask leases the next ready assignment the agent can do, waiting up to req.wait for one.
func (s *Server) ClaimTask(ctx context.Context, req *schedulerv1.ClaimTaskRequest) (*schedulerv1.ClaimTaskResponse, error) {
	wait := req.GetWait().AsDuration()
	deadline := time.Now().Add(wait)
	// A new session of the instance (its process restarted) takes back what the old one held.
	if err := s.replaceSessions(ctx, req.GetInstanceId(), req.GetSessionId()); err != nil {
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
		if left <= 0 {
			return &schedulerv1.ClaimTaskResponse{}, nil
		}
		// Other replicas' changes are seen by polling; this replica's wake the poll at once.
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

func (s *Server) claimOnce(ctx context.Context, req *schedulerv1.ClaimTaskRequest) (*schedulerv1.ClaimedAssignment, error) {
	candidates, err := s.store.ClaimableExecutions(ctx, 64)
	if err != nil {
		return nil, err
	}
	for _, e := range candidates {
		if req.GetExecutionId() != "" && e.GetId() != req.GetExecutionId() {
			continue
		}
		var kinds []schedulerv1.AssignmentKind
		for _, k := range []schedulerv1.AssignmentKind{schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION} {
			if (len(req.GetKinds()) == 0 || slices.Contains(req.GetKinds(), k)) && canDo(e, req.GetCapabilities(), k) {
				kinds = append(kinds, k)
			}
		}
		if len(kinds) == 0 {
			continue
		}
		var claimed *schedulerv1.ClaimedAssignment
		err := s.update(ctx, e.GetId(), func(r *runner) error {
			var err error
			claimed, err = r.lease(req.GetInstanceId(), req.GetSessionId(), kinds)
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

// lease hands the next pending assignment of the open wave to instance (its process's session).
func (r *runner) lease(instance, session string, kinds []schedulerv1.AssignmentKind) (*schedulerv1.ClaimedAssignment, error) {
	if r.e.GetStatus() != schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING || r.e.GetCurrentWave() == 0 {
		return nil, errNothing
	}
	a, err := r.tx.NextPending(r.e.GetCurrentWave(), kinds)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, errNothing
	}
	w, err := r.wave(a.GetWaveNumber())
	if err != nil {
		return nil, err
	}
	d := leaseDuration(r.e.GetOptions())
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED
	a.InstanceId = instance
	a.SessionID = session
	a.FencingToken++
	a.LeaseExpireTime = timestamppb.New(r.tx.Now().Add(d))
	a.AssignTime = r.now()
	a.LastReportSeq = 0
	a.Tries = 0
	a.ProgressPercent, a.ProgressMessage, a.LastReportTime = 0, "", nil
	if err := r.tx.PutAssignment(a); err != nil {
		return nil, err
	}
	w.ActiveAgents++
	if err := r.tx.PutWave(w); err != nil {
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
	if err := r.log(entry(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, a,
		fmt.Sprintf("%s leased to %s (attempt %d, token %d, lease %s)", what, instance, a.GetAttempt(), a.GetFencingToken(), d),
		map[string]any{"attempt": float64(a.GetAttempt()), "fencing_token": float64(a.GetFencingToken()), "assignment_id": a.GetId()})); err != nil {
		return nil, err
	}
	return r.claimed(a, w, d, what)
}

// claimed is what the agent gets for a lease.
func (r *runner) claimed(a *store.Assignment, w *schedulerv1.Wave, d time.Duration, _ string) (*schedulerv1.ClaimedAssignment, error) {
	c := &schedulerv1.ClaimedAssignment{
		Assignment:        a.Assignment,
		TaskListId:        r.tl.ID,
		TaskListName:      r.tl.Spec.GetName(),
		Repository:        r.e.GetRepository(),
		BaseCommit:        w.GetBaseCommit(),
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

// holder checks that the caller still holds assignment id with token: Aborted otherwise.
func (r *runner) holder(id, instance string, token int64) (*store.Assignment, error) {
	a, err := r.tx.Assignment(id)
	if err != nil {
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

// directive tells a lease holder whether to go on.
func (r *runner) directive(a *store.Assignment) (schedulerv1.Directive, string) {
	if ended(r.e) {
		return schedulerv1.Directive_DIRECTIVE_CANCEL, fmt.Sprintf("execution %s: %s", statusName(r.e), r.e.GetStatusMessage())
	}
	return schedulerv1.Directive_DIRECTIVE_CONTINUE, ""
}

// agentEntries turns an agent's events into log entries of assignment a.
func agentEntries(a *store.Assignment, events []*schedulerv1.AgentEvent) []*commonv1.LogEntry {
	out := make([]*commonv1.LogEntry, 0, len(events))
	for _, ev := range events {
		e := entry(ev.GetEventType(), a, ev.GetMessage(), nil)
		e.Context = ev.GetContext()
		if ev.GetTime().IsValid() {
			e.SourceTime = ev.GetTime() // when it happened, by the agent's clock; e.Time is the store's
		}
		out = append(out, e)
	}
	return out
}

// ReportProgress extends the lease, records progress, events and a checkpoint, and tells the
// agent whether to go on.
func (s *Server) ReportProgress(ctx context.Context, req *schedulerv1.ReportProgressRequest) (*schedulerv1.ReportProgressResponse, error) {
	res := &schedulerv1.ReportProgressResponse{}
	eid, err := s.executionOf(ctx, req.GetAssignmentId())
	if err != nil {
		return nil, toStatus(err)
	}
	err = s.update(ctx, eid, func(r *runner) error {
		a, err := r.holder(req.GetAssignmentId(), req.GetInstanceId(), req.GetFencingToken())
		if err != nil {
			return err
		}
		if err := r.live(a); err != nil {
			return err
		}
		res.Directive, res.Reason = r.directive(a)
		if req.GetReportSeq() <= a.LastReportSeq {
			res.LeaseExpireTime = a.GetLeaseExpireTime()
			return nil // a retried report: acknowledged, no effect
		}
		a.LastReportSeq = req.GetReportSeq()
		if !ended(r.e) {
			a.LeaseExpireTime = timestamppb.New(r.tx.Now().Add(leaseDuration(r.e.GetOptions())))
		}
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING
		a.ProgressPercent, a.ProgressMessage, a.LastReportTime = req.GetProgressPercent(), req.GetMessage(), r.now()
		if cp := req.GetCheckpoint(); cp != nil {
			id, err := r.checkpoint(a, cp)
			if err != nil {
				return err
			}
			res.CheckpointId = id
		}
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		res.LeaseExpireTime = a.GetLeaseExpireTime()
		return r.log(agentEntries(a, req.GetEvents())...)
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return res, nil
}

// checkpoint stores an agent's checkpoint of assignment a.
func (r *runner) checkpoint(a *store.Assignment, cp *commonv1.Checkpoint) (string, error) {
	c := &commonv1.Checkpoint{Id: ids.New("ck", r.tx.Now()), ExecutionId: r.e.GetId(), TaskId: a.GetTaskId(),
		InstanceId: a.GetInstanceId(), GitRef: cp.GetGitRef(), Files: cp.GetFiles(), Metadata: cp.GetMetadata()}
	if err := r.tx.PutCheckpoint(c, a.GetId(), a.GetAttempt()); err != nil {
		return "", err
	}
	return c.Id, r.log(entry(commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, a,
		fmt.Sprintf("checkpoint %s at %s (%d files)", c.Id, c.GetGitRef(), len(c.GetFiles())), map[string]any{"checkpoint_id": c.Id}))
}

// RecordCheckpoint stores a checkpoint for the lease holder.
func (s *Server) RecordCheckpoint(ctx context.Context, req *schedulerv1.RecordCheckpointRequest) (*schedulerv1.RecordCheckpointResponse, error) {
	var out *commonv1.Checkpoint
	eid, err := s.executionOf(ctx, req.GetAssignmentId())
	if err != nil {
		return nil, toStatus(err)
	}
	err = s.update(ctx, eid, func(r *runner) error {
		a, err := r.holder(req.GetAssignmentId(), req.GetInstanceId(), req.GetFencingToken())
		if err != nil {
			return err
		}
		if err := r.live(a); err != nil {
			return err
		}
		id, err := r.checkpoint(a, req.GetCheckpoint())
		if err != nil {
			return err
		}
		out = &commonv1.Checkpoint{Id: id, ExecutionId: r.e.GetId(), TaskId: a.GetTaskId(), InstanceId: a.GetInstanceId(),
			GitRef: req.GetCheckpoint().GetGitRef(), Files: req.GetCheckpoint().GetFiles(), Metadata: req.GetCheckpoint().GetMetadata(),
			CreateTime: r.now()}
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.RecordCheckpointResponse{Checkpoint: out}, nil
}

// CompleteTask ends the holder's assignment with its result and moves the run on.
func (s *Server) CompleteTask(ctx context.Context, req *schedulerv1.CompleteTaskRequest) (*schedulerv1.CompleteTaskResponse, error) {
	res := &schedulerv1.CompleteTaskResponse{Directive: schedulerv1.Directive_DIRECTIVE_CONTINUE}
	eid, err := s.executionOf(ctx, req.GetAssignmentId())
	if err != nil {
		return nil, toStatus(err)
	}
	err = s.update(ctx, eid, func(r *runner) error {
		a, err := r.holder(req.GetAssignmentId(), req.GetInstanceId(), req.GetFencingToken())
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
		res.Assignment = a.Assignment
		return nil
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return res, nil
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
	r.changed = true
	if ended(r.e) {
		// Recorded, nothing moves: the run is over.
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED
		if err := r.tx.PutWave(w); err != nil {
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
		if err := r.tx.PutWave(w); err != nil {
			return err
		}
		if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR); err != nil {
			return err
		}
		return r.log(entry(commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED, a, r.e.StatusMessage, nil))
	case schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED:
		// The agent stopped on its own (drain deadline): the task was not done; it goes back to
		// the queue.
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
	if req.GetConsecutiveFailures() >= escalateAfterFailures {
		r.e.EscalatedTaskId, r.e.EscalatedInstanceId = a.GetTaskId(), a.GetInstanceId()
		why := fmt.Sprintf("agent %s is STUCK: %d consecutive failures (last on task %s)", a.GetInstanceId(), req.GetConsecutiveFailures(), a.GetTaskId())
		if err := r.log(entry(commonv1.EventType_EVENT_TYPE_AGENT_ESCALATED, a, why, map[string]any{"consecutive_failures": float64(req.GetConsecutiveFailures())})); err != nil {
			return err
		}
		if err := r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED, why); err != nil {
			return err
		}
		return r.tx.PutWave(w)
	}
	return r.taskEnded(a, w)
}

// requeue puts a held assignment back in the queue with attempt + 1, or fails it once it has
// used its attempts.
func (r *runner) requeue(a *store.Assignment, w *schedulerv1.Wave, code, why string) error {
	errCtx := &commonv1.ErrorContext{Code: code, Message: why, TaskId: a.GetTaskId(), Timestamp: r.now()}
	a.PreviousErrors = lastErrors(append(a.PreviousErrors, errCtx))
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && a.GetAttempt() > r.e.GetOptions().GetMaxRetries() {
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
	a.Attempt++
	a.Result, a.CompleteTime = 0, nil
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	if err := r.tx.PutWave(w); err != nil {
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

// integrated ends a wave's integration.
func (r *runner) integrated(a *store.Assignment, w *schedulerv1.Wave, req *schedulerv1.CompleteTaskRequest) error {
	if req.GetResult() == schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED {
		return r.requeue(a, w, "CANCELLED", "the agent stopped before finishing the integration")
	}
	if a.FinalIntegration {
		r.e.ValidationResults = req.GetLevelResults()
	}
	if req.GetResult() != schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED {
		a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED
		w.Status = schedulerv1.WaveStatus_WAVE_STATUS_FAILED
		w.EndTime = r.now()
		if err := r.tx.PutAssignment(a); err != nil {
			return err
		}
		if err := r.tx.PutWave(w); err != nil {
			return err
		}
		why := fmt.Sprintf("integration of wave %d failed: %s", w.GetWaveNumber(), a.GetError().GetMessage())
		if err := r.log(entry(commonv1.EventType_EVENT_TYPE_INTEGRATION_FAILED, a, why, map[string]any{"code": a.GetError().GetCode()})); err != nil {
			return err
		}
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED, why)
	}
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED
	w.Status = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED
	w.IntegrationCommit = a.GetCommitSha()
	if w.IntegrationCommit == "" {
		w.IntegrationCommit = w.GetBaseCommit()
	}
	w.EndTime = r.now()
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	if err := r.tx.PutWave(w); err != nil {
		return err
	}
	if err := r.log(
		entry(commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, a, fmt.Sprintf("wave %d integrated at %s (%d task commits)", w.GetWaveNumber(), short(w.GetIntegrationCommit()), len(a.Merges)),
			map[string]any{"commit": w.GetIntegrationCommit()}),
		waveEntry(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, w.GetWaveNumber(), fmt.Sprintf("wave %d/%d completed: %d completed, %d failed, %d skipped", w.GetWaveNumber(), r.e.GetWaveCount(),
			w.GetCompletedCount(), w.GetFailedCount(), w.GetSkippedCount()), map[string]any{"wave_number": float64(w.GetWaveNumber())}),
	); err != nil {
		return err
	}
	for _, lr := range req.GetLevelResults() {
		if lr.GetRan() && !lr.GetPassed() {
			return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
				fmt.Sprintf("validation level %s failed: %s", lr.GetLevel(), orDefault(lr.GetMessage(), fmt.Sprintf("exit code %d", lr.GetExitCode()))))
		}
	}
	return r.afterWave(w)
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// executionOf finds the execution an assignment belongs to (to lock it first). An assignment
// never changes execution, so the answer is remembered: reports and completions then go straight
// to the execution's transaction, without a store round trip first.
func (s *Server) executionOf(ctx context.Context, assignmentID string) (string, error) {
	if id, ok := s.owners.get(assignmentID); ok {
		return id, nil
	}
	id, err := s.store.AssignmentExecution(ctx, assignmentID)
	if err == nil {
		s.owners.put(assignmentID, id)
	}
	return id, err
}

// owners remembers which execution an assignment belongs to, up to maxOwners assignments (then
// it starts over: a miss costs one store read).
type owners struct {
	mu sync.Mutex
	m  map[string]string
}

const maxOwners = 1 << 16

func (o *owners) get(assignment string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id, ok := o.m[assignment]
	return id, ok
}

func (o *owners) put(assignment, execution string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxOwners {
		o.m = make(map[string]string)
	}
	o.m[assignment] = execution
}
