// Package scheduler is converge's Scheduler service: see DESIGN.md §1.
package scheduler

import (
	"context"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"

	"github.com/converge-dev/converge/services/scheduler/store"
	"google.golang.org/grpc"
)

// Server implements schedulerv1.SchedulerServiceServer on a store.
type Server struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	store store.Store
}

// New returns the Scheduler service on st.
func New(st store.Store) *Server { return &Server{store: st} }

var _ schedulerv1.SchedulerServiceServer = (*Server)(nil)

// Task lists are in tasklists.go, PlanWaves in waves.go. The RPCs below answer Unimplemented
// until the rest of the Scheduler issue (#5) builds them.

// StartExecution answers Unimplemented until the Scheduler issue (#5) builds it: execution runs.
func (s *Server) StartExecution(context.Context, *schedulerv1.StartExecutionRequest) (*schedulerv1.StartExecutionResponse, error) {
	return nil, unimplemented("StartExecution", "execution runs")
}

// GetExecution answers Unimplemented until the Scheduler issue (#5) builds it: execution runs.
func (s *Server) GetExecution(context.Context, *schedulerv1.GetExecutionRequest) (*schedulerv1.GetExecutionResponse, error) {
	return nil, unimplemented("GetExecution", "execution runs")
}

// ListExecutions answers Unimplemented until the Scheduler issue (#5) builds it: execution runs.
func (s *Server) ListExecutions(context.Context, *schedulerv1.ListExecutionsRequest) (*schedulerv1.ListExecutionsResponse, error) {
	return nil, unimplemented("ListExecutions", "execution runs")
}

// ListAssignments answers Unimplemented until the Scheduler issue (#5) builds it: wave assignments and leases.
func (s *Server) ListAssignments(context.Context, *schedulerv1.ListAssignmentsRequest) (*schedulerv1.ListAssignmentsResponse, error) {
	return nil, unimplemented("ListAssignments", "wave assignments and leases")
}

// WatchExecution answers Unimplemented until the Scheduler issue (#5) builds it: the resumable execution event stream.
func (s *Server) WatchExecution(*schedulerv1.WatchExecutionRequest, grpc.ServerStreamingServer[schedulerv1.WatchExecutionResponse]) error {
	return unimplemented("WatchExecution", "the resumable execution event stream")
}

// PauseExecution answers Unimplemented until the Scheduler issue (#5) builds it: execution control.
func (s *Server) PauseExecution(context.Context, *schedulerv1.PauseExecutionRequest) (*schedulerv1.PauseExecutionResponse, error) {
	return nil, unimplemented("PauseExecution", "execution control")
}

// ResumeExecution answers Unimplemented until the Scheduler issue (#5) builds it: execution control.
func (s *Server) ResumeExecution(context.Context, *schedulerv1.ResumeExecutionRequest) (*schedulerv1.ResumeExecutionResponse, error) {
	return nil, unimplemented("ResumeExecution", "execution control")
}

// CancelExecution answers Unimplemented until the Scheduler issue (#5) builds it: execution control.
func (s *Server) CancelExecution(context.Context, *schedulerv1.CancelExecutionRequest) (*schedulerv1.CancelExecutionResponse, error) {
	return nil, unimplemented("CancelExecution", "execution control")
}

// RetryTask answers Unimplemented until the Scheduler issue (#5) builds it: task retry and skip.
func (s *Server) RetryTask(context.Context, *schedulerv1.RetryTaskRequest) (*schedulerv1.RetryTaskResponse, error) {
	return nil, unimplemented("RetryTask", "task retry and skip")
}

// SkipTask answers Unimplemented until the Scheduler issue (#5) builds it: task retry and skip.
func (s *Server) SkipTask(context.Context, *schedulerv1.SkipTaskRequest) (*schedulerv1.SkipTaskResponse, error) {
	return nil, unimplemented("SkipTask", "task retry and skip")
}

// GetExecutionLog answers Unimplemented until the Scheduler issue (#5) builds it: the execution log.
func (s *Server) GetExecutionLog(context.Context, *schedulerv1.GetExecutionLogRequest) (*schedulerv1.GetExecutionLogResponse, error) {
	return nil, unimplemented("GetExecutionLog", "the execution log")
}

// GetHandoffContext answers Unimplemented until the Scheduler issue (#5) builds it: stuck-agent handoff context.
func (s *Server) GetHandoffContext(context.Context, *schedulerv1.GetHandoffContextRequest) (*schedulerv1.GetHandoffContextResponse, error) {
	return nil, unimplemented("GetHandoffContext", "stuck-agent handoff context")
}

// ClaimTask answers Unimplemented until the Scheduler issue (#5) builds it: leases for workers.
func (s *Server) ClaimTask(context.Context, *schedulerv1.ClaimTaskRequest) (*schedulerv1.ClaimTaskResponse, error) {
	return nil, unimplemented("ClaimTask", "leases for workers")
}

// ReportProgress answers Unimplemented until the Scheduler issue (#5) builds it: leases for workers.
func (s *Server) ReportProgress(context.Context, *schedulerv1.ReportProgressRequest) (*schedulerv1.ReportProgressResponse, error) {
	return nil, unimplemented("ReportProgress", "leases for workers")
}

// RecordCheckpoint answers Unimplemented until the Scheduler issue (#5) builds it: checkpoints.
func (s *Server) RecordCheckpoint(context.Context, *schedulerv1.RecordCheckpointRequest) (*schedulerv1.RecordCheckpointResponse, error) {
	return nil, unimplemented("RecordCheckpoint", "checkpoints")
}

// CompleteTask answers Unimplemented until the Scheduler issue (#5) builds it: leases for workers.
func (s *Server) CompleteTask(context.Context, *schedulerv1.CompleteTaskRequest) (*schedulerv1.CompleteTaskResponse, error) {
	return nil, unimplemented("CompleteTask", "leases for workers")
}

// StartFeatureBuild answers Unimplemented until the Scheduler issue (#5) builds it: the build-feature loop.
func (s *Server) StartFeatureBuild(context.Context, *schedulerv1.StartFeatureBuildRequest) (*schedulerv1.StartFeatureBuildResponse, error) {
	return nil, unimplemented("StartFeatureBuild", "the build-feature loop")
}

// GetFeatureBuild answers Unimplemented until the Scheduler issue (#5) builds it: the build-feature loop.
func (s *Server) GetFeatureBuild(context.Context, *schedulerv1.GetFeatureBuildRequest) (*schedulerv1.GetFeatureBuildResponse, error) {
	return nil, unimplemented("GetFeatureBuild", "the build-feature loop")
}

// ListFeatureBuilds answers Unimplemented until the Scheduler issue (#5) builds it: the build-feature loop.
func (s *Server) ListFeatureBuilds(context.Context, *schedulerv1.ListFeatureBuildsRequest) (*schedulerv1.ListFeatureBuildsResponse, error) {
	return nil, unimplemented("ListFeatureBuilds", "the build-feature loop")
}

// CancelFeatureBuild answers Unimplemented until the Scheduler issue (#5) builds it: the build-feature loop.
func (s *Server) CancelFeatureBuild(context.Context, *schedulerv1.CancelFeatureBuildRequest) (*schedulerv1.CancelFeatureBuildResponse, error) {
	return nil, unimplemented("CancelFeatureBuild", "the build-feature loop")
}
