// Package registry is converge's Registry service (DESIGN.md §1): file locks with TTL and fencing
// tokens, ownership of paths by glob pattern, and the registry of build agents with their
// heartbeats and staleness.
//
// The service keeps its durable state (ownership, agents, sampled heartbeats, fencing epochs)
// in a store.Store (Postgres, or SQLite in `converge dev`) and its hot state (locks, liveness)
// in a hot.Backend (Redis, or in process).
//
// # Heartbeats
//
// Every heartbeat updates the agent's durable record (status, task, progress, resource use, last
// heartbeat at the store's time), refreshes its TTL key (three heartbeat intervals) and moves its
// entry in the staleness index. The durable history (agent_heartbeats) keeps samples: at most
// one per agent per sampling period (default 60 s), plus one whenever the status or the current
// task changes. Samples older than the retention (default 24 h) are deleted by the service itself
// (see New).
//
// # Stale agents
//
// ListStaleAgents takes its candidates from the staleness index (agents by last heartbeat, oldest
// first) and answers those the durable store confirms are not finished with a last sign of life
// (last heartbeat, or registration before the first) older than the threshold, whatever status
// they last reported: the seed's stale-heartbeat query, over the candidates only. An index that
// may be incomplete (Redis flushed or restarted, a new dev process) is rebuilt from the durable
// store first.
//
// # Stale and gone
//
// GetAgent, ListAgents and ListStaleAgents answer an agent as the Registry sees it: one that is
// not finished and has been silent past the stale window (default 30 s) is STALE, past the gone
// window (default 10 × the stale window) GONE, with the status it last reported in
// reported_status (see WithAgentWindows). ListAgents leaves GONE agents out unless asked for
// them. A heartbeat brings the agent back; STALE and GONE are never stored.
//
// # Sessions
//
// A registration may carry the agent process's session (boot id). The same instance registering
// with another session is a restart: the durable record starts afresh (INITIALIZING, task and
// error cleared) and every lock held by the instance id is released at once (see
// hot.ReleaseHolder), so that the next grant of each has a greater fencing token and the old
// process's renewals and releases are refused. The durable record keeps that the release is
// pending until it is done, so a registration retried after a failed release (Redis down)
// releases them then. A heartbeat naming a replaced session is refused with Aborted.
package registry

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/services/registry/hot"
	"github.com/converge-dev/converge/services/registry/store"
)

// Defaults of the options.
const (
	// DefaultSampleEvery is the heartbeat sampling period of the durable history.
	DefaultSampleEvery = 60 * time.Second
	// DefaultRetention is how long sampled heartbeats are kept.
	DefaultRetention = 24 * time.Hour
	// DefaultCleanupEvery is how often samples past the retention are deleted.
	DefaultCleanupEvery = 10 * time.Minute
	// DefaultOlderThan is ListStaleAgents' threshold when the request has none.
	DefaultOlderThan = 60 * time.Second
	// DefaultStaleWindow is how long an unfinished agent may be silent before it is answered
	// STALE: 60 s, the seed's stale-heartbeat query (seeds 000 and 001).
	DefaultStaleWindow = 60 * time.Second
	// GoneFactor is the default gone window in stale windows: past it a silent agent is GONE.
	GoneFactor = 10
	// livenessIntervals is the life of an agent's TTL key, in heartbeat intervals.
	livenessIntervals = 3
)

// Server implements registryv1.RegistryServiceServer.
type Server struct {
	registryv1.UnimplementedRegistryServiceServer

	store store.Store
	hot   hot.Backend
	// holders caches the agent instance → principal bindings checkHolder reads (identity.go).
	holders holderBindings

	logger       *slog.Logger
	now          func() time.Time
	sampleEvery  time.Duration
	retention    time.Duration
	cleanupEvery time.Duration
	cleanupHook  func(deleted int64, err error)
	// windows derive STALE and GONE.
	windows store.AgentWindows

	// reindexMu lets one request at a time rebuild the staleness index.
	reindexMu sync.Mutex
}

var _ registryv1.RegistryServiceServer = (*Server)(nil)

// Option configures New.
type Option func(*Server)

// WithLogger sends the service's logs (retention passes, unexpected errors) to l.
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.logger = l } }

// WithClock sets the clock of the retention loop (default time.Now): samples taken before
// now() - retention are deleted. Everything else uses the stores' clocks.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithHeartbeatSampling sets the sampling period of the heartbeat history (default 60 s).
func WithHeartbeatSampling(d time.Duration) Option { return func(s *Server) { s.sampleEvery = d } }

// WithHeartbeatRetention sets how long sampled heartbeats are kept (default 24 h).
func WithHeartbeatRetention(d time.Duration) Option { return func(s *Server) { s.retention = d } }

// WithCleanupInterval sets how often the retention loop runs (default 10 min).
func WithCleanupInterval(d time.Duration) Option { return func(s *Server) { s.cleanupEvery = d } }

// WithAgentWindows sets the windows of silence past which an unfinished agent is answered STALE
// (stale, default 30 s) and GONE (gone, default 10 × stale). A stale window of 0 or less keeps
// the default; a gone window of 0 or less is 10 × the stale window, and one shorter than the
// stale window is the stale window.
func WithAgentWindows(stale, gone time.Duration) Option {
	return func(s *Server) {
		if stale > 0 {
			s.windows.Stale = stale
		}
		s.windows.Gone = gone
	}
}

// New returns the Registry service on the durable store st and the hot state hb. Start runs its
// background work; the caller closes st and hb after that has ended.
func New(st store.Store, hb hot.Backend, opts ...Option) *Server {
	s := &Server{
		store:        st,
		hot:          hb,
		logger:       slog.Default(),
		now:          time.Now,
		sampleEvery:  DefaultSampleEvery,
		retention:    DefaultRetention,
		cleanupEvery: DefaultCleanupEvery,
		windows:      store.AgentWindows{Stale: DefaultStaleWindow},
	}
	for _, o := range opts {
		o(s)
	}
	if s.windows.Gone <= 0 {
		s.windows.Gone = GoneFactor * s.windows.Stale
	}
	s.windows.Gone = max(s.windows.Gone, s.windows.Stale)
	return s
}

// Start runs the background work, deleting sampled heartbeats past the retention (at once, then
// every cleanup interval), until ctx ends. The standalone binary starts it once the store's
// schema is current.
func (s *Server) Start(ctx context.Context) { go s.cleanupLoop(ctx) }

// Ready reports whether both stores answer: the service's health.
func (s *Server) Ready(ctx context.Context) error {
	return errors.Join(s.store.Ping(ctx), s.hot.Ping(ctx))
}

// cleanupLoop deletes old samples now and then every cleanup interval until ctx ends. A failed
// pass (the store is down) is logged and the next one tries again.
func (s *Server) cleanupLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cleanupEvery)
	defer ticker.Stop()
	for {
		n, err := s.CleanupHeartbeats(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.logger.WarnContext(ctx, "registry: heartbeat retention pass failed; retrying later", slog.Any("error", err))
		case n > 0:
			s.logger.InfoContext(ctx, "registry: deleted old heartbeat samples", slog.Int64("deleted", n), slog.Duration("retention", s.retention))
		}
		if s.cleanupHook != nil {
			s.cleanupHook(n, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// CleanupHeartbeats deletes the samples taken before the clock's now minus the retention, and
// answers how many.
func (s *Server) CleanupHeartbeats(ctx context.Context) (int64, error) {
	return s.store.DeleteHeartbeatsBefore(ctx, s.now().Add(-s.retention))
}

// --- locks ---

// AcquireLock grants a lock or names its holder, waiting up to req.wait.
func (s *Server) AcquireLock(ctx context.Context, req *registryv1.AcquireLockRequest) (*registryv1.AcquireLockResponse, error) {
	const msg = "AcquireLockRequest"
	resource, err := repopath.Clean(req.GetResource())
	if err != nil {
		return nil, invalidPath(msg, "resource", err)
	}
	ttl := req.GetTtl().AsDuration()
	if req.GetTtl() == nil || ttl <= 0 {
		return nil, invalid(msg, "ttl", "value is required")
	}
	if err := s.checkHolder(ctx, req.GetHolder()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	lock, granted, err := s.hot.Acquire(ctx, resource, req.GetHolder(), ttl, req.GetWait().AsDuration())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.AcquireLockResponse{Granted: granted, Lock: lockProto(lock)}, nil
}

// RenewLock extends a held lock.
func (s *Server) RenewLock(ctx context.Context, req *registryv1.RenewLockRequest) (*registryv1.RenewLockResponse, error) {
	const msg = "RenewLockRequest"
	resource, err := repopath.Clean(req.GetResource())
	if err != nil {
		return nil, invalidPath(msg, "resource", err)
	}
	ttl := req.GetTtl().AsDuration()
	if req.GetTtl() == nil || ttl <= 0 {
		return nil, invalid(msg, "ttl", "value is required")
	}
	if err := s.checkHolder(ctx, req.GetHolder()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	lock, err := s.hot.Renew(ctx, resource, req.GetHolder(), req.GetToken(), ttl)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.RenewLockResponse{Lock: lockProto(lock)}, nil
}

// ReleaseLock frees a held lock.
func (s *Server) ReleaseLock(ctx context.Context, req *registryv1.ReleaseLockRequest) (*registryv1.ReleaseLockResponse, error) {
	resource, err := repopath.Clean(req.GetResource())
	if err != nil {
		return nil, invalidPath("ReleaseLockRequest", "resource", err)
	}
	if err := s.checkHolder(ctx, req.GetHolder()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := s.hot.Release(ctx, resource, req.GetHolder(), req.GetToken()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.ReleaseLockResponse{}, nil
}

// GetLock answers the current lock of a resource.
func (s *Server) GetLock(ctx context.Context, req *registryv1.GetLockRequest) (*registryv1.GetLockResponse, error) {
	resource, err := repopath.Clean(req.GetResource())
	if err != nil {
		return nil, invalidPath("GetLockRequest", "resource", err)
	}
	lock, err := s.hot.Get(ctx, resource)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.GetLockResponse{Lock: lockProto(lock)}, nil
}

// ListLocks lists held locks by resource.
func (s *Server) ListLocks(ctx context.Context, req *registryv1.ListLocksRequest) (*registryv1.ListLocksResponse, error) {
	const msg = "ListLocksRequest"
	if strings.HasPrefix(req.GetPrefix(), "/") {
		return nil, invalid(msg, "prefix", "must be a repository-relative path prefix: no leading '/'")
	}
	tok, err := decodePageToken(req)
	if err != nil {
		return nil, err
	}
	locks, next, err := s.hot.List(ctx, hot.ListQuery{Prefix: req.GetPrefix(), Holder: req.GetHolder(), After: tok.After, Limit: pageSize(req.GetPageSize())})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res := &registryv1.ListLocksResponse{Locks: make([]*registryv1.Lock, len(locks))}
	for i, l := range locks {
		res.Locks[i] = lockProto(l)
	}
	if next != "" {
		res.NextPageToken = encodePageToken(req, pageCursor{After: next})
	}
	return res, nil
}

// --- ownership ---

// SetOwner records an ownership pattern.
func (s *Server) SetOwner(ctx context.Context, req *registryv1.SetOwnerRequest) (*registryv1.SetOwnerResponse, error) {
	pattern, err := repopath.CleanGlob(req.GetPattern())
	if err != nil {
		return nil, invalidPath("SetOwnerRequest", "pattern", err)
	}
	own, previous, err := s.store.SetOwner(ctx, pattern, req.GetOwner())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.SetOwnerResponse{Ownership: ownershipProto(own), PreviousOwner: previous}, nil
}

// GetOwner answers the most specific ownership of a path; none is not an error.
func (s *Server) GetOwner(ctx context.Context, req *registryv1.GetOwnerRequest) (*registryv1.GetOwnerResponse, error) {
	p, err := repopath.Clean(req.GetPath())
	if err != nil {
		return nil, invalidPath("GetOwnerRequest", "path", err)
	}
	own, err := s.store.OwnerOf(ctx, p)
	var notFound *store.NotFoundError
	if errors.As(err, &notFound) {
		return &registryv1.GetOwnerResponse{}, nil
	}
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.GetOwnerResponse{Ownership: ownershipProto(own)}, nil
}

// ReleaseOwner removes an ownership pattern of its owner.
func (s *Server) ReleaseOwner(ctx context.Context, req *registryv1.ReleaseOwnerRequest) (*registryv1.ReleaseOwnerResponse, error) {
	pattern, err := repopath.CleanGlob(req.GetPattern())
	if err != nil {
		return nil, invalidPath("ReleaseOwnerRequest", "pattern", err)
	}
	if err := s.store.ReleaseOwner(ctx, pattern, req.GetOwner()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.ReleaseOwnerResponse{}, nil
}

// ListOwners lists ownership patterns by pattern.
func (s *Server) ListOwners(ctx context.Context, req *registryv1.ListOwnersRequest) (*registryv1.ListOwnersResponse, error) {
	tok, err := decodePageToken(req)
	if err != nil {
		return nil, err
	}
	size := pageSize(req.GetPageSize())
	// One more than the page tells whether there is a next page.
	owns, err := s.store.ListOwners(ctx, store.ListOwnersQuery{Owner: req.GetOwner(), After: tok.After, Limit: size + 1})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res := &registryv1.ListOwnersResponse{}
	if len(owns) > size {
		owns = owns[:size]
		res.NextPageToken = encodePageToken(req, pageCursor{After: owns[size-1].Pattern})
	}
	for _, o := range owns {
		res.Ownerships = append(res.Ownerships, ownershipProto(o))
	}
	return res, nil
}

// --- agents ---

// livenessTTL is the life of an agent's TTL key.
func livenessTTL(a store.Agent) time.Duration {
	return livenessIntervals * a.Config.HeartbeatInterval
}

// RegisterAgent records an agent instance and puts it in the liveness index. A new session of
// the instance releases the locks the instance holds.
func (s *Server) RegisterAgent(ctx context.Context, req *registryv1.RegisterAgentRequest) (*registryv1.RegisterAgentResponse, error) {
	if err := s.checkInstance(ctx, req.GetInstanceId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	reg, err := s.store.RegisterAgent(ctx, store.NewAgent{
		InstanceID:  req.GetInstanceId(),
		ExecutionID: req.GetExecutionId(),
		AgentType:   req.GetAgentType(),
		WaveNumber:  req.GetWaveNumber(),
		Config:      configFromProto(req.GetConfig()),
		Host:        req.GetHost(),
		SessionID:   req.GetSessionId(),
		Principal:   auth.Name(ctx),
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	a := reg.Agent
	res := &registryv1.RegisterAgentResponse{}
	if reg.ReleaseLocks {
		// The process restarted: what its predecessor held is free at once. The durable record
		// says so until it is done, so a retry after a failure here releases them then.
		released, err := hot.ReleaseHolder(ctx, s.hot, a.InstanceID)
		for _, l := range released {
			res.ReleasedLocks = append(res.ReleasedLocks, lockProto(l))
		}
		if err != nil {
			return nil, s.toStatus(ctx, err)
		}
		if err := s.store.LocksReleased(ctx, a.InstanceID, a.SessionID); err != nil {
			return nil, s.toStatus(ctx, err)
		}
		res.ReplacedSessionId = reg.ReplacedSession
		s.logger.InfoContext(ctx, "registry: agent restarted with a new session; released its locks",
			slog.String("instance_id", a.InstanceID), slog.String("session_id", a.SessionID),
			slog.String("replaced_session_id", reg.ReplacedSession), slog.Int("released_locks", len(released)))
	}
	// In the index from the start, at its spawn time: an agent that stops before its first
	// heartbeat lands in the durable store and the index together, so that the index holds
	// every agent the store could call stale. (Again on a repeated registration: harmless.)
	if !a.Status.Final() {
		seen := cmp.Or(a.LastHeartbeat, a.SpawnedAt)
		if err := s.hot.Beat(ctx, a.InstanceID, seen, livenessTTL(a)); err != nil {
			return nil, s.toStatus(ctx, err)
		}
	}
	res.Agent = agentProto(a)
	return res, nil
}

// Heartbeat records an agent's report: durable first (the session and the state machine are
// checked there, under the agent's row lock), then the TTL key and the staleness index.
func (s *Server) Heartbeat(ctx context.Context, req *registryv1.HeartbeatRequest) (*registryv1.HeartbeatResponse, error) {
	status, ok := statusFromProto[req.GetStatus()]
	if !ok || !status.Reportable() {
		return nil, invalid("HeartbeatRequest", "status", "value must be one of the defined AgentStatus values except UNSPECIFIED, STALE and GONE")
	}
	if req.GetErrorContext() != nil && status != store.AgentFailed && status != store.AgentStuck {
		return nil, invalid("HeartbeatRequest", "error_context", "only with status AGENT_STATUS_FAILED or AGENT_STATUS_STUCK")
	}
	if err := s.checkInstance(ctx, req.GetInstanceId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	a, _, err := s.store.Heartbeat(ctx, store.Beat{
		InstanceID:      req.GetInstanceId(),
		Status:          status,
		CurrentTaskID:   req.GetCurrentTaskId(),
		ProgressPercent: req.GetProgressPercent(),
		MemoryUsageMB:   req.GetMemoryUsageMb(),
		CPUPercent:      req.GetCpuPercent(),
		ErrorContext:    errorContextFromProto(req.GetErrorContext()),
		SessionID:       req.GetSessionId(),
		SampleEvery:     s.sampleEvery,
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if a.Status.Final() {
		err = s.hot.Forget(ctx, a.InstanceID)
	} else {
		err = s.hot.Beat(ctx, a.InstanceID, a.LastHeartbeat, livenessTTL(a))
	}
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.HeartbeatResponse{Agent: agentProto(a), NextHeartbeat: durationpb.New(a.Config.HeartbeatInterval)}, nil
}

// GetAgent answers one agent instance, STALE or GONE when silent past the windows.
func (s *Server) GetAgent(ctx context.Context, req *registryv1.GetAgentRequest) (*registryv1.GetAgentResponse, error) {
	a, err := s.store.GetAgent(ctx, req.GetInstanceId(), s.windows)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &registryv1.GetAgentResponse{Agent: agentProto(a)}, nil
}

// visibleByDefault are the statuses ListAgents answers without a filter: all but GONE.
var visibleByDefault = []store.AgentStatus{
	store.AgentInitializing, store.AgentRunning, store.AgentIdle, store.AgentCompleted,
	store.AgentFailed, store.AgentStuck, store.AgentStale,
}

// ListAgents lists agent instances, newest first, filtered by their status as the Registry sees
// it; GONE ones only when asked for.
func (s *Server) ListAgents(ctx context.Context, req *registryv1.ListAgentsRequest) (*registryv1.ListAgentsResponse, error) {
	var statuses []store.AgentStatus
	for _, p := range req.GetStatuses() {
		st, ok := statusFromProto[p]
		if !ok {
			return nil, invalid("ListAgentsRequest", "statuses", "value must be one of the defined AgentStatus values except UNSPECIFIED")
		}
		if !slices.Contains(statuses, st) {
			statuses = append(statuses, st)
		}
	}
	slices.Sort(statuses)
	tok, err := decodePageToken(req)
	if err != nil {
		return nil, err
	}
	if len(statuses) == 0 {
		statuses = visibleByDefault
	}
	size := pageSize(req.GetPageSize())
	lq := store.ListAgentsQuery{ExecutionID: req.GetExecutionId(), Statuses: statuses, Windows: s.windows, Limit: size + 1}
	if tok.After != "" {
		lq.After = &store.AgentCursor{SpawnedAt: tok.AfterTime, InstanceID: tok.After}
	}
	agents, err := s.store.ListAgents(ctx, lq)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res := &registryv1.ListAgentsResponse{}
	if len(agents) > size {
		agents = agents[:size]
		last := agents[size-1]
		res.NextPageToken = encodePageToken(req, pageCursor{After: last.InstanceID, AfterTime: last.SpawnedAt})
	}
	for _, a := range agents {
		res.Agents = append(res.Agents, agentProto(a))
	}
	return res, nil
}

// ListStaleAgents lists unfinished agents whose heartbeat stopped, whatever status they last
// reported: candidates from the staleness index, confirmed by the durable store.
func (s *Server) ListStaleAgents(ctx context.Context, req *registryv1.ListStaleAgentsRequest) (*registryv1.ListStaleAgentsResponse, error) {
	olderThan := DefaultOlderThan
	if req.GetOlderThan() != nil {
		olderThan = req.GetOlderThan().AsDuration()
	}
	limit := pageSize(req.GetLimit())
	stale, err := s.staleAgents(ctx, olderThan, req.GetExecutionId(), limit)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res := &registryv1.ListStaleAgentsResponse{}
	for _, sa := range stale {
		res.Agents = append(res.Agents, &registryv1.StaleAgent{Agent: agentProto(sa.Agent), SecondsSinceHeartbeat: sa.SecondsSinceHeartbeat})
	}
	return res, nil
}

func (s *Server) staleAgents(ctx context.Context, olderThan time.Duration, execution string, limit int) ([]store.StaleAgent, error) {
	now, err := s.store.Now(ctx)
	if err != nil {
		return nil, err
	}
	before := now.Add(-olderThan)
	batch := max(2*limit, 64)
	var (
		out     []store.StaleAgent
		seen    = map[string]bool{}
		rebuilt bool
	)
	for offset := 0; len(out) < limit; {
		candidates, err := s.hot.Stale(ctx, before, offset, batch)
		if errors.Is(err, hot.ErrIndexLost) {
			if rebuilt {
				// Lost again right after the rebuild: the hot state is being reset under us.
				return nil, &store.UnavailableError{Err: err}
			}
			if err := s.rebuildIndex(ctx); err != nil {
				return nil, err
			}
			rebuilt = true
			continue
		}
		if err != nil {
			return nil, err
		}
		ids := make([]string, 0, len(candidates))
		for _, c := range candidates {
			ids = append(ids, c.InstanceID)
		}
		confirmed, err := s.store.StaleAgents(ctx, store.StaleQuery{InstanceIDs: ids, OlderThan: olderThan, ExecutionID: execution, Windows: s.windows})
		if err != nil {
			return nil, err
		}
		for _, sa := range confirmed {
			if !seen[sa.Agent.InstanceID] {
				seen[sa.Agent.InstanceID] = true
				out = append(out, sa)
			}
		}
		if len(candidates) < batch {
			break
		}
		offset += len(candidates)
	}
	slices.SortFunc(out, func(a, b store.StaleAgent) int {
		return cmp.Or(a.Agent.LastHeartbeat.Compare(b.Agent.LastHeartbeat), cmp.Compare(a.Agent.InstanceID, b.Agent.InstanceID))
	})
	return out[:min(limit, len(out))], nil
}

// rebuildIndex puts every unfinished agent of the durable store into the staleness index (the
// later of two times wins) and then marks the index complete.
func (s *Server) rebuildIndex(ctx context.Context) error {
	s.reindexMu.Lock()
	defer s.reindexMu.Unlock()
	const page = 1000
	after := ""
	for {
		live, err := s.store.LiveAgents(ctx, after, page)
		if err != nil {
			return err
		}
		seen := make([]hot.Seen, len(live))
		for i, l := range live {
			seen[i] = hot.Seen{InstanceID: l.InstanceID, At: l.LastSeen}
		}
		if err := s.hot.Reindex(ctx, seen); err != nil {
			return err
		}
		if len(live) < page {
			break
		}
		after = live[len(live)-1].InstanceID
	}
	s.logger.InfoContext(ctx, "registry: rebuilt the staleness index from the durable store")
	return s.hot.MarkIndexed(ctx)
}
