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
	// Logger; nil = discard.
	Logger *slog.Logger
	// StandAlone allows a worker without Scheduler (and Registry) clients: it serves RunTask only
	// (no file locks without a Registry) and Run returns at once.
	StandAlone bool
}

// DefaultCapabilities are announced when Config.Capabilities is empty.
var DefaultCapabilities = []string{"executor:command", "executor:agent-cli", "executor:openai", "integration"}

// identity signs the commits agents make.
var identity = workspace.Identity{Name: "converge-agent", Email: "agent@converge.invalid"}

// registryHeartbeat is how often the worker heartbeats to the Registry while idle.
const registryHeartbeat = 10 * time.Second

// Worker is one agent worker.
type Worker struct {
	cfg   Config
	log   *slog.Logger
	cache *workspace.Cache
	start time.Time

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain: claim nothing more
	mu        sync.Mutex
	st        Status
	// hardStop cancels the current work when a drain deadline passes.
	hardStop context.CancelFunc
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
	// ConsecutiveFailures are failed tries without a success between.
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
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.InstanceID = "agent-" + sanitize(host) + "-" + hex.EncodeToString(b[:])
	}
	if len(cfg.Capabilities) == 0 {
		cfg.Capabilities = DefaultCapabilities
	}
	if cfg.ClaimWait <= 0 {
		cfg.ClaimWait = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache, err := workspace.NewCache(filepath.Join(cfg.DataDir))
	if err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, log: log.With("instance", cfg.InstanceID), cache: cache, start: time.Now(),
		drained: make(chan struct{}), st: Status{State: commonv1.AgentStatus_AGENT_STATUS_INITIALIZING}}, nil
}

// InstanceID is the worker's Registry instance id.
func (w *Worker) InstanceID() string { return w.cfg.InstanceID }

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

func (w *Worker) setState(fn func(s *Status)) {
	w.mu.Lock()
	fn(&w.st)
	w.mu.Unlock()
}

// Run works until ctx ends or the worker was drained (Drain, or a DRAIN directive), then
// tells the Registry it is done. It returns nil on a clean stop.
func (w *Worker) Run(ctx context.Context) error {
	if w.cfg.Scheduler == nil || w.cfg.Registry == nil {
		return nil
	}
	// idle is ctx, also cancelled by Drain: registering and long-polling for work stop at once;
	// an assignment in progress runs on ctx and finishes.
	idle, stopIdle := context.WithCancel(ctx)
	defer stopIdle()
	go func() {
		select {
		case <-w.drained:
			stopIdle()
		case <-idle.Done():
		}
	}()
	if err := w.register(idle); err != nil {
		if idle.Err() != nil {
			return nil
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
		final := commonv1.AgentStatus_AGENT_STATUS_COMPLETED
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = w.cfg.Registry.Heartbeat(hctx, &registryv1.HeartbeatRequest{InstanceId: w.cfg.InstanceID, Status: final})
		w.setState(func(s *Status) { s.State = final })
	}()
	w.setState(func(s *Status) { s.State = commonv1.AgentStatus_AGENT_STATUS_IDLE })
	retry := backoff.New()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.drained:
			return nil
		default:
		}
		res, err := w.cfg.Scheduler.ClaimTask(idle, &schedulerv1.ClaimTaskRequest{InstanceId: w.cfg.InstanceID,
			Capabilities: w.cfg.Capabilities, Wait: durationpb.New(w.cfg.ClaimWait), ExecutionId: w.cfg.ExecutionID})
		if err != nil {
			if idle.Err() != nil {
				return nil
			}
			w.log.Warn("claim failed; retrying", "err", err)
			if !sleep(idle, retry.Next()) {
				return nil
			}
			continue
		}
		retry.Reset()
		if res.GetAssignment() == nil {
			continue
		}
		w.runAssignment(ctx, res.GetAssignment())
	}
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
		_, err := w.cfg.Registry.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: w.cfg.InstanceID,
			ExecutionId: w.cfg.ExecutionID, AgentType: "build", Host: truncate(host, 256)})
		if err == nil || status.Code(err) == codes.AlreadyExists {
			// A registered agent is INITIALIZING; RUNNING (ready to work) is its next legal state,
			// after which it moves between RUNNING and IDLE.
			if _, err := w.cfg.Registry.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: w.cfg.InstanceID,
				Status: commonv1.AgentStatus_AGENT_STATUS_RUNNING}); err != nil && ctx.Err() == nil {
				w.log.Warn("first heartbeat", "err", err)
			}
			w.setState(func(s *Status) { s.Registered = true })
			return nil
		}
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.PermissionDenied || c == codes.Unauthenticated {
			return fmt.Errorf("register with the Registry: %w", err)
		}
		w.log.Warn("Registry unreachable; retrying", "err", err)
		if !sleep(ctx, retry.Next()) {
			return ctx.Err()
		}
	}
}

// heartbeats tells the Registry the worker is alive until ctx ends.
func (w *Worker) heartbeats(ctx context.Context) {
	t := time.NewTicker(registryHeartbeat)
	defer t.Stop()
	for {
		s := w.Snapshot()
		req := &registryv1.HeartbeatRequest{InstanceId: w.cfg.InstanceID, Status: s.State, ProgressPercent: s.ProgressPercent,
			ErrorContext: s.LastError}
		if s.Task != nil {
			req.CurrentTaskId = s.Task.GetId()
		}
		if req.Status == commonv1.AgentStatus_AGENT_STATUS_INITIALIZING {
			req.Status = commonv1.AgentStatus_AGENT_STATUS_RUNNING
		}
		if _, err := w.cfg.Registry.Heartbeat(ctx, req); err == nil {
			w.setState(func(s *Status) { s.LastHeartbeat = time.Now() })
		} else if ctx.Err() == nil {
			w.log.Debug("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
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
