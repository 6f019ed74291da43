package scheduler

import (
	"context"
	"fmt"

	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Identity binding (docs/security.md): an assignment's lease belongs to the principal that
// claimed it (Assignment.principal). Only that principal, or an operator, may report progress,
// record checkpoints and complete it; and a principal may not claim as an agent instance whose
// held assignments another principal claimed (which would take them back as a "restart"), nor
// as one the Registry says another principal registered (admit.go). A server that
// authenticates nobody binds nothing.

// checkAssignment answers a *auth.NotYoursError when the caller may not act as a's holder.
func checkAssignment(ctx context.Context, a *store.Assignment) error {
	return auth.CheckActsFor(ctx, fmt.Sprintf("the holder (%s) of assignment %s", a.GetInstanceId(), a.GetId()), a.GetPrincipal())
}

// checkInstance answers a *auth.NotYoursError when another principal holds assignments as agent
// instance id.
func (s *Server) checkInstance(ctx context.Context, id string) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Has(auth.RoleOperator) {
		return nil
	}
	held, err := s.store.HeldAssignments(ctx, []string{id}, reaperBatch)
	if err != nil {
		return err
	}
	for _, a := range held {
		if err := auth.CheckActsFor(ctx, fmt.Sprintf("agent instance %q", id), a.GetPrincipal()); err != nil {
			return err
		}
	}
	return nil
}
