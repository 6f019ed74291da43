// Package agent is converge's Agent service: see DESIGN.md §1.
package agent

import (
	"context"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	"google.golang.org/grpc"
)

// Server implements agentv1.AgentServiceServer.
type Server struct {
	agentv1.UnimplementedAgentServiceServer
}

// New returns the Agent service.
func New() *Server { return &Server{} }

var _ agentv1.AgentServiceServer = (*Server)(nil)

// GetStatus answers Unimplemented until the Agent issue (#5) builds it: the agent worker loop.
func (s *Server) GetStatus(context.Context, *agentv1.GetStatusRequest) (*agentv1.GetStatusResponse, error) {
	return nil, unimplemented("GetStatus", "the agent worker loop")
}

// Drain answers Unimplemented until the Agent issue (#5) builds it: the agent worker loop.
func (s *Server) Drain(context.Context, *agentv1.DrainRequest) (*agentv1.DrainResponse, error) {
	return nil, unimplemented("Drain", "the agent worker loop")
}

// RunTask answers Unimplemented until the Agent issue (#5) builds it: the PIV loop in git worktrees.
func (s *Server) RunTask(*agentv1.RunTaskRequest, grpc.ServerStreamingServer[agentv1.RunTaskResponse]) error {
	return unimplemented("RunTask", "the PIV loop in git worktrees")
}
