package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/ids"
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
//   - Stop rules end the run FAILED: more than max_failed_tasks failed tasks, a failed task of a
//     critical phase, a failed integration or validation level. Three consecutive failures of an
//     agent, or a spent budget, end it ESCALATED.
//   - After the last wave, the leader replica's driver asks the Verifier (Verify Done); only a
//     CONVERGED verdict makes the run COMPLETED with outcome CONVERGED.

// Defaults of ExecutionOptions.
const (
	defaultMaxParallel      = 4
	defaultMaxRetries       = 3
	defaultMaxFailedTasks   = 3
	defaultTaskTimeout      = 300 * time.Second
	defaultHeartbeat        = 30 * time.Second
	defaultValidation       = 120 * time.Second
	defaultWallTime         = 24 * time.Hour
	defaultMinConfidence    = 0.6
	escalateAfterFailures   = 3
	leaseHeartbeats         = 3 // a lease lasts this many heartbeat intervals
	maxPreviousErrors       = 5
	defaultCriticalPhase    = "database"
	integrationCapability   = "integration"
	executorCapabilityOf    = "executor:"
	maxOutputTail           = 64 << 10
	claimPollInterval       = 100 * time.Millisecond
	driverInterval          = 500 * time.Millisecond
	reaperBatch             = 500
	leaderName              = "converge-scheduler-leader"
	handoffTailEntries      = 100
	defaultHandoffEntries   = 500
	defaultLogLimit         = 100
	defaultExecutionsPage   = 100
	defaultAssignmentsPage  = 100
	watchPollInterval       = 100 * time.Millisecond
	watchKeepAliveInterval  = 15 * time.Second
	watchBatch              = 500
	verificationCheckoutDir = "verify"
)

// Option configures a Server.
type Option func(*Server)

// WithVerifier makes the Scheduler ask v for Verify Done after the last wave. Without it an
// execution whose list has done-criteria ends BLOCKED ("no Verifier configured").
func WithVerifier(v verifierv1.VerifierServiceClient) Option {
	return func(s *Server) { s.verifier = v }
}

// WithWorkDir sets the directory the Scheduler checks run branches out into for the Verifier
// (default: the OS temp dir). The Verifier must allow it as a root.
func WithWorkDir(dir string) Option { return func(s *Server) { s.workDir = dir } }

// WithLogger sets the logger of the background driver.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithDriverInterval sets how often the leader's driver looks for expired leases, runs to verify
// and runs past their wall time (default 500 ms).
func WithDriverInterval(d time.Duration) Option { return func(s *Server) { s.driverEvery = d } }

// lists caches task lists by id: a stored list never changes (only its tasks' statuses, which the
// engine does not read from here), so the engine reads each once per process.
type lists struct {
	mu sync.Mutex
	m  map[string]*store.TaskList
	// index maps list id → task id → position in Spec.Tasks.
	index map[string]map[string]int
	// byExecution maps execution id → task list id.
	byExecution map[string]string
}

func (s *Server) taskList(ctx context.Context, id string) (*store.TaskList, map[string]int, error) {
	s.lists.mu.Lock()
	tl, ok := s.lists.m[id]
	idx := s.lists.index[id]
	s.lists.mu.Unlock()
	if ok {
		return tl, idx, nil
	}
	tl, err := s.store.GetTaskList(ctx, id, store.ViewFull)
	if err != nil {
		return nil, nil, err
	}
	idx = make(map[string]int, len(tl.Spec.GetTasks()))
	for i, t := range tl.Spec.GetTasks() {
		idx[t.GetId()] = i
	}
	s.lists.mu.Lock()
	if len(s.lists.m) > 256 {
		s.lists.m, s.lists.index = map[string]*store.TaskList{}, map[string]map[string]int{}
	}
	s.lists.m[id], s.lists.index[id] = tl, idx
	s.lists.mu.Unlock()
	return tl, idx, nil
}

// forgetList drops a deleted list from the cache.
func (s *Server) forgetList(id string) {
	s.lists.mu.Lock()
	delete(s.lists.m, id)
	delete(s.lists.index, id)
	s.lists.mu.Unlock()
}

// signal wakes long polls (ClaimTask) and streams (WatchExecution) of this replica; other
// replicas find the change on their next poll.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

// wait returns a channel closed at the next broadcast.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) broadcast() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// resolved returns o with every default filled in (GetExecution shows them).
func resolved(o *schedulerv1.ExecutionOptions) *schedulerv1.ExecutionOptions {
	r := proto.Clone(o).(*schedulerv1.ExecutionOptions)
	if o == nil {
		r = &schedulerv1.ExecutionOptions{}
	}
	ac := r.GetAgentConfig()
	if ac == nil {
		ac = &commonv1.AgentConfig{}
		r.AgentConfig = ac
	}
	if r.MaxParallel == 0 {
		r.MaxParallel = defaultMaxParallel
	}
	if r.MaxRetries == nil {
		n := int32(defaultMaxRetries)
		if ac.MaxRetries != nil {
			n = ac.GetMaxRetries()
		}
		r.MaxRetries = &n
	}
	ac.MaxRetries = proto.Int32(r.GetMaxRetries())
	if r.Executor == nil {
		r.Executor = &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{}}}
	}
	if r.TaskTimeout == nil {
		r.TaskTimeout = ac.GetTaskTimeout()
		if r.TaskTimeout == nil {
			r.TaskTimeout = durationpb.New(defaultTaskTimeout)
		}
	}
	ac.TaskTimeout = r.TaskTimeout
	if ac.HeartbeatInterval == nil {
		ac.HeartbeatInterval = durationpb.New(defaultHeartbeat)
	}
	if ac.ValidationTimeout == nil {
		ac.ValidationTimeout = durationpb.New(defaultValidation)
	}
	if r.MaxWallTime == nil {
		r.MaxWallTime = durationpb.New(defaultWallTime)
	}
	if r.CriticalPhases == nil {
		r.CriticalPhases = &schedulerv1.CriticalPhases{Phases: []string{defaultCriticalPhase}}
	}
	if r.MaxFailedTasks == nil {
		r.MaxFailedTasks = proto.Int32(defaultMaxFailedTasks)
	}
	if r.KnowledgeMinConfidence == nil {
		r.KnowledgeMinConfidence = proto.Float64(defaultMinConfidence)
	}
	r.DryRun = false
	return r
}

// executorCapability is the capability an agent announces for the executor of o.
func executorCapability(o *schedulerv1.ExecutionOptions) string {
	switch o.GetExecutor().GetKind().(type) {
	case *commonv1.ExecutorSpec_AgentCli:
		return executorCapabilityOf + "agent-cli"
	case *commonv1.ExecutorSpec_Openai:
		return executorCapabilityOf + "openai"
	default:
		return executorCapabilityOf + "command"
	}
}

// leaseDuration is how long one lease (or one report) keeps an assignment.
func leaseDuration(o *schedulerv1.ExecutionOptions) time.Duration {
	return leaseHeartbeats * o.GetAgentConfig().GetHeartbeatInterval().AsDuration()
}

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
	// waves, read once per transaction when needed.
	waves []*schedulerv1.Wave
	// changed: e must be stored; notify: waiters should wake.
	changed bool
}

// update runs fn on the execution id in one transaction and wakes this replica's waiters. The
// task list is read before the transaction (never while it holds the execution's lock and a
// pooled connection).
func (s *Server) update(ctx context.Context, id string, fn func(r *runner) error) error {
	listID, err := s.listOf(ctx, id)
	if err != nil {
		return err
	}
	tl, idx, err := s.taskList(ctx, listID)
	if err != nil {
		return err
	}
	err = s.store.UpdateExecution(ctx, id, func(tx store.ExecTx) error {
		r := &runner{s: s, tx: tx, e: tx.Execution(), tl: tl, idx: idx}
		if err := fn(r); err != nil {
			return err
		}
		if r.changed {
			return tx.PutExecution(r.e)
		}
		return nil
	})
	s.wake.broadcast()
	return err
}

// listOf returns the task list an execution runs (cached: it never changes).
func (s *Server) listOf(ctx context.Context, execution string) (string, error) {
	s.lists.mu.Lock()
	id, ok := s.lists.byExecution[execution]
	s.lists.mu.Unlock()
	if ok {
		return id, nil
	}
	e, _, err := s.store.GetExecution(ctx, execution)
	if err != nil {
		return "", err
	}
	s.lists.mu.Lock()
	if len(s.lists.byExecution) > 100000 {
		s.lists.byExecution = map[string]string{}
	}
	s.lists.byExecution[execution] = e.GetTaskListId()
	s.lists.mu.Unlock()
	return e.GetTaskListId(), nil
}

func (r *runner) task(id string) *commonv1.Task {
	if i, ok := r.idx[id]; ok {
		return r.tl.Spec.GetTasks()[i]
	}
	return nil
}

func (r *runner) now() *timestamppb.Timestamp { return timestamppb.New(r.tx.Now()) }

func (r *runner) log(entries ...*commonv1.LogEntry) error { return r.tx.Append(entries...) }

func (r *runner) allWaves() ([]*schedulerv1.Wave, error) {
	if r.waves == nil {
		w, err := r.tx.Waves()
		if err != nil {
			return nil, err
		}
		r.waves = w
	}
	return r.waves, nil
}

func (r *runner) wave(n int32) (*schedulerv1.Wave, error) {
	ws, err := r.allWaves()
	if err != nil {
		return nil, err
	}
	if n < 1 || int(n) > len(ws) {
		return nil, fmt.Errorf("wave %d of execution %s: %w", n, r.e.GetId(), store.ErrNotFound)
	}
	return ws[n-1], nil
}

// finish ends the execution.
func (r *runner) finish(status schedulerv1.ExecutionStatus, outcome commonv1.Outcome, msg string) error {
	if ended(r.e) {
		return nil
	}
	r.e.Status, r.e.Outcome, r.e.StatusMessage = status, outcome, msg
	r.e.EndTime = r.now()
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
			if err := r.tx.PutWave(w); err != nil {
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

// startWave opens wave n: its base is the previous wave's integration commit (the execution's
// base for wave 1); tasks whose dependencies did not complete are skipped.
func (r *runner) startWave(n int32) error {
	w, err := r.wave(n)
	if err != nil {
		return err
	}
	if n == 1 {
		w.BaseCommit = r.e.GetBaseCommit()
	} else {
		prev, err := r.wave(n - 1)
		if err != nil {
			return err
		}
		w.BaseCommit = prev.GetIntegrationCommit()
	}
	w.Status = schedulerv1.WaveStatus_WAVE_STATUS_RUNNING
	w.StartTime = r.now()
	r.e.CurrentWave = n
	r.changed = true
	if err := r.log(waveEntry(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, n,
		fmt.Sprintf("wave %d/%d started: %d tasks", n, r.e.GetWaveCount(), w.GetTaskCount()),
		map[string]any{"wave_number": float64(n), "task_count": float64(w.GetTaskCount()), "base_commit": w.GetBaseCommit()})); err != nil {
		return err
	}
	// Skip tasks whose dependencies did not complete in this execution (or before it).
	bad, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), Statuses: []schedulerv1.AssignmentStatus{
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED,
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED}})
	if err != nil {
		return err
	}
	notDone := map[string]bool{}
	for _, a := range bad {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			notDone[a.GetTaskId()] = true
		}
	}
	if len(notDone) > 0 {
		mine, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), WaveNumber: n,
			Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING}})
		if err != nil {
			return err
		}
		for _, a := range mine {
			for _, d := range r.task(a.GetTaskId()).GetDependsOn() {
				if notDone[d] {
					notDone[a.GetTaskId()] = true
					if err := r.skip(a, w, fmt.Sprintf("dependency %s did not complete", d)); err != nil {
						return err
					}
					break
				}
			}
		}
	}
	if err := r.tx.PutWave(w); err != nil {
		return err
	}
	return r.barrier(w)
}

// skip ends a pending task assignment SKIPPED.
func (r *runner) skip(a *store.Assignment, w *schedulerv1.Wave, why string) error {
	a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED
	a.Result = schedulerv1.CompletionResult_COMPLETION_RESULT_SKIPPED
	a.Error = &commonv1.ErrorContext{Code: "SKIPPED", Message: why, TaskId: a.GetTaskId(), Timestamp: r.now()}
	a.CompleteTime = r.now()
	if err := r.tx.PutAssignment(a); err != nil {
		return err
	}
	w.SkippedCount++
	r.e.SkippedTasks++
	r.changed = true
	if err := r.tx.SetTaskStatus(a.GetTaskId(), commonv1.TaskStatus_TASK_STATUS_SKIPPED); err != nil {
		return err
	}
	return r.log(entry(commonv1.EventType_EVENT_TYPE_TASK_SKIPPED, a, fmt.Sprintf("Task %s: %s skipped: %s", a.GetTaskId(), r.task(a.GetTaskId()).GetTitle(), why), nil))
}

// barrier moves wave w on once every task in it is terminal: to an integration assignment, or
// straight to the next wave (or to verification) when there is nothing to integrate.
func (r *runner) barrier(w *schedulerv1.Wave) error {
	if ended(r.e) || w.GetStatus() != schedulerv1.WaveStatus_WAVE_STATUS_RUNNING {
		return nil
	}
	if w.GetCompletedCount()+w.GetFailedCount()+w.GetSkippedCount() < w.GetTaskCount() {
		return nil
	}
	final := w.GetWaveNumber() == r.e.GetWaveCount()
	done, err := r.tx.Assignments(store.ListAssignmentsQuery{ExecutionID: r.e.GetId(), WaveNumber: w.GetWaveNumber(),
		Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED}})
	if err != nil {
		return err
	}
	var merges []*schedulerv1.IntegrationInput
	for _, a := range done {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && a.GetCommitSha() != "" {
			merges = append(merges, &schedulerv1.IntegrationInput{TaskId: a.GetTaskId(), Title: r.task(a.GetTaskId()).GetTitle(),
				CommitSha: a.GetCommitSha(), TaskRef: a.GetTaskRef()})
		}
	}
	levels := r.tl.Spec.GetValidation()
	validate := levels.GetCodebase().GetCommand() != "" || (final && (levels.GetApi().GetCommand() != "" || levels.GetUi().GetCommand() != ""))
	if len(merges) == 0 && !validate {
		w.Status = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED
		w.IntegrationCommit = w.GetBaseCommit()
		w.EndTime = r.now()
		if err := r.tx.PutWave(w); err != nil {
			return err
		}
		if err := r.log(waveEntry(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, w.GetWaveNumber(),
			fmt.Sprintf("wave %d/%d completed: %d completed, %d failed, %d skipped; nothing to integrate", w.GetWaveNumber(), r.e.GetWaveCount(),
				w.GetCompletedCount(), w.GetFailedCount(), w.GetSkippedCount()), map[string]any{"wave_number": float64(w.GetWaveNumber())})); err != nil {
			return err
		}
		return r.afterWave(w)
	}
	w.Status = schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING
	if err := r.tx.PutWave(w); err != nil {
		return err
	}
	a := &store.Assignment{
		Assignment: &schedulerv1.Assignment{
			Id: ids.New("as", r.tx.Now()), Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION,
			ExecutionId: r.e.GetId(), WaveId: w.GetId(), WaveNumber: w.GetWaveNumber(),
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING, Attempt: 1,
		},
		Position: -1, Merges: merges, FinalIntegration: final,
	}
	if err := r.tx.InsertAssignment(a); err != nil {
		return err
	}
	return r.log(entry(commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, a,
		fmt.Sprintf("wave %d/%d: integration of %d task commits queued", w.GetWaveNumber(), r.e.GetWaveCount(), len(merges)),
		map[string]any{"wave_number": float64(w.GetWaveNumber()), "merges": float64(len(merges)), "final": final}))
}

// afterWave starts the next wave, or hands a finished run to verification.
func (r *runner) afterWave(w *schedulerv1.Wave) error {
	if w.GetWaveNumber() < r.e.GetWaveCount() {
		return r.startWave(w.GetWaveNumber() + 1)
	}
	return r.toVerification(w.GetIntegrationCommit())
}

// toVerification ends the waves: the run waits for the driver's Verify Done (an unset verdict in
// Verification marks it; GetExecution shows it while the Verifier works).
func (r *runner) toVerification(commit string) error {
	r.e.CurrentWave = r.e.GetWaveCount()
	r.changed = true
	if r.e.GetFailedTasks() > 0 {
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
			fmt.Sprintf("%d tasks failed", r.e.GetFailedTasks()))
	}
	r.e.Verification = &schedulerv1.VerifySummary{}
	return r.log(entry(commonv1.EventType_EVENT_TYPE_VERIFICATION_STARTED, nil,
		"every wave integrated: Verify Done against the done-criteria", map[string]any{"commit": commit}))
}

// stopRules applies the seed's stop rules after a task failed.
func (r *runner) stopRules(a *store.Assignment) error {
	t := r.task(a.GetTaskId())
	for _, p := range r.e.GetOptions().GetCriticalPhases().GetPhases() {
		if t.GetPhase() != "" && strings.EqualFold(p, t.GetPhase()) {
			return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
				fmt.Sprintf("critical phase %s failed: task %s", t.GetPhase(), a.GetTaskId()))
		}
	}
	if max := r.e.GetOptions().GetMaxFailedTasks(); r.e.GetFailedTasks() > max {
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
			fmt.Sprintf("%d failed tasks (more than %d)", r.e.GetFailedTasks(), max))
	}
	return nil
}

// budget ends the run ESCALATED when its attempts budget is spent.
func (r *runner) budget() error {
	if max := r.e.GetOptions().GetMaxTotalAttempts(); max > 0 && r.e.GetTotalAttempts() >= max && !ended(r.e) {
		return r.finish(schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
			fmt.Sprintf("budget spent: %d executor runs (max_total_attempts %d)", r.e.GetTotalAttempts(), max))
	}
	return nil
}

// taskEnded updates the counts after task assignment a became terminal with status st, and
// moves the run on.
func (r *runner) taskEnded(a *store.Assignment, w *schedulerv1.Wave) error {
	switch a.GetStatus() {
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED:
		w.CompletedCount++
		r.e.CompletedTasks++
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED:
		w.FailedCount++
		r.e.FailedTasks++
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED:
		w.SkippedCount++
		r.e.SkippedTasks++
	}
	r.changed = true
	if err := r.tx.PutWave(w); err != nil {
		return err
	}
	if a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED {
		if err := r.stopRules(a); err != nil || ended(r.e) {
			return err
		}
	}
	if err := r.budget(); err != nil || ended(r.e) {
		return err
	}
	return r.barrier(w)
}

// sortAssignments orders assignments by wave, kind and position (the store's order).
func sortAssignments(as []*store.Assignment) {
	sort.SliceStable(as, func(i, j int) bool {
		if as[i].GetWaveNumber() != as[j].GetWaveNumber() {
			return as[i].GetWaveNumber() < as[j].GetWaveNumber()
		}
		return as[i].Position < as[j].Position
	})
}
