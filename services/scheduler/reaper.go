package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The reaper takes back work whose holder is gone: leases that expired, assignments of agents the
// Registry reports stale, and those of an agent that restarted (a claim from a new session).

// reaperBatch bounds the assignments one reaper round reads.
const reaperBatch = 500

// defaultStaleAfter is how long an agent's Registry heartbeat may be silent before the reaper
// takes its assignments back: 60 s, the seed's stale-heartbeat window (seeds 000 and 001: "agents
// that haven't sent heartbeat in > 60 seconds").
const defaultStaleAfter = 60 * time.Second

// registryTimeout bounds each Registry call of the reaper and of a session replacement.
const registryTimeout = 5 * time.Second

// reapStale requeues the assignments held by agents the Registry reports stale (whatever their
// reported status) when the Scheduler has not heard from them for the stale window either. A
// Registry that cannot be reached is only logged: leases still bound how long a dead agent holds
// work.
func (s *Server) reapStale(ctx context.Context) error {
	if s.registry == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, registryTimeout)
	res, err := s.registry.ListStaleAgents(rctx, &registryv1.ListStaleAgentsRequest{
		OlderThan: durationpb.New(s.staleAfter), Limit: 1000})
	cancel()
	if err != nil {
		s.log.Warn("scheduler reaper: list stale agents", "err", err)
		return nil
	}
	if len(res.GetAgents()) == 0 {
		return nil
	}
	stale := make(map[string]int64, len(res.GetAgents()))
	instances := make([]string, 0, len(res.GetAgents()))
	for _, a := range res.GetAgents() {
		id := a.GetAgent().GetInstanceId()
		stale[id] = a.GetSecondsSinceHeartbeat()
		instances = append(instances, id)
	}
	held, err := s.store.HeldAssignments(ctx, instances, reaperBatch)
	if err != nil {
		return err
	}
	// silent: the Scheduler has not heard from a's holder (claim or report) for the stale window.
	silent := func(a *store.Assignment, now time.Time) (time.Duration, bool) {
		last := a.GetAssignTime().AsTime()
		if t := a.GetLastReportTime(); t != nil && t.AsTime().After(last) {
			last = t.AsTime()
		}
		return now.Sub(last), now.Sub(last) >= s.staleAfter
	}
	byAgent := map[string][]*store.Assignment{}
	var order []string
	for _, x := range held {
		if _, ok := silent(x, s.now()); !ok {
			continue // the Scheduler still hears from it (checked again in the transaction)
		}
		if _, ok := byAgent[x.GetInstanceId()]; !ok {
			order = append(order, x.GetInstanceId())
		}
		byAgent[x.GetInstanceId()] = append(byAgent[x.GetInstanceId()], x)
	}
	for _, instance := range order {
		secs := stale[instance]
		// The locks first: the next holder of the task must not wait for the dead one's.
		s.releaseLocks(ctx, instance, fmt.Sprintf("the Registry reports it stale (no heartbeat for %d s)", secs))
		for _, x := range byAgent[instance] {
			err := s.takeBack(ctx, x, "AGENT_STALE", commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, func(r *runner, a *store.Assignment) (string, bool) {
				quiet, ok := silent(a, r.tx.Now())
				if !ok {
					return "", false // it reported since
				}
				return fmt.Sprintf("lease of %s (token %d) revoked: the Registry reports the agent stale (no heartbeat for %d s) and it has not reported for %s",
					a.GetInstanceId(), a.GetFencingToken(), secs, quiet.Round(time.Millisecond)), true
			})
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	return nil
}

// releaseLocks releases every lock instance holds in the Registry (ListLocks by holder, then
// ReleaseLock with each lock's token), so the next agent does not wait a lock TTL for a dead
// holder. Fencing stays: the next grant of a resource gets a higher token, so a late write of
// the old holder is refused. A Registry that cannot be reached, or a lock that changed hands
// meanwhile, is logged and skipped: the locks then end with their TTL.
func (s *Server) releaseLocks(ctx context.Context, instance, why string) {
	if s.registry == nil {
		return
	}
	var token string
	for range 100 { // at most 100 pages of 1000 locks
		rctx, cancel := context.WithTimeout(ctx, registryTimeout)
		res, err := s.registry.ListLocks(rctx, &registryv1.ListLocksRequest{Holder: instance, PageSize: 1000, PageToken: token})
		cancel()
		if err != nil {
			s.log.Warn("scheduler: list the locks of an agent whose work is taken back; they end with their TTL",
				"instance", instance, "why", why, "err", err)
			return
		}
		for _, l := range res.GetLocks() {
			if l.GetHolder() != instance || l.GetToken() <= 0 {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, registryTimeout)
			_, err := s.registry.ReleaseLock(rctx, &registryv1.ReleaseLockRequest{Resource: l.GetResource(), Holder: instance, Token: l.GetToken()})
			cancel()
			if err != nil {
				s.log.Warn("scheduler: release a lock of an agent whose work is taken back",
					"instance", instance, "resource", l.GetResource(), "token", l.GetToken(), "why", why, "err", err)
				continue
			}
			s.log.Info("scheduler: released a lock of an agent whose work is taken back",
				"instance", instance, "resource", l.GetResource(), "token", l.GetToken(), "why", why)
		}
		if token = res.GetNextPageToken(); token == "" {
			return
		}
	}
}

// replaceSessions takes back at once what instance holds under a session other than session (a
// claim from a new process of the same instance: the old one crashed or was restarted), after
// releasing the instance's locks, with code AGENT_RESTARTED. Assignments leased without a session
// are left alone. Each replica checks an instance once per session it sees.
func (s *Server) replaceSessions(ctx context.Context, instance, session string) error {
	if session == "" || s.sessions.seen(instance, session) {
		return nil
	}
	held, err := s.store.HeldAssignments(ctx, []string{instance}, reaperBatch)
	if err != nil {
		return err
	}
	var old []*store.Assignment
	for _, a := range held {
		if a.SessionID != "" && a.SessionID != session {
			old = append(old, a)
		}
	}
	if len(old) > 0 {
		s.releaseLocks(ctx, instance, fmt.Sprintf("the agent restarted (new session %s)", session))
	}
	for _, x := range old {
		err := s.takeBack(ctx, x, "AGENT_RESTARTED", commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, func(r *runner, a *store.Assignment) (string, bool) {
			if a.SessionID == "" || a.SessionID == session {
				return "", false
			}
			return fmt.Sprintf("lease of %s (token %d) revoked: the agent restarted (session %s replaced %s)",
				a.GetInstanceId(), a.GetFencingToken(), session, a.SessionID), true
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	s.sessions.remember(instance, session)
	return nil
}

// sessions remembers the last session each instance claimed with on this replica, up to
// maxSessions instances (then it starts over: a miss costs one store read).
type sessions struct {
	mu sync.Mutex
	m  map[string]string
}

const maxSessions = 1 << 14

func (ss *sessions) seen(instance, session string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[instance] == session
}

func (ss *sessions) remember(instance, session string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil || len(ss.m) >= maxSessions {
		ss.m = make(map[string]string)
	}
	ss.m[instance] = session
}

// reap requeues expired leases.
func (s *Server) reap(ctx context.Context) error {
	expired, err := s.store.ExpiredLeases(ctx, reaperBatch)
	if err != nil {
		return err
	}
	for _, x := range expired {
		err := s.takeBack(ctx, x, "LEASE_EXPIRED", commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, func(r *runner, a *store.Assignment) (string, bool) {
			if r.tx.Now().Before(a.GetLeaseExpireTime().AsTime()) {
				return "", false // renewed since
			}
			return fmt.Sprintf("lease of %s (token %d) expired at %s", a.GetInstanceId(), a.GetFencingToken(),
				a.GetLeaseExpireTime().AsTime().UTC().Format(time.RFC3339Nano)), true
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return s.reapStale(ctx)
}

// takeBack requeues the assignment x names (as x's holder had it: same fencing token, still
// held) when why says so in the transaction, logging ev with the reason; a run that has ended
// just records it cancelled.
func (s *Server) takeBack(ctx context.Context, x *store.Assignment, code string, ev commonv1.EventType,
	why func(r *runner, a *store.Assignment) (string, bool)) error {
	return s.update(ctx, x.GetExecutionId(), func(r *runner) error {
		a, err := r.tx.Assignment(x.GetId())
		if err != nil {
			return err
		}
		// Only the lease x saw: not one re-leased since.
		if !held(a.GetStatus()) || a.GetFencingToken() != x.GetFencingToken() {
			return nil
		}
		reason, ok := why(r, a)
		if !ok {
			return nil
		}
		w, err := r.wave(a.GetWaveNumber())
		if err != nil {
			return err
		}
		if w.GetActiveAgents() > 0 {
			w.ActiveAgents--
		}
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && r.e.GetRunningTasks() > 0 {
			r.e.RunningTasks--
			r.changed = true
		}
		if err := r.log(entry(ev, a, reason,
			map[string]any{"fencing_token": float64(a.GetFencingToken()), "assignment_id": a.GetId()})); err != nil {
			return err
		}
		if ended(r.e) {
			a.Status = schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED
			a.CompleteTime = r.now()
			if err := r.putWave(w); err != nil {
				return err
			}
			return r.tx.PutAssignment(a)
		}
		return r.requeue(a, w, code, reason)
	})
}
