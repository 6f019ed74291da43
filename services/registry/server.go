// Package registry is converge's Registry service: see DESIGN.md §1.
package registry

import (
	"context"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"

	"github.com/converge-dev/converge/services/registry/store"
)

// Server implements registryv1.RegistryServiceServer on a store.
type Server struct {
	registryv1.UnimplementedRegistryServiceServer
	store store.Store
}

// New returns the Registry service on st.
func New(st store.Store) *Server { return &Server{store: st} }

var _ registryv1.RegistryServiceServer = (*Server)(nil)

// AcquireLock answers Unimplemented until the Registry issue (#3) builds it: file locks with TTL and fencing tokens.
func (s *Server) AcquireLock(context.Context, *registryv1.AcquireLockRequest) (*registryv1.AcquireLockResponse, error) {
	return nil, unimplemented("AcquireLock", "file locks with TTL and fencing tokens")
}

// RenewLock answers Unimplemented until the Registry issue (#3) builds it: file locks with TTL and fencing tokens.
func (s *Server) RenewLock(context.Context, *registryv1.RenewLockRequest) (*registryv1.RenewLockResponse, error) {
	return nil, unimplemented("RenewLock", "file locks with TTL and fencing tokens")
}

// ReleaseLock answers Unimplemented until the Registry issue (#3) builds it: file locks with TTL and fencing tokens.
func (s *Server) ReleaseLock(context.Context, *registryv1.ReleaseLockRequest) (*registryv1.ReleaseLockResponse, error) {
	return nil, unimplemented("ReleaseLock", "file locks with TTL and fencing tokens")
}

// GetLock answers Unimplemented until the Registry issue (#3) builds it: file locks with TTL and fencing tokens.
func (s *Server) GetLock(context.Context, *registryv1.GetLockRequest) (*registryv1.GetLockResponse, error) {
	return nil, unimplemented("GetLock", "file locks with TTL and fencing tokens")
}

// ListLocks answers Unimplemented until the Registry issue (#3) builds it: file locks with TTL and fencing tokens.
func (s *Server) ListLocks(context.Context, *registryv1.ListLocksRequest) (*registryv1.ListLocksResponse, error) {
	return nil, unimplemented("ListLocks", "file locks with TTL and fencing tokens")
}

// SetOwner answers Unimplemented until the Registry issue (#3) builds it: glob ownership of paths.
func (s *Server) SetOwner(context.Context, *registryv1.SetOwnerRequest) (*registryv1.SetOwnerResponse, error) {
	return nil, unimplemented("SetOwner", "glob ownership of paths")
}

// GetOwner answers Unimplemented until the Registry issue (#3) builds it: glob ownership of paths.
func (s *Server) GetOwner(context.Context, *registryv1.GetOwnerRequest) (*registryv1.GetOwnerResponse, error) {
	return nil, unimplemented("GetOwner", "glob ownership of paths")
}

// ReleaseOwner answers Unimplemented until the Registry issue (#3) builds it: glob ownership of paths.
func (s *Server) ReleaseOwner(context.Context, *registryv1.ReleaseOwnerRequest) (*registryv1.ReleaseOwnerResponse, error) {
	return nil, unimplemented("ReleaseOwner", "glob ownership of paths")
}

// ListOwners answers Unimplemented until the Registry issue (#3) builds it: glob ownership of paths.
func (s *Server) ListOwners(context.Context, *registryv1.ListOwnersRequest) (*registryv1.ListOwnersResponse, error) {
	return nil, unimplemented("ListOwners", "glob ownership of paths")
}

// RegisterAgent answers Unimplemented until the Registry issue (#3) builds it: agent registration and heartbeats.
func (s *Server) RegisterAgent(context.Context, *registryv1.RegisterAgentRequest) (*registryv1.RegisterAgentResponse, error) {
	return nil, unimplemented("RegisterAgent", "agent registration and heartbeats")
}

// Heartbeat answers Unimplemented until the Registry issue (#3) builds it: agent registration and heartbeats.
func (s *Server) Heartbeat(context.Context, *registryv1.HeartbeatRequest) (*registryv1.HeartbeatResponse, error) {
	return nil, unimplemented("Heartbeat", "agent registration and heartbeats")
}

// GetAgent answers Unimplemented until the Registry issue (#3) builds it: agent registration and heartbeats.
func (s *Server) GetAgent(context.Context, *registryv1.GetAgentRequest) (*registryv1.GetAgentResponse, error) {
	return nil, unimplemented("GetAgent", "agent registration and heartbeats")
}

// ListAgents answers Unimplemented until the Registry issue (#3) builds it: agent registration and heartbeats.
func (s *Server) ListAgents(context.Context, *registryv1.ListAgentsRequest) (*registryv1.ListAgentsResponse, error) {
	return nil, unimplemented("ListAgents", "agent registration and heartbeats")
}

// ListStaleAgents answers Unimplemented until the Registry issue (#3) builds it: stale-agent detection.
func (s *Server) ListStaleAgents(context.Context, *registryv1.ListStaleAgentsRequest) (*registryv1.ListStaleAgentsResponse, error) {
	return nil, unimplemented("ListStaleAgents", "stale-agent detection")
}
