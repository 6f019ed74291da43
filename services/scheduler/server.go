// Package scheduler is converge's Scheduler service: see DESIGN.md §1.
package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// Server implements schedulerv1.SchedulerServiceServer on a store.
type Server struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	store       store.Store
	verifier    verifierv1.VerifierServiceClient
	workDir     string
	log         *slog.Logger
	driverEvery time.Duration
	lists       lists
	wake        *signal
	owners      owners   // assignment → execution
	sessions    sessions // instance → the last session it claimed with
	registry    registryv1.RegistryServiceClient
	staleAfter  time.Duration
	// verifyTries and verifyBackoff bound the retries of a Verifier that answers a retryable
	// error; verifying marks the executions whose Verify Done is in flight.
	verifyTries   int
	verifyBackoff backoffPolicy
	verifying     sync.Map
}

// New returns the Scheduler service on st. Start runs its background driver.
func New(st store.Store, opts ...Option) *Server {
	s := &Server{
		store: st, log: slog.New(slog.DiscardHandler), driverEvery: driverInterval, wake: newSignal(),
		lists: lists{m: map[string]*store.TaskList{}, index: map[string]map[string]int{}, byExecution: map[string]string{}},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ schedulerv1.SchedulerServiceServer = (*Server)(nil)

// Task lists are in tasklists.go, PlanWaves in waves.go. The RPCs below answer Unimplemented
// until the rest of the Scheduler issue (#5) builds them.

// StartFeatureBuild answers Unimplemented until the build-feature loop is built.
func (s *Server) StartFeatureBuild(context.Context, *schedulerv1.StartFeatureBuildRequest) (*schedulerv1.StartFeatureBuildResponse, error) {
	return nil, unimplemented("StartFeatureBuild", "the build-feature loop")
}

// GetFeatureBuild answers Unimplemented until the build-feature loop is built.
func (s *Server) GetFeatureBuild(context.Context, *schedulerv1.GetFeatureBuildRequest) (*schedulerv1.GetFeatureBuildResponse, error) {
	return nil, unimplemented("GetFeatureBuild", "the build-feature loop")
}

// ListFeatureBuilds answers Unimplemented until the build-feature loop is built.
func (s *Server) ListFeatureBuilds(context.Context, *schedulerv1.ListFeatureBuildsRequest) (*schedulerv1.ListFeatureBuildsResponse, error) {
	return nil, unimplemented("ListFeatureBuilds", "the build-feature loop")
}

// CancelFeatureBuild answers Unimplemented until the build-feature loop is built.
func (s *Server) CancelFeatureBuild(context.Context, *schedulerv1.CancelFeatureBuildRequest) (*schedulerv1.CancelFeatureBuildResponse, error) {
	return nil, unimplemented("CancelFeatureBuild", "the build-feature loop")
}
