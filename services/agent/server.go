// Package agent is converge's Agent service: see DESIGN.md §1. The worker loop itself is package
// worker; this service is its control surface (status, drain) and runs single tasks (RunTask).
package agent

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/agent/worker"
)

// Version is reported by GetStatus; set at build time with -ldflags.
var Version = "dev"

// Server implements agentv1.AgentServiceServer over one worker.
type Server struct {
	agentv1.UnimplementedAgentServiceServer
	w *worker.Worker
}

// Option configures a Server.
type Option func(*Server)

// WithWorker serves w. Without a worker every RPC answers FailedPrecondition.
func WithWorker(w *worker.Worker) Option { return func(s *Server) { s.w = w } }

// New returns the Agent service.
func New(opts ...Option) *Server {
	s := &Server{}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ agentv1.AgentServiceServer = (*Server)(nil)

// GetStatus tells what the worker is doing.
func (s *Server) GetStatus(context.Context, *agentv1.GetStatusRequest) (*agentv1.GetStatusResponse, error) {
	if s.w == nil {
		return nil, noWorker()
	}
	st := s.w.Snapshot()
	res := &agentv1.GetStatusResponse{InstanceId: s.w.InstanceID(), Status: st.State, CurrentAssignment: st.Assignment,
		CurrentTask: st.Task, ProgressPercent: st.ProgressPercent, ProgressMessage: st.ProgressMessage,
		ClaimedCount: st.Claimed, CompletedCount: st.Completed, FailedCount: st.Failed,
		ConsecutiveFailures: st.ConsecutiveFailures, ActiveRunTasks: st.ActiveRunTasks, Draining: st.Draining,
		Capabilities: s.w.Capabilities(), Version: Version, StartTime: timestamppb.New(s.w.StartTime()),
		Uptime: durationpb.New(time.Since(s.w.StartTime())), Registered: st.Registered, LastError: st.LastError,
		Config: &commonv1.AgentConfig{}}
	if !st.DrainDeadline.IsZero() {
		res.DrainDeadlineTime = timestamppb.New(st.DrainDeadline)
	}
	if !st.LastHeartbeat.IsZero() {
		res.LastHeartbeatTime = timestamppb.New(st.LastHeartbeat)
	}
	return res, nil
}

// Drain makes the worker finish its work, claim nothing more and stop.
func (s *Server) Drain(_ context.Context, req *agentv1.DrainRequest) (*agentv1.DrainResponse, error) {
	if s.w == nil {
		return nil, noWorker()
	}
	var deadline time.Duration
	if d := req.GetDeadline(); d != nil {
		deadline = d.AsDuration()
		if deadline == 0 {
			deadline = -1 // 0 = cancel now
		}
	}
	s.w.Drain(deadline)
	st := s.w.Snapshot()
	res := &agentv1.DrainResponse{Draining: true, ActiveRunTasks: st.ActiveRunTasks}
	if st.Assignment != nil {
		res.CurrentAssignmentId = st.Assignment.GetId()
	}
	if !st.DrainDeadline.IsZero() {
		res.DrainDeadlineTime = timestamppb.New(st.DrainDeadline)
	}
	return res, nil
}

// RunTask runs one task through the PIV loop and streams its events; the last message carries
// the result.
func (s *Server) RunTask(req *agentv1.RunTaskRequest, stream grpc.ServerStreamingServer[agentv1.RunTaskResponse]) error {
	if s.w == nil {
		return noWorker()
	}
	err := s.w.RunTask(stream.Context(), req, stream.Send)
	if errors.Is(err, worker.ErrDraining) {
		return draining()
	}
	return toStatus(err)
}
