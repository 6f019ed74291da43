package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/backoff"
)

// watchReadiness keeps one service's health in step with its Ready probe
// until ctx is cancelled. While the probe fails it retries with backoff
// (100ms doubling to 5s) and the service is NOT_SERVING; once it answers the
// service is SERVING and the probe is repeated every ReadyProbeInterval.
func (s *Server) watchReadiness(ctx context.Context, svc Service) {
	name := svc.Desc.ServiceName
	b := backoff.New()
	serving := false
	for {
		err := probe(ctx, svc.Ready)
		if ctx.Err() != nil {
			return // shutting down; the probe failed because of that
		}

		var wait time.Duration
		switch {
		case err == nil:
			b.Reset()
			wait = s.cfg.ReadyProbeInterval
			if !serving {
				// Logged first so that the log explains any change a
				// health watcher sees.
				s.logger.Info(name+" ready; health SERVING", "service", name)
				serving = true
				s.setServing(name, true)
			}
		case serving:
			wait = b.Next()
			s.logger.Warn(fmt.Sprintf("%s store no longer ready, health NOT_SERVING: %v; retrying in %s", name, err, roundDelay(wait)),
				"service", name, "error", err)
			serving = false
			s.setServing(name, false)
		default:
			wait = b.Next()
			s.logger.Warn(fmt.Sprintf("%s store not ready: %v; retrying in %s", name, err, roundDelay(wait)),
				"service", name, "error", err)
		}

		if backoff.Wait(ctx, wait) != nil {
			return
		}
	}
}

// probe calls ready with a bounded context.
func probe(ctx context.Context, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyProbeTimeout)
	defer cancel()
	return ready(ctx)
}

// roundDelay makes jittered delays readable in logs ("1.53s").
func roundDelay(d time.Duration) time.Duration {
	return d.Round(10 * time.Millisecond)
}

// setServing records a service's readiness in health, and the overall status
// "", which is SERVING only when every service is. Pass "" alone to refresh
// the overall status. It does nothing once draining has begun.
func (s *Server) setServing(service string, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	if service != "" {
		s.serving[service] = ready
		if ready {
			s.everReady[service] = true
		}
		s.health.SetServingStatus(service, servingStatus(ready))
	}
	all := true
	for _, ok := range s.serving {
		all = all && ok
	}
	s.health.SetServingStatus("", servingStatus(all))
}

func servingStatus(ready bool) healthgrpc.HealthCheckResponse_ServingStatus {
	if ready {
		return healthgrpc.HealthCheckResponse_SERVING
	}
	return healthgrpc.HealthCheckResponse_NOT_SERVING
}

// healthService is grpc-go's health server, except that Watch streams end
// with Unavailable when GracefulStop begins. Watchers have seen NOT_SERVING
// for DrainDelay by then; without this, each open Watch would hold
// GracefulStop until ShutdownTimeout.
type healthService struct {
	*health.Server
	stopCtx context.Context
}

// Watch implements grpc.health.v1.Health/Watch.
func (h *healthService) Watch(req *healthgrpc.HealthCheckRequest, stream healthgrpc.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.stopCtx, cancel)()

	err := h.Server.Watch(req, &watchStream{Health_WatchServer: stream, ctx: ctx})
	if h.stopCtx.Err() != nil {
		return status.Error(codes.Unavailable, "server is shutting down")
	}
	return err
}

// watchStream replaces the context of a Watch stream.
type watchStream struct {
	healthgrpc.Health_WatchServer
	ctx context.Context
}

func (w *watchStream) Context() context.Context { return w.ctx }
