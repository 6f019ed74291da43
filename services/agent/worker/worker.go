// Package worker is the Agent worker loop (DESIGN §2 steps 3-5): register with the Registry,
// heartbeat, claim assignments from the Scheduler, run each through the PIV loop (Prime, Iterate,
// Validate) in its own git worktree, and complete it with the lease's fencing token.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/backoff"
	"github.com/converge-dev/converge/services/agent/executor"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// Config configures a Worker.
type Config struct {
	// InstanceID is the agent instance id registered with the Registry; empty = "agent-<host>-<random>".
	InstanceID string
	// Scheduler hands out assignments. Required.
	Scheduler schedulerv1.SchedulerServiceClient
	// Registry registers the agent, takes its heartbeats and the fenced file locks. Required.
	Registry registryv1.RegistryServiceClient
	// Knowledge gives gotchas and records discoveries; nil = none.
	Knowledge knowledgev1.KnowledgeServiceClient
	// DataDir holds the mirror clones and worktrees (required).
	DataDir string
	// Capabilities announced in ClaimTask; empty = executor:command, executor:agent-cli,
	// executor:openai and integration.
	Capabilities []string
	// ExecutionID restricts claims to one execution; "" = any.
	ExecutionID string
	// ClaimWait is how long one ClaimTask long-polls (default 10 s).
	ClaimWait time.Duration
	// Prefetch holds one assignment ahead of the one the worker runs, so that the next starts
	// the moment the current one's work ends and the completion's round trip runs beside it
	// (pipeline.go). For many short tasks; with a few long ones, an idle agent may wait while the
	// assignment held ahead waits for this agent.
	Prefetch bool
	// RegistryRetry is how long a task's lock request is retried while the Registry cannot
	// answer (Unavailable: restarting, unreachable) before the task goes back to the queue
	// (default 30 s).
	RegistryRetry time.Duration
	// HeartbeatInterval is how often the worker heartbeats to the Registry, idle or working
	// (default and at most 10 s).
	HeartbeatInterval time.Duration
	// HeartbeatCoalesce is how long after the last heartbeat one kicked by a change of task
	// alone waits (an assignment claimed with the previous one's completion: RUNNING before and
	// after): tasks that follow each other faster are named to the Registry at most once per
	// HeartbeatCoalesce, where each used to cost a Registry write (issue 17). A change of status
	// (IDLE, STUCK, …) is sent at once, and heartbeats still come every HeartbeatInterval
	// (default 1 s; at most HeartbeatInterval).
	HeartbeatCoalesce time.Duration
	// startedGrace, for tests: how long the lease keeper holds its first report (0: startedGrace,
	// the constant; negative: none, the first report goes out as the work starts).
	startedGrace time.Duration
	// SessionID is this process's session (boot id), sent in RegisterAgent, every Heartbeat and
	// every ClaimTask; empty = a new random one ("s-" and 16 hex digits). A newer process
	// registering the same instance id replaces the session: see Run.
	SessionID string
	// Logger; nil = discard.
	Logger *slog.Logger
	// StandAlone allows a worker without Scheduler (and Registry) clients: it serves RunTask only
	// (no file locks without a Registry) and Run returns at once.
	StandAlone bool
	// Roots are where local repositories (paths and file:// URLs) may be: a task list naming
	// one outside them fails with REPOSITORY_NOT_ALLOWED before anything of it is read or
	// written. workspace.NewRoots(nil) allows none; nil allows every one (tests; converge-agent
	// and converge dev always set them).
	Roots *workspace.Roots
	// AllowedEnv are the variables of the agent's environment an executor spec may name
	// (env_passthrough, api_key_env); others fail the task with EXECUTOR. Empty = none.
	// CONVERGE_* names are refused either way.
	AllowedEnv []string
	// Sandbox confines task processes (executor.Sandbox; "" = none).
	Sandbox executor.Sandbox
	// Metrics registers the worker's metrics (converge_agent_task_phase_seconds); nil = none.
	Metrics prometheus.Registerer
}

// DefaultCapabilities are announced when Config.Capabilities is empty.
var DefaultCapabilities = []string{"executor:command", "executor:agent-cli", "executor:openai", "integration"}

// identity signs the commits agents make.
var identity = workspace.Identity{Name: "converge-agent", Email: "agent@converge.invalid"}

// registryHeartbeat is how often (at most) the worker heartbeats to the Registry, idle or
// working; registryCallTimeout bounds one Registry call of the heartbeat loop.
const (
	registryHeartbeat   = 10 * time.Second
	registryCallTimeout = 5 * time.Second
)

// ErrSessionReplaced is Run's error when the Registry refused a heartbeat with Aborted: a newer
// process registered the same instance id, and this one must stop.
var ErrSessionReplaced = errors.New("this agent's session was replaced by a newer process with the same instance id")

// Worker is one agent worker.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	cache *workspace.Cache
	sess  *session
	start time.Time

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain: claim nothing more
	mu        sync.Mutex
	st        Status
	// hardStop cancels the current work when a drain deadline passes.
	hardStop context.CancelFunc
	// stopIdle stops claiming (Run's idle context).
	stopIdle context.CancelFunc
	// replaced is set once the session was replaced (ErrSessionReplaced).
	replaced error
	// beat asks the heartbeat loop for a heartbeat now (the state changed).
	beat chan struct{}
	// previous are the summaries of the tasks ended per execution (Prime's previous tasks).
	previous map[string][]string
	// phases times the phases of each task (Config.Metrics).
	phases *phaseSeconds
	// bg is the background work (removing scratch directories) Run waits for before it returns.
	bg sync.WaitGroup
	// hbMu orders heartbeats: each reads the state and sends it before the next reads it, so a
	// stale IDLE never lands after the RUNNING of a claim. It guards lastBeat and lastStatus,
	// when the last heartbeat was sent and with which status.
	hbMu       sync.Mutex
	lastBeat   time.Time
	lastStatus commonv1.AgentStatus
}

// Status is what GetStatus tells about the worker.
type Status struct {
	// State is the worker's AgentStatus.
	State commonv1.AgentStatus
	// Assignment and Task are the current work; nil when idle.
	Assignment *schedulerv1.Assignment
	Task       *commonv1.Task
	// Progress of the current work.
	ProgressPercent int32
	ProgressMessage string
	// Counters since start.
	Claimed, Completed, Failed int32
	// ConsecutiveFailures are tasks that failed (all their tries) without a task succeeding
	// between: what the Scheduler's STUCK rule counts.
	ConsecutiveFailures int32
	// Draining is set once Drain was called; DrainDeadline when it has one.
	Draining      bool
	DrainDeadline time.Time
	// Registered and LastHeartbeat tell the Registry's view.
	Registered    bool
	LastHeartbeat time.Time
	// LastError is the last failure.
	LastError *commonv1.ErrorContext
	// ActiveRunTasks counts RunTask calls in progress.
	ActiveRunTasks int32
}

// New checks cfg and returns a worker; Run starts it.
func New(cfg Config) (*Worker, error) {
	if cfg.Scheduler == nil || cfg.Registry == nil {
		if !cfg.StandAlone {
			return nil, errors.New("worker: Scheduler and Registry clients are required (or StandAlone for RunTask only)")
		}
	}
	if cfg.DataDir == "" {
		return nil, errors.New("worker: DataDir is required")
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = DefaultInstanceID()
	}
	if cfg.SessionID == "" {
		cfg.SessionID = NewSessionID()
	}
	if cfg.HeartbeatInterval <= 0 || cfg.HeartbeatInterval > registryHeartbeat {
		cfg.HeartbeatInterval = registryHeartbeat
	}
	if cfg.HeartbeatCoalesce <= 0 {
		cfg.HeartbeatCoalesce = time.Second
	}
	cfg.HeartbeatCoalesce = min(cfg.HeartbeatCoalesce, cfg.HeartbeatInterval)
	if len(cfg.Capabilities) == 0 {
		cfg.Capabilities = DefaultCapabilities
	}
	if cfg.RegistryRetry <= 0 {
		cfg.RegistryRetry = lockWait
	}
	if cfg.ClaimWait <= 0 {
		cfg.ClaimWait = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	phases, err := newPhaseSeconds(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	cache, err := workspace.NewCache(filepath.Join(cfg.DataDir))
	if err != nil {
		return nil, err
	}
	cache.Restrict(cfg.Roots)
	sess, err := openSession(cache.Root(), cfg.SessionID)
	if err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, log: log.With("instance", cfg.InstanceID), cache: cache, sess: sess, start: time.Now(), phases: phases,
		drained: make(chan struct{}), beat: make(chan struct{}, 1), st: Status{State: commonv1.AgentStatus_AGENT_STATUS_INITIALIZING}}, nil
}

// DefaultInstanceID is an instance id for an agent given none: "agent-<host>-<8 hex digits>".
func DefaultInstanceID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "agent-" + sanitize(host) + "-" + hex.EncodeToString(b[:])
}

// NewSessionID is a new random session (boot id): "s-" and 16 hex digits.
func NewSessionID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:])
}

// InstanceID is the worker's Registry instance id.
func (w *Worker) InstanceID() string { return w.cfg.InstanceID }

// SessionID is the worker's session (boot id).
func (w *Worker) SessionID() string { return w.cfg.SessionID }

// Capabilities are what the worker announces in ClaimTask.
func (w *Worker) Capabilities() []string { return w.cfg.Capabilities }

// StartTime is when the worker was made.
func (w *Worker) StartTime() time.Time { return w.start }

// Snapshot returns the worker's status.
func (w *Worker) Snapshot() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.st
	if s.Assignment != nil {
		s.Assignment = proto.Clone(s.Assignment).(*schedulerv1.Assignment)
	}
	return s
}

// status answers the worker's state without the assignment, for the worker's own readers of its
// other fields: Snapshot copies the assignment, a copy per heartbeat and completion of every task
// (issue 17). Task is the current message, as in Snapshot: read it, never modify it.
func (w *Worker) status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.st
	s.Assignment = nil
	return s
}

func (w *Worker) setState(fn func(s *Status)) {
	w.mu.Lock()
	fn(&w.st)
	w.mu.Unlock()
}

// Run works until ctx ends or the worker was drained (Drain; a DRAIN directive only pauses one run), then
// tells the Registry it is done: COMPLETED after a clean stop, FAILED when ctx was cancelled
// with a cause other than context.Canceled (context.WithCancelCause: the process is failing,
// e.g. its server stopped serving) or Run fails. It returns nil on a clean stop.
//
// Right after each claim the Registry is told the agent is RUNNING the task, before the work
// starts; heartbeats then come every HeartbeatInterval, idle or working. When the Registry
// refuses a heartbeat with Aborted (a newer process registered the same instance id, a new
// session), the worker claims nothing more, cancels its work without reporting or releasing
// anything (what it held is no longer its own) and Run returns an error wrapping
// ErrSessionReplaced.
func (w *Worker) Run(ctx context.Context) (err error) {
	if w.cfg.Scheduler == nil || w.cfg.Registry == nil {
		return nil
	}
	// What a killed earlier process on this data dir left is cleaned up before anything else.
	if rec, err := w.cleanUpDataDir(ctx); err != nil {
		w.log.Warn("cleaning up after earlier processes on the data dir", "err", err)
	} else if len(rec.deadSessions)+len(rec.swept) > 0 {
		w.log.Info("cleaned up after earlier processes on the data dir", "dead_sessions", rec.deadSessions,
			"process_groups_killed", len(rec.killed), "worktrees_removed", rec.swept)
	}
	if w.sess.cgroupErr != nil {
		w.log.Warn("no cgroup per task process: what a task starts with setsid outlives it unless --sandbox namespaces holds it", "why", w.sess.cgroupErr)
	}
	// Nothing this process started outlives its Run: executor processes still running are
	// killed, and the session's record goes.
	defer func() {
		w.bg.Wait()
		if n := w.sess.close(); n > 0 {
			w.log.Warn("killed process groups still running at stop", "groups", n)
		}
	}()
	// idle is ctx, also cancelled by Drain and by a replaced session: registering and
	// long-polling for work stop at once; an assignment in progress runs on ctx and finishes.
	idle, stopIdle := context.WithCancel(ctx)
	defer stopIdle()
	w.mu.Lock()
	w.stopIdle = stopIdle
	w.mu.Unlock()
	go func() {
		select {
		case <-w.drained:
			stopIdle()
		case <-idle.Done():
		}
	}()
	if err := w.register(idle); err != nil {
		if rerr := w.replacedErr(); rerr != nil {
			return rerr
		}
		if idle.Err() != nil {
			// Stopped while registering: a registration the Registry recorded but whose answer
			// was cut off must not stay behind as a live agent.
			return w.finish(ctx, nil, true)
		}
		return err
	}
	hbCtx, stopHB := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeats(hbCtx)
	}()
	defer func() {
		stopHB()
		<-hbDone
		if rerr := w.replacedErr(); rerr != nil {
			// The instance is a newer process's now: its status is not this process's to set.
			err = rerr
			w.setState(func(s *Status) { s.State = commonv1.AgentStatus_AGENT_STATUS_FAILED })
			return
		}
		err = w.finish(ctx, err, false)
	}()
	w.setState(func(s *Status) { s.State = commonv1.AgentStatus_AGENT_STATUS_IDLE })
	w.kick()
	retry := backoff.New()
	for {
		select {
		case <-idle.Done():
			return nil
		default:
		}
		claimed := time.Now()
		res, err := w.cfg.Scheduler.ClaimTask(idle, w.claimRequest(w.cfg.ClaimWait))
		if err != nil {
			if idle.Err() != nil {
				return nil
			}
			w.log.Warn("claim failed; retrying", "err", err)
			if backoff.Wait(idle, retry.Next()) != nil {
				return nil
			}
			continue
		}
		retry.Reset()
		if res.GetAssignment() == nil {
			// Nothing before the wait ran out: the execution this agent is pinned to has ended
			// (the Scheduler answers such a claim at once). Claim again no sooner than the wait
			// would have ended, as often as before, instead of in a loop.
			if rest := w.cfg.ClaimWait - time.Since(claimed); w.cfg.ExecutionID != "" && rest > 0 {
				t := time.NewTimer(rest)
				select {
				case <-idle.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
			continue
		}
		if w.replacedErr() != nil {
			return nil // claimed by a replaced session: the Scheduler takes it back
		}
		// Each completion may hand over the next assignment (fused complete-and-claim).
		w.work(ctx, res.GetAssignment())
	}
}

// background runs fn beside the worker's work; Run waits for it before it returns.
func (w *Worker) background(fn func()) { w.bg.Go(fn) }

// claimRequest is the worker's claim, waiting up to wait.
func (w *Worker) claimRequest(wait time.Duration) *schedulerv1.ClaimTaskRequest {
	r := &schedulerv1.ClaimTaskRequest{InstanceId: w.cfg.InstanceID, Capabilities: w.cfg.Capabilities,
		ExecutionId: w.cfg.ExecutionID, SessionId: w.cfg.SessionID}
	if wait > 0 {
		r.Wait = durationpb.New(wait)
	}
	return r
}

// finish gives the agent's Registry record its final status and answers Run's error: COMPLETED
// after a clean stop, FAILED when err is set or ctx was cancelled with another cause than
// context.Canceled. unsure says the registration may not have been answered (the record, if
// any, may still be INITIALIZING, from which COMPLETED is reached through RUNNING); a record
// that does not exist is left so.
func (w *Worker) finish(ctx context.Context, err error, unsure bool) error {
	final := commonv1.AgentStatus_AGENT_STATUS_COMPLETED
	var ec *commonv1.ErrorContext
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	if err != nil {
		final = commonv1.AgentStatus_AGENT_STATUS_FAILED
		ec = &commonv1.ErrorContext{Code: "AGENT_STOPPED", Message: truncate(err.Error(), 65536), Timestamp: now()}
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), registryCallTimeout)
	defer cancel()
	send := func(st commonv1.AgentStatus) error {
		_, herr := w.cfg.Registry.Heartbeat(hctx, &registryv1.HeartbeatRequest{InstanceId: w.cfg.InstanceID, Status: st,
			ErrorContext: ec, SessionId: w.cfg.SessionID})
		return herr
	}
	herr := send(final)
	if unsure && final == commonv1.AgentStatus_AGENT_STATUS_COMPLETED && status.Code(herr) == codes.FailedPrecondition {
		if herr = send(commonv1.AgentStatus_AGENT_STATUS_RUNNING); herr == nil {
			herr = send(final)
		}
	}
	switch {
	case herr == nil:
	case unsure && status.Code(herr) == codes.NotFound:
		// Never registered: nothing to end.
	default:
		w.log.Warn("final heartbeat not delivered: the Registry finds the agent stale", "status", final.String(), "err", herr)
	}
	w.setState(func(s *Status) { s.State = final; s.LastError = ec })
	return err
}

// Drain makes the worker finish its current assignment, claim nothing more and return from Run.
// With deadline > 0 the current work is cancelled (rolled back, CompleteTask CANCELLED) when it
// passes; deadline < 0 cancels it at once.
func (w *Worker) Drain(deadline time.Duration) {
	w.drainOnce.Do(func() { close(w.drained) })
	w.setState(func(s *Status) {
		s.Draining = true
		if deadline != 0 {
			s.DrainDeadline = time.Now().Add(max(deadline, 0))
		}
	})
	if deadline == 0 {
		return
	}
	time.AfterFunc(max(deadline, 0), func() {
		w.mu.Lock()
		stop := w.hardStop
		w.mu.Unlock()
		if stop != nil {
			stop()
		}
	})
}

// Draining reports whether Drain was called.
func (w *Worker) Draining() bool {
	select {
	case <-w.drained:
		return true
	default:
		return false
	}
}

// register registers the worker with the Registry, retrying while it is unreachable.
func (w *Worker) register(ctx context.Context) error {
	host, _ := os.Hostname()
	retry := backoff.New()
	for {
		res, err := w.cfg.Registry.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: w.cfg.InstanceID,
			ExecutionId: w.cfg.ExecutionID, AgentType: "build", Host: truncate(fmt.Sprintf("%s pid %d", host, os.Getpid()), 256),
			SessionId: w.cfg.SessionID})
		if err == nil || status.Code(err) == codes.AlreadyExists {
			if old := res.GetReplacedSessionId(); old != "" {
				w.log.Warn("registered over an earlier process of this instance: its work was taken back",
					"session", w.cfg.SessionID, "replaced_session", old, "released_locks", len(res.GetReleasedLocks()))
			}
			// A registered agent is INITIALIZING; RUNNING (ready to work) is its next legal state,
			// after which it moves between RUNNING and IDLE.
			if err := w.heartbeat(ctx, commonv1.AgentStatus_AGENT_STATUS_RUNNING, ""); err != nil && ctx.Err() == nil {
				if w.replacedErr() != nil {
					return w.replacedErr()
				}
				w.log.Warn("first heartbeat", "err", err)
			}
			w.setState(func(s *Status) { s.Registered = true })
			w.log.Info("registered with the Registry", "session", w.cfg.SessionID)
			return nil
		}
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.PermissionDenied || c == codes.Unauthenticated {
			return fmt.Errorf("register with the Registry: %w", err)
		}
		w.log.Warn("Registry unreachable; retrying", "err", err)
		if backoff.Wait(ctx, retry.Next()) != nil {
			return ctx.Err()
		}
	}
}

// heartbeat sends one heartbeat with the worker's progress and last error, in status st on
// task (both as the snapshot says when unset). An Aborted answer (the session was replaced)
// stops the worker: see Run.
func (w *Worker) heartbeat(ctx context.Context, st commonv1.AgentStatus, task string) error {
	w.hbMu.Lock()
	defer w.hbMu.Unlock()
	s := w.status()
	if st == commonv1.AgentStatus_AGENT_STATUS_UNSPECIFIED {
		st = sendStatus(s)
	}
	if task == "" && s.Task != nil {
		task = s.Task.GetId()
	}
	if st == commonv1.AgentStatus_AGENT_STATUS_INITIALIZING {
		st = commonv1.AgentStatus_AGENT_STATUS_RUNNING
	}
	w.lastBeat, w.lastStatus = time.Now(), st
	req := &registryv1.HeartbeatRequest{InstanceId: w.cfg.InstanceID, Status: st, CurrentTaskId: task,
		ProgressPercent: s.ProgressPercent, ErrorContext: s.LastError, SessionId: w.cfg.SessionID}
	cctx, cancel := context.WithTimeout(ctx, registryCallTimeout)
	defer cancel()
	_, err := w.cfg.Registry.Heartbeat(cctx, req)
	if err == nil {
		w.setState(func(s *Status) { s.LastHeartbeat = time.Now() })
		return nil
	}
	if status.Code(err) == codes.Aborted {
		w.sessionReplaced(err)
	}
	return err
}

// kick asks the heartbeat loop for a heartbeat now.
func (w *Worker) kick() {
	select {
	case w.beat <- struct{}{}:
	default:
	}
}

// heartbeats tells the Registry the worker is alive, every HeartbeatInterval and when kicked,
// until ctx ends or the session is replaced.
func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		if err := w.heartbeat(ctx, 0, ""); err != nil && ctx.Err() == nil {
			if w.replacedErr() != nil {
				return
			}
			w.log.Debug("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.beat:
			if !w.coalesce(ctx) {
				return
			}
		}
	}
}

// sendStatus is the status a heartbeat sends for the worker's state s.
func sendStatus(s Status) commonv1.AgentStatus {
	if s.State == commonv1.AgentStatus_AGENT_STATUS_INITIALIZING {
		return commonv1.AgentStatus_AGENT_STATUS_RUNNING
	}
	return s.State
}

// coalesce holds a kicked heartbeat that would send the status of the last one (the task
// changed, not the status) until HeartbeatCoalesce after that one; a kick meanwhile that changes
// the status ends the wait. It answers false once ctx ended.
func (w *Worker) coalesce(ctx context.Context) bool {
	for {
		w.hbMu.Lock()
		last, st := w.lastBeat, w.lastStatus
		w.hbMu.Unlock()
		wait := w.cfg.HeartbeatCoalesce - time.Since(last)
		if wait <= 0 || sendStatus(w.status()) != st {
			return true
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
			return true
		case <-w.beat: // the state changed again: look again
			timer.Stop()
		}
	}
}

// sessionReplaced stops the worker for good: a newer process registered this instance.
func (w *Worker) sessionReplaced(cause error) {
	w.mu.Lock()
	if w.replaced != nil {
		w.mu.Unlock()
		return
	}
	w.replaced = fmt.Errorf("%w (session %s): %v", ErrSessionReplaced, w.cfg.SessionID, cause)
	stopIdle, stopWork := w.stopIdle, w.hardStop
	w.mu.Unlock()
	w.log.Error("session replaced: a newer process registered this instance id; claiming nothing more, "+
		"cancelling the current work without reporting or releasing what is no longer ours, and exiting",
		"session", w.cfg.SessionID, "err", cause)
	if stopIdle != nil {
		stopIdle()
	}
	if stopWork != nil {
		stopWork()
	}
}

// replacedErr answers the ErrSessionReplaced error once the session was replaced, else nil.
func (w *Worker) replacedErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.replaced
}

func sanitize(s string) string {
	out := []byte{}
	for i := 0; i < len(s) && len(out) < 40; i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return "host"
	}
	return string(out)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func now() *timestamppb.Timestamp { return timestamppb.Now() }
