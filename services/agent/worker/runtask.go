package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// ErrDraining: the worker is draining and takes no new RunTask.
var ErrDraining = errors.New("the worker is draining: it takes no new work")

// RunTask runs one task given directly (no Scheduler) through the same PIV loop as a claimed
// assignment: Prime, a worktree at the base ref, checkpoint, executor, validation, restore and
// retry, and on success a commit `Task <id>: <title>` on the branch. send gets every event, then
// the result last.
func (w *Worker) RunTask(ctx context.Context, req *agentv1.RunTaskRequest, send func(*agentv1.RunTaskResponse) error) error {
	if w.Draining() {
		return ErrDraining
	}
	w.setState(func(s *Status) { s.ActiveRunTasks++ })
	defer w.setState(func(s *Status) { s.ActiveRunTasks-- })
	start := time.Now()
	var b [5]byte
	_, _ = rand.Read(b[:])
	id := "run-" + hex.EncodeToString(b[:])
	t := req.GetTask()
	branch := req.GetBranch()
	if branch == "" {
		branch = "converge/task/" + sanitizeTag(t.GetId()) + "-" + hex.EncodeToString(b[:])
	}
	opts := runTaskOptions(req)
	ca := &schedulerv1.ClaimedAssignment{
		Assignment: &schedulerv1.Assignment{Id: id, Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, ExecutionId: id,
			TaskId: t.GetId(), Attempt: 1, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING},
		Task: t, Repository: req.GetRepository(), Options: opts, Context: req.GetContext(), ScopeGuards: req.GetScopeGuards(),
		LeaseDuration: durationpb.New(time.Minute), HeartbeatInterval: durationpb.New(time.Second),
	}
	for _, h := range req.GetHints() {
		ca.PreviousErrors = append(ca.PreviousErrors, &commonv1.ErrorContext{Code: "HINT", Message: h})
	}
	pushToOrigin := req.GetPush() || req.GetRepository().GetPath() != ""
	if req.GetRepository() != nil && pushToOrigin {
		ca.TaskRef = "refs/heads/" + branch
	}

	var (
		mu  sync.Mutex
		seq int64
	)
	emit := func(r *agentv1.RunTaskResponse) {
		mu.Lock()
		defer mu.Unlock()
		seq++
		r.Seq, r.Time = seq, timestamppb.Now()
		_ = send(r)
	}
	l := &lease{w: w, ca: ca}
	l.local = func(events []*schedulerv1.AgentEvent, percent int32, message string) {
		for _, ev := range events {
			at := ev.GetTime()
			if at == nil {
				at = timestamppb.Now()
			}
			emit(&agentv1.RunTaskResponse{Event: &agentv1.RunTaskResponse_Log{Log: &commonv1.LogEntry{TaskId: t.GetId(),
				InstanceId: w.cfg.InstanceID, Time: at, SourceTime: at, EventType: ev.GetEventType(), Message: ev.GetMessage(), Context: ev.GetContext()}}})
		}
		emit(&agentv1.RunTaskResponse{Event: &agentv1.RunTaskResponse_Progress{Progress: &agentv1.Progress{Percent: percent, Message: message}}})
	}
	work, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-work.Done():
				return
			case <-tick.C:
				l.report(work)
			}
		}
	}()
	out := w.runTask(work, l)
	stop()
	<-done
	l.report(context.WithoutCancel(ctx)) // the last events
	res := &agentv1.RunTaskResult{Status: out.result, CommitSha: out.commit, Error: out.err, Attempts: out.tries,
		DiscoveriesCount: out.discoveries, FilesChanged: out.files, LinesChanged: out.lines,
		ValidationOutputTail: tail(out.validationOut, 65536), Duration: durationpb.New(time.Since(start))}
	if out.commit != "" {
		res.Branch, res.Pushed = branch, out.ref != ""
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	emit(&agentv1.RunTaskResponse{Event: &agentv1.RunTaskResponse_Result{Result: res}})
	if out.result == schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED {
		w.setState(func(s *Status) { s.LastError = out.err })
	}
	return nil
}

// runTaskOptions resolves a RunTask request's options with the contract's documented defaults
// (common.v1.AgentConfig: 3 retries, 300 s task timeout, 120 s validation timeout; knowledge
// min_confidence 0.6), as the Scheduler resolves an execution's for the tasks it hands out.
func runTaskOptions(req *agentv1.RunTaskRequest) *schedulerv1.ExecutionOptions {
	ac := &commonv1.AgentConfig{MaxRetries: proto.Int32(3), TaskTimeout: durationpb.New(300 * time.Second),
		ValidationTimeout: durationpb.New(120 * time.Second)}
	if in := req.GetAgentConfig(); in != nil {
		if in.MaxRetries != nil {
			ac.MaxRetries = proto.Int32(in.GetMaxRetries())
		}
		if in.GetTaskTimeout().AsDuration() > 0 {
			ac.TaskTimeout = in.GetTaskTimeout()
		}
		if in.GetValidationTimeout().AsDuration() > 0 {
			ac.ValidationTimeout = in.GetValidationTimeout()
		}
		ac.HeartbeatInterval = in.GetHeartbeatInterval()
	}
	opts := &schedulerv1.ExecutionOptions{Executor: req.GetExecutor(), AgentConfig: ac, TaskTimeout: ac.GetTaskTimeout(),
		MaxRetries: proto.Int32(ac.GetMaxRetries()), KnowledgeMinConfidence: proto.Float64(0.6)}
	if k := req.GetKnowledge(); k != nil && k.MinConfidence != nil {
		opts.KnowledgeMinConfidence = proto.Float64(k.GetMinConfidence())
	}
	return opts
}
