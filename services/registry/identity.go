package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/registry/store"
)

// Identity binding (docs/security.md): an agent instance belongs to the principal that registered
// it first (store.Agent.Principal). Only that principal, or an operator, may register it again,
// heartbeat for it, or acquire, renew and release locks with it as the holder. A server that
// authenticates nobody binds nothing.

// checkInstance answers a *auth.NotYoursError when the caller may not act as agent instance id.
// An instance nobody registered binds nobody for registration (the caller is about to own it).
func (s *Server) checkInstance(ctx context.Context, id string) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Has(auth.RoleOperator) {
		return nil
	}
	a, err := s.store.GetAgent(ctx, id, store.AgentWindows{})
	var notFound *store.NotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return auth.CheckActsFor(ctx, fmt.Sprintf("agent instance %q", id), a.Principal)
}

// checkHolder answers a *auth.NotYoursError when the caller may not hold locks as holder: a
// non-operator principal holds locks only as an agent instance it registered.
func (s *Server) checkHolder(ctx context.Context, holder string) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Has(auth.RoleOperator) {
		return nil
	}
	what := fmt.Sprintf("lock holder %q", holder)
	if owner, ok := s.holders.get(holder); ok {
		return auth.CheckActsFor(ctx, what, owner)
	}
	a, err := s.store.GetAgent(ctx, holder, store.AgentWindows{})
	var notFound *store.NotFoundError
	if errors.As(err, &notFound) {
		return &auth.NotYoursError{Principal: p.Name, What: what + " (no agent instance of that id is registered: register it first)", Owner: "nobody"}
	}
	if err != nil {
		return err
	}
	if a.Principal == "" {
		// Registered by a server that authenticated nobody: only operators may take it over.
		return &auth.NotYoursError{Principal: p.Name, What: what, Owner: ""}
	}
	s.holders.put(holder, a.Principal)
	return auth.CheckActsFor(ctx, what, a.Principal)
}

// maxHolderBindings bounds holderBindings: past it the cache starts over (an agent's next lock
// RPC reads its binding from the store again).
const maxHolderBindings = 10000

// holderBindings caches agent instance → principal for checkHolder, so that a lock RPC with auth
// on does not read the durable store every time. Safe because a binding never changes once made:
// the first registration by an authenticated principal binds the instance to it for good (only
// that principal or an operator registers it again, and the store keeps the first principal;
// agent rows are never deleted). Instances registered by nobody ("" principal, which a later
// principal may still claim) are not cached.
type holderBindings struct {
	mu sync.RWMutex
	m  map[string]string
}

func (h *holderBindings) get(holder string) (string, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	p, ok := h.m[holder]
	return p, ok
}

func (h *holderBindings) put(holder, principal string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHolderBindings {
		h.m = make(map[string]string)
	}
	h.m[holder] = principal
}
