package worker

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/backoff"
	"github.com/converge-dev/converge/services/agent/executor"
)

// lease is one claimed assignment while the worker holds it: a keeper goroutine reports progress
// every heartbeat interval (extending the lease and flushing queued events) and cancels the work
// when the Scheduler says CANCEL or refuses the lease (Aborted).
type lease struct {
	w  *Worker
	ca *schedulerv1.ClaimedAssignment

	mu       sync.Mutex
	seq      int64
	events   []*schedulerv1.AgentEvent
	percent  int32
	message  string
	lost     error // the Scheduler refused the lease: nothing more may be reported
	cancel   string
	draining bool           // the run is paused (DRAIN): finish, and claim no next assignment with the completion
	usage    executor.Usage // model usage of the executor runs so far (CompleteTaskRequest.usage)
	// locks are the fenced file locks the work holds (tasks only); the keeper renews them with
	// the lease. lockLost is set once one was lost to another holder: the work must not write.
	locks    []heldLock
	lockTTL  time.Duration
	lockLost error
	// renewMu serialises the rounds of renewLocks (the keeper's and the fence's) and the release's
	// read of the tokens: a round that took a lapsed lock again stores its new token before
	// another round renews, or the release releases, with the old one (which the Registry refuses
	// as stale: the work was stopped as if the lock were lost, and the new grant was left held).
	renewMu sync.Mutex
	// local, for RunTask (no Scheduler): reports go to it instead of ReportProgress.
	local func(events []*schedulerv1.AgentEvent, percent int32, message string)
	// told is closed once the claim's heartbeat (RUNNING this task) was answered or failed; nil
	// when there is none to wait for. Nothing of the task runs before (waitTold).
	told chan struct{}
	// clock times the task's phases.
	clock *phaseClock
	// started: the TASK_STARTED event is queued (taskStarted).
	started bool
	// log is the worker's log naming the assignment, built at its first use (logAt): slog's With
	// formats the attributes when called, and most assignments log nothing at the agent's level
	// (issue 17: ≈ 5 % of an agent's CPU samples in a profile of no-op tasks at --log-level warn).
	log func() *slog.Logger
	// work is the assignment's context from when it is held (hold) to its end: cancelled by a
	// CANCEL directive, a lost lease, a drain deadline or the end of the work (stop); the keeper
	// runs on it and closes keeperDone when it returns.
	work       context.Context
	stop       context.CancelFunc
	keeperDone chan struct{}
}

// hold starts holding claimed assignment ca: its lease is kept (reports, lock renewals) from now
// on, whether its work starts now or after the assignment the worker is running (Config.Prefetch).
func (w *Worker) hold(ctx context.Context, ca *schedulerv1.ClaimedAssignment) *lease {
	a := ca.GetAssignment()
	log := sync.OnceValue(func() *slog.Logger {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
			return w.log.With("assignment", a.GetId(), "execution", a.GetExecutionId(), "attempt", a.GetAttempt(), "wave", a.GetWaveNumber())
		}
		return w.log.With("assignment", a.GetId(), "execution", a.GetExecutionId(), "attempt", a.GetAttempt(), "task", a.GetTaskId())
	})
	l := &lease{w: w, ca: ca, clock: w.phaseClock(), log: log, keeperDone: make(chan struct{})}
	l.work, l.stop = context.WithCancel(ctx)
	go func() {
		defer close(l.keeperDone)
		l.keep(l.work, l.stop)
	}()
	return l
}

// logAt logs msg at level with the assignment's attributes, if the worker's log takes level.
func (l *lease) logAt(level slog.Level, msg string, args ...any) {
	ctx := context.Background()
	if l.w.log.Enabled(ctx, level) {
		l.log().Log(ctx, level, msg, args...)
	}
}

// end stops the lease's work and keeper and waits for the keeper.
func (l *lease) end() {
	l.stop()
	<-l.keeperDone
}

// waitTold waits until the Registry was told of the claim (or the telling failed, or ctx ended):
// the task's command never runs on an agent the Registry still takes for idle.
func (l *lease) waitTold(ctx context.Context) {
	if l.told == nil {
		return
	}
	select {
	case <-l.told:
	case <-ctx.Done():
	}
	l.clock.mark(phaseClaimHeartbeat)
}

// event queues an event for the next report.
func (l *lease) event(t commonv1.EventType, msg string, ctx map[string]any) {
	// Stamped now, when it happens (the agent's clock): it may reach the Scheduler one heartbeat
	// interval later.
	ev := &schedulerv1.AgentEvent{EventType: t, Message: truncate(msg, 65536), Time: now()}
	if len(msg) == 0 {
		ev.Message = t.String()
	}
	if len(ctx) > 0 {
		if st, err := structpb.NewStruct(ctx); err == nil {
			ev.Context = st
		}
	}
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

// progress records what the worker is doing.
func (l *lease) progress(percent int32, msg string) {
	l.mu.Lock()
	l.percent, l.message = percent, msg
	l.mu.Unlock()
	l.w.setState(func(s *Status) { s.ProgressPercent, s.ProgressMessage = percent, msg })
}

// maxEventsPerMessage is how many events one ReportProgress or CompleteTask carries (the
// contract's max_items).
const maxEventsPerMessage = 100

// takeEvents removes up to maxEventsPerMessage queued events.
func (l *lease) takeEvents() []*schedulerv1.AgentEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(len(l.events), maxEventsPerMessage)
	out := l.events[:n:n]
	l.events = l.events[n:]
	return out
}

// report sends one progress report; it returns false once the lease is gone or cancelled.
func (l *lease) report(ctx context.Context) bool {
	l.mu.Lock()
	if l.lost != nil {
		l.mu.Unlock()
		return false
	}
	l.seq++
	seq, pct, msg := l.seq, l.percent, l.message
	l.mu.Unlock()
	events := l.takeEvents()
	if l.local != nil {
		l.local(events, pct, msg)
		return true
	}
	a := l.ca.GetAssignment()
	// Not cancelled when the work ends: a report cut off in flight may still have been committed,
	// and its events, requeued for the completion, would then be logged twice. The completion
	// waits for the keeper, so for the report's answer (within reportTimeout).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	res, err := l.w.cfg.Scheduler.ReportProgress(rctx, &schedulerv1.ReportProgressRequest{AssignmentId: a.GetId(),
		InstanceId: l.w.cfg.InstanceID, FencingToken: a.GetFencingToken(), ReportSeq: seq, ProgressPercent: pct,
		Message: truncate(msg, 4096), Events: events})
	if err != nil {
		if status.Code(err) == codes.Aborted || status.Code(err) == codes.NotFound {
			l.mu.Lock()
			l.lost = err
			l.mu.Unlock()
			l.w.log.Warn("lease lost", "assignment", a.GetId(), "err", err)
			return false
		}
		// The Scheduler is unreachable: requeue the events; the lease may still be ours.
		l.mu.Lock()
		l.events = append(events, l.events...)
		l.mu.Unlock()
		return true
	}
	switch res.GetDirective() {
	case schedulerv1.Directive_DIRECTIVE_CANCEL:
		l.mu.Lock()
		l.cancel = res.GetReason()
		l.mu.Unlock()
		return false
	case schedulerv1.Directive_DIRECTIVE_DRAIN:
		// The run is paused: this assignment finishes as usual and the run hands out nothing
		// more until resumed. Scoped to the run: the worker goes on serving other runs.
		l.mu.Lock()
		if !l.draining {
			l.w.log.Info("execution draining: finishing this assignment", "execution", l.ca.GetAssignment().GetExecutionId(), "reason", res.GetReason())
		}
		l.draining = true
		l.mu.Unlock()
	}
	return true
}

// queued is how many events wait for a report or the completion.
func (l *lease) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// flushEvents sends, as progress reports, the queued events beyond what the completion carries
// (maxEventsPerMessage): a task that queued more since its last report (warnings of discoveries
// Knowledge refused, many tries within one heartbeat interval) would lose the rest. A report the
// Scheduler does not answer requeues its events and is tried again, with backoff, for up to
// 30 s, as the completion is; a lost lease ends it (the completion is then dropped too).
func (l *lease) flushEvents(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for retry := 0; l.queued() > maxEventsPerMessage; {
		before := l.queued()
		if !l.report(ctx) {
			return
		}
		if l.queued() < before {
			retry = 0
			continue
		}
		retry++
		if backoff.Wait(ctx, min(time.Duration(retry)*200*time.Millisecond, 2*time.Second)) != nil {
			return
		}
	}
}

// reportTimeout bounds a progress report, which the end of the work does not cancel (report).
const reportTimeout = 5 * time.Second

// startedGrace is how long the lease keeper holds its first report (and with it the task's
// TASK_STARTED event): a task that ends within it sends no report at all, its events (the started
// one first, stamped when the task really started) go with its completion, in the completion's
// one Scheduler transaction. For a no-op task that report was half of the Scheduler's write
// transactions (issue 17). A longer task reports as before, startedGrace late: well within the
// lease, which the claim granted for many heartbeat intervals.
const startedGrace = 250 * time.Millisecond

// firstReportDelay is how long the keeper waits before its first report: startedGrace, at most
// half the heartbeat interval (the first renewal never slips by more than that), none when the
// worker is configured so (tests).
func firstReportDelay(cfg *Config, interval time.Duration) time.Duration {
	d := startedGrace
	if cfg.startedGrace != 0 {
		d = cfg.startedGrace
	}
	return max(min(d, interval/2), 0)
}

// keep reports every interval until ctx ends; it calls stop when the lease must end. Each
// round also renews the file locks, which last one lease: without it a task running longer than
// its lease would hold no lock at all. The first report waits firstReportDelay: work that ends
// before (ctx ends) reports nothing here, its queued events go with the completion.
func (l *lease) keep(ctx context.Context, stop context.CancelFunc) {
	interval := l.ca.GetHeartbeatInterval().AsDuration()
	if interval <= 0 {
		interval = 30 * time.Second
	}
	if d := firstReportDelay(&l.w.cfg, interval); d > 0 {
		grace := time.NewTimer(d)
		select {
		case <-ctx.Done():
			grace.Stop()
			return
		case <-grace.C:
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if !l.report(ctx) {
			stop()
			return
		}
		if ctx.Err() != nil {
			return // the work ended while the report was answered: nothing left to renew
		}
		if err := l.renewLocks(ctx); err != nil {
			l.mu.Lock()
			l.cancel = err.Error()
			l.mu.Unlock()
			stop()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// outcome is how the worker ended an assignment.
type outcome struct {
	result        schedulerv1.CompletionResult
	commit, ref   string
	err           *commonv1.ErrorContext
	tries         int32
	discoveries   int32
	files         []string
	lines         int32
	validationOut string
	levels        []*schedulerv1.ValidationLevelResult
}

// runAssignment does the work of held assignment l and answers its completion request (nil: the
// result is dropped: the lease was lost or the session replaced); the caller sends it (complete).
// fused says l came with the previous assignment's completion or was held ahead of it: the agent
// was RUNNING all along.
func (w *Worker) runAssignment(ctx context.Context, l *lease, fused bool) *schedulerv1.CompleteTaskRequest {
	ca, a := l.ca, l.ca.GetAssignment()
	l.clock = w.phaseClock() // the work starts now, whenever it was claimed
	w.setState(func(s *Status) {
		s.State = commonv1.AgentStatus_AGENT_STATUS_RUNNING
		s.Assignment, s.Task = a, ca.GetTask()
		s.ProgressPercent, s.ProgressMessage = 0, ""
		s.Claimed++
	})
	// The Registry learns at once that this agent holds work, before the work starts: were the
	// agent to die now, it is found stale after one stale window, whatever it reported before.
	// A task's heartbeat goes out now and is waited for before the task's command runs
	// (lease.waitTold), so it overlaps prime and the workspace; an integration waits for it here.
	// An assignment claimed with the previous one's completion (fused) follows work the Registry
	// already has this agent RUNNING for, heartbeating: its heartbeat, naming the new task, is
	// sent by the heartbeat loop (in order with the others) and not waited for.
	if fused {
		w.kick()
		return w.runLeased(ctx, l)
	}
	told := make(chan struct{})
	go func() {
		defer close(told)
		if err := w.heartbeat(ctx, commonv1.AgentStatus_AGENT_STATUS_RUNNING, a.GetTaskId()); err != nil && w.replacedErr() == nil {
			l.logAt(slog.LevelWarn, "heartbeat after the claim failed; the work goes on", "err", err)
		}
	}()
	l.told = told
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
		l.waitTold(ctx)
	}
	defer func() { <-told }() // no heartbeat of this assignment outlives it
	return w.runLeased(ctx, l)
}

// runLeased runs the work of lease l beside its keeper and answers its completion request.
func (w *Worker) runLeased(ctx context.Context, l *lease) *schedulerv1.CompleteTaskRequest {
	ca, a := l.ca, l.ca.GetAssignment()

	// l.work is cancelled by a CANCEL directive, a lost lease, or a drain deadline.
	defer l.stop()
	w.mu.Lock()
	w.hardStop = l.stop
	replaced := w.replaced != nil
	w.mu.Unlock()
	if replaced {
		l.stop()
	}
	defer func() {
		w.mu.Lock()
		w.hardStop = nil
		w.mu.Unlock()
	}()
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
		l.taskStarted() // in the keeper's next report, or the completion (startedGrace)
	}

	var out outcome
	func() {
		defer func() {
			if p := recover(); p != nil {
				l.logAt(slog.LevelError, "panic in assignment", "panic", p)
				out = outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED,
					err: &commonv1.ErrorContext{Code: "AGENT_PANIC", Message: fmt.Sprint(p), TaskId: a.GetTaskId(), StackTrace: truncate(string(debug.Stack()), 65536)}}
			}
		}()
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
			out = w.integrate(l.work, l)
		} else {
			out = w.runTask(l.work, l)
		}
	}()
	// Whether the work was interrupted (CANCEL directive, lost lease or lock, drain deadline,
	// shutdown) is read before end() below, which cancels work in every case: a task that failed
	// on its own is FAILED with its reason, not CANCELLED (which would requeue it).
	interrupted := l.work.Err() != nil
	l.end()
	l.flushEvents(ctx)

	l.mu.Lock()
	lost, cancelled := l.lost, l.cancel
	l.mu.Unlock()
	if lost != nil {
		l.logAt(slog.LevelWarn, "lease lost: the result is dropped (the task was requeued)", "err", lost)
		return nil
	}
	if err := w.replacedErr(); err != nil {
		l.logAt(slog.LevelWarn, "session replaced: the result is dropped (the newer process's Registry record took the work back)", "result", out.result.String())
		return nil
	}
	if out.result == schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED {
		// Done, even if cancelled right after: still report it.
	} else if interrupted || (out.result == schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED && out.err == nil) {
		// A task the agent gave back for a reason of its own (out.err: e.g. the Registry could not
		// answer for its locks) keeps that reason.
		why := cancelled
		if why == "" {
			why = "the worker stopped (drain deadline or shutdown)"
		}
		out = outcome{result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, tries: out.tries,
			err: &commonv1.ErrorContext{Code: "CANCELLED", Message: why, TaskId: a.GetTaskId(), Timestamp: now()}}
	}
	switch out.result {
	case schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED:
		w.setState(func(s *Status) { s.Completed++; s.ConsecutiveFailures = 0 })
	case schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED:
		// Stuck counts tasks, not tries (seed 000): one task failing all its tries is one
		// failure; three different tasks failing in a row make the agent STUCK.
		w.setState(func(s *Status) {
			s.Failed++
			s.LastError = out.err
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
				s.ConsecutiveFailures++
			}
		})
	}
	if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
		w.rememberTask(a.GetExecutionId(), taskSummary(ca, out))
	}
	consecutive := w.status().ConsecutiveFailures
	req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: w.cfg.InstanceID, FencingToken: a.GetFencingToken(),
		Result: out.result, CommitSha: out.commit, TaskRef: out.ref, Error: out.err, Tries: out.tries,
		ConsecutiveFailures: consecutive, DiscoveriesCount: out.discoveries, ValidationOutputTail: tail(out.validationOut, 65536),
		FilesChanged: out.files, LinesChanged: out.lines, LevelResults: out.levels, Events: l.takeEvents()}
	if u := l.usage; !u.Zero() {
		req.Usage = &schedulerv1.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CostUsdMicros: u.CostUSDMicros}
	}
	return req
}

// mayClaimAfter says whether l's completion req may also claim the agent's next assignment: the
// worker is neither stopping nor draining, l's run is not paused (DRAIN) and the work was not
// given back.
func (w *Worker) mayClaimAfter(ctx context.Context, l *lease, req *schedulerv1.CompleteTaskRequest) bool {
	l.mu.Lock()
	draining := l.draining
	l.mu.Unlock()
	return w.mayClaim(ctx) && !draining && req.GetResult() != schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED
}

// complete sends l's completion req and answers the next assignment claimed with it (claim_next),
// nil when there is none.
func (w *Worker) complete(ctx context.Context, l *lease, req *schedulerv1.CompleteTaskRequest) (next *schedulerv1.ClaimedAssignment) {
	// The completion must reach the Scheduler even when the worker is shutting down, and across
	// a Scheduler replica's restart or a Postgres failover: it is retried (with backoff) for up to
	// 30 s while the answer is not final; the fencing token makes a retried completion idempotent.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	retry := 0
	defer l.clock.mark(phaseComplete)
	for {
		res, err := w.cfg.Scheduler.CompleteTask(cctx, req)
		if err == nil {
			l.logAt(slog.LevelInfo, "assignment completed", "result", req.GetResult().String(), "commit", req.GetCommitSha())
			return res.GetNext()
		}
		// A retry claims nothing more: the first attempt's next assignment, if its answer was
		// lost, is requeued when its lease runs out.
		req.ClaimNext = nil
		if c := status.Code(err); c == codes.Aborted || c == codes.NotFound || c == codes.InvalidArgument || c == codes.FailedPrecondition {
			l.logAt(slog.LevelWarn, "completion refused", "err", err)
			return nil
		}
		retry++
		if backoff.Wait(cctx, min(time.Duration(retry)*200*time.Millisecond, 2*time.Second)) != nil {
			l.logAt(slog.LevelWarn, "completion not delivered within 30 s: the lease will run out and the task be requeued", "err", err)
			return nil
		}
	}
}

// tail keeps the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
