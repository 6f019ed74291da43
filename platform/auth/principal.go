// Package auth is converge's trust model: who a caller is (a Principal), what
// it may do (its Roles), and the per-method policy every server enforces.
//
// A server authenticates each call (a bearer token from its auth file, or an
// mTLS client certificate) and puts the caller's Principal in the call's
// context; handlers read it with FromContext to bind self-asserted fields
// (an agent's instance_id, a lock's holder, a verdict's who) to the caller.
package auth

import (
	"context"
	"slices"
)

// Role is a set of permissions a principal holds. The policy table maps each
// RPC to the roles that may call it.
type Role string

// The roles converge knows.
const (
	// RoleOperator runs the system: every RPC, including human sign-off,
	// draining agents and administrative calls.
	RoleOperator Role = "operator"
	// RoleAgent is a worker: claim, heartbeat, complete its own assignments,
	// lock and release as itself, read and record knowledge.
	RoleAgent Role = "agent"
	// RoleVerifyClient may run Verify Done and read its reports (another
	// team reusing the Verifier).
	RoleVerifyClient Role = "verify-client"
	// RoleKnowledgeClient may query and record gotchas (another team
	// reusing the Knowledge service).
	RoleKnowledgeClient Role = "knowledge-client"
	// RoleReadOnly may call the read RPCs of every service.
	RoleReadOnly Role = "read-only"
)

// Roles lists every role, in a stable order (for policy matrices and docs).
var Roles = []Role{RoleOperator, RoleAgent, RoleVerifyClient, RoleKnowledgeClient, RoleReadOnly}

// Principal is an authenticated caller.
type Principal struct {
	// Name identifies the caller in logs, provenance and quotas, e.g.
	// "agent-pool-a" or "ops:alice".
	Name string
	// Roles are what the caller may do.
	Roles []Role
}

// Has reports whether p holds role r.
func (p Principal) Has(r Role) bool { return slices.Contains(p.Roles, r) }

type principalKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the principal of the call ctx belongs to. ok is false
// when the server authenticates nobody (an embedded or loopback server run
// with authentication off): such a server trusts every caller, and callers of
// FromContext must treat !ok as "no identity to bind to", not as a refusal.
func FromContext(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}
