package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// defaultStaleAfter is how long an agent's Registry heartbeat may be silent before the reaper
// takes its assignments back: three of the worker's idle heartbeats (10 s).
const defaultStaleAfter = 30 * time.Second

// WithRegistry lets the reaper ask the Registry for stale agents (ListStaleAgents) and requeue
// what they hold before their leases run out: a lease is three execution heartbeats (90 s by
// default), a dead agent's Registry heartbeat stops after staleAfter (0: 30 s). An assignment is
// only taken back when the Scheduler has not heard from its holder for as long either (no report
// within max(staleAfter, 1.5 heartbeats)), so an agent cut off from the Registry alone keeps its
// work. Without a Registry, expired leases alone free a dead agent's work.
func WithRegistry(c registryv1.RegistryServiceClient, staleAfter time.Duration) Option {
	return func(s *Server) {
		s.registry = c
		if staleAfter <= 0 {
			staleAfter = defaultStaleAfter
		}
		s.staleAfter = staleAfter
	}
}

// reapStale requeues the assignments held by agents the Registry reports stale. A Registry that
// cannot be reached is only logged: leases still bound how long a dead agent holds work.
func (s *Server) reapStale(ctx context.Context) error {
	if s.registry == nil {
		return nil
	}
	res, err := s.registry.ListStaleAgents(ctx, &registryv1.ListStaleAgentsRequest{
		OlderThan: durationpb.New(s.staleAfter), Limit: 1000})
	if err != nil {
		s.log.Warn("scheduler reaper: list stale agents", "err", err)
		return nil
	}
	if len(res.GetAgents()) == 0 {
		return nil
	}
	stale := make(map[string]int64, len(res.GetAgents()))
	for _, a := range res.GetAgents() {
		stale[a.GetAgent().GetInstanceId()] = a.GetSecondsSinceHeartbeat()
	}
	open, err := s.store.ExecutionsInStatus(ctx, []schedulerv1.ExecutionStatus{
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED}, 1000)
	if err != nil {
		return err
	}
	for _, e := range open {
		silentFor := max(s.staleAfter, 3*e.GetOptions().GetAgentConfig().GetHeartbeatInterval().AsDuration()/2)
		// One read per execution: what is held, kept when its holder is stale.
		held, _, err := s.store.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: e.GetId(),
			Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING},
			PageSize: 1000})
		if err != nil {
			return err
		}
		for _, x := range held {
			secs, ok := stale[x.GetInstanceId()]
			if !ok {
				continue
			}
			err := s.takeBack(ctx, x, "AGENT_STALE", commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, func(r *runner, a *store.Assignment) (string, bool) {
				last := a.GetAssignTime().AsTime()
				if t := a.GetLastReportTime(); t != nil && t.AsTime().After(last) {
					last = t.AsTime()
				}
				if r.tx.Now().Sub(last) < silentFor {
					return "", false // the Scheduler still hears from it
				}
				return fmt.Sprintf("lease of %s (token %d) revoked: the Registry reports the agent stale (no heartbeat for %d s) and it has not reported for %s",
					a.GetInstanceId(), a.GetFencingToken(), secs, r.tx.Now().Sub(last).Round(time.Millisecond)), true
			})
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
	}
	return nil
}
