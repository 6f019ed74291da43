package scheduler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/auth"
)

// ClaimTask asks the Registry, when the Scheduler has one, whether the claiming agent is
// registered and not stale (seed 000: work goes to live agents only): an unknown instance, or one
// the Registry answers STALE, GONE or final (COMPLETED, FAILED), is refused FailedPrecondition.
// A live answer is remembered for admitFor, so a busy agent's claims cost one Registry call per
// window; a Registry that cannot be reached admits the claim (logged): leases still bound how long
// a dead agent can hold work.

// admitFor is how long a live answer of the Registry admits an instance's claims.
const admitFor = 5 * time.Second

// admitted remembers, per instance, until when it is known live.
type admitted struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (a *admitted) live(instance string, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return now.Before(a.m[instance])
}

func (a *admitted) remember(instance string, until time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil || len(a.m) >= maxSessions {
		a.m = make(map[string]time.Time)
	}
	a.m[instance] = until
}

// admit checks instance with the Registry (see above).
func (s *Server) admit(ctx context.Context, instance string) error {
	// The answer admits this caller only: another principal asks again (and may be refused).
	key := instance + "\x00" + auth.Name(ctx)
	if s.registry == nil || s.admitted.live(key, time.Now()) {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, registryTimeout)
	res, err := s.registry.GetAgent(rctx, &registryv1.GetAgentRequest{InstanceId: instance})
	cancel()
	switch {
	case status.Code(err) == codes.NotFound:
		return failedPrecondition("agent %s is not registered: register it with the Registry (RegisterAgent) and heartbeat before claiming work", instance)
	case err != nil:
		s.log.Warn("scheduler: the Registry cannot say whether a claiming agent is live; admitting the claim", "instance", instance, "err", err)
		return nil
	}
	// The instance is its registering principal's (identity.go): another may not claim as it.
	if err := auth.CheckActsFor(ctx, fmt.Sprintf("agent instance %q", instance), res.GetAgent().GetPrincipal()); err != nil {
		return err
	}
	switch st := res.GetAgent().GetStatus(); st {
	case commonv1.AgentStatus_AGENT_STATUS_STALE, commonv1.AgentStatus_AGENT_STATUS_GONE,
		commonv1.AgentStatus_AGENT_STATUS_COMPLETED, commonv1.AgentStatus_AGENT_STATUS_FAILED:
		return failedPrecondition("agent %s is %s in the Registry: heartbeat (or register again) before claiming work", instance, st)
	}
	s.admitted.remember(key, time.Now().Add(admitFor))
	return nil
}
