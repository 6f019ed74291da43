// Package server is the one way converge builds and runs a gRPC server, in
// the style of spicedb's Config → Complete → Run:
//
//	srv, err := server.Config{
//		Name:       "registry",
//		ListenAddr: ":7070",
//		AuthTokens: tokens,
//		Services: []server.Service{{
//			Desc:  &registryv1.RegistryService_ServiceDesc,
//			Impl:  handlers,
//			Ready: store.Ping,
//		}},
//	}.Complete()
//	if err != nil { ... }
//	ctx, stop := server.SignalContext(context.Background())
//	defer stop()
//	err = srv.ListenAndServe(ctx) // until SIGINT/SIGTERM, then drain
//
// Every server gets the same interceptor chain (request id, logging,
// Prometheus metrics, bearer-token auth, protovalidate, panic recovery; see
// interceptorChain), OpenTelemetry tracing, server reflection (v1 and
// v1alpha) and grpc.health.v1.Health. Health reports each service
// NOT_SERVING until its Ready probe succeeds and again while draining.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/telemetry"
)

// Server is a completed, runnable gRPC server. Build it with Config.Complete
// and run it once with Serve or ListenAndServe.
type Server struct {
	cfg    *completedConfig
	logger *slog.Logger
	grpc   *grpc.Server
	health *health.Server

	// stopCtx is cancelled when GracefulStop begins; it ends health Watch
	// streams, which would otherwise hold GracefulStop until the hard stop.
	stopCtx context.Context
	stopAll context.CancelFunc

	started atomic.Bool

	// authTable is who may call (authz.go); replaced whole by ReloadAuth.
	authTable atomic.Pointer[auth.Table]
	conns     *connTracker // the listener's connections (limits.go)
	// inprocChain is the unary interceptor chain (unaryChain, the wire's too), and inproc the
	// unary methods, for in-process calls (inproc.go).
	inprocChain grpc.UnaryServerInterceptor
	inproc      map[string]*inprocMethod
	quotas      *quotas // per-principal calls in flight (limits.go)

	mu      sync.Mutex
	serving map[string]bool // service name → ready
	// everReady holds the services whose Ready probe has succeeded once (see notReady).
	everReady map[string]bool
	draining  bool
}

func newServer(cc *completedConfig) (*Server, error) {
	s := &Server{
		cfg:     cc,
		logger:  cc.Logger,
		health:  health.NewServer(),
		serving: make(map[string]bool, len(cc.Services)),

		everReady: make(map[string]bool, len(cc.Services)),
	}
	s.stopCtx, s.stopAll = context.WithCancel(context.Background())
	s.authTable.Store(cc.authTable)
	s.conns = newConnTracker(cc.Limits.MaxConnections, cc.Logger)
	s.quotas = newQuotas(cc.Limits)

	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	if err := cc.Registerer.Register(metrics); err != nil {
		// Several servers sharing one registry share one set of metrics.
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("server: register gRPC metrics: %w", err)
		}
		existing, ok := are.ExistingCollector.(*grpcprom.ServerMetrics)
		if !ok {
			return nil, fmt.Errorf("server: register gRPC metrics: %w", err)
		}
		metrics = existing
	}

	unary, stream := s.interceptorChain(metrics)
	s.inprocChain = unary
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(unary),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(cc.MaxRecvMsgBytes),
		// A request that does not decode is InvalidArgument, not grpc-go's Internal (codec.go).
		grpc.ForceServerCodecV2(newRequestCodec()),
		// Calls run on a pool of long-lived goroutines whose stacks have grown already, instead
		// of a new goroutine per call that grows its stack (copystack) through the interceptor
		// chain and protovalidate's CEL: 5 % of the CPU of a lock RPC (bench/PROFILE.md).
		grpc.NumStreamWorkers(streamWorkers()),
		// Static flow-control windows (client.Dial sets the same): with grpc-go's dynamic
		// windows every call that carries data makes the receiver send a BDP ping, answered by
		// the peer, and a connection WINDOW_UPDATE: three writes a side for a unary call instead
		// of one (bench/PROFILE.md, branch p17grpc). 1 MiB a stream bounds what a caller can
		// make the server buffer for a stream more tightly than the dynamic window (up to
		// 16 MiB); grpc-go replenishes the connection's window as frames arrive.
		grpc.InitialWindowSize(StreamWindowBytes),
		grpc.InitialConnWindowSize(ConnWindowBytes),
	}
	// Connections, streams, keepalive (limits.go).
	opts = append(opts, s.limitOptions()...)
	if cc.tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cc.tlsConfig)))
	}
	if !cc.DisableTracing && telemetry.OTelConfigured() {
		// Health probes would be most of the spans; leave them out. Without a provider or
		// propagator set the handler would only cost CPU (platform/telemetry).
		opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)))
	}
	s.grpc = grpc.NewServer(opts...)

	for _, svc := range cc.Services {
		s.grpc.RegisterService(svc.Desc, svc.Impl)
		s.inprocRegister(svc.Desc, svc.Impl)
	}

	// Health: the overall status "" and every service start NOT_SERVING.
	hs := &healthService{Server: s.health, stopCtx: s.stopCtx}
	healthgrpc.RegisterHealthServer(s.grpc, hs)
	s.inprocRegister(&healthgrpc.Health_ServiceDesc, hs)
	s.health.SetServingStatus("", healthgrpc.HealthCheckResponse_NOT_SERVING)
	for _, svc := range cc.Services {
		s.serving[svc.Desc.ServiceName] = false
		s.health.SetServingStatus(svc.Desc.ServiceName, healthgrpc.HealthCheckResponse_NOT_SERVING)
	}

	// Reflection: grpcurl tries v1 first and falls back to v1alpha.
	reflOpts := reflection.ServerOptions{
		Services:           s.grpc,
		DescriptorResolver: descriptorResolver(cc.DescriptorResolver),
		ExtensionResolver:  cc.ExtensionResolver,
	}
	reflectionv1.RegisterServerReflectionServer(s.grpc, reflection.NewServerV1(reflOpts))
	reflectionv1alpha.RegisterServerReflectionServer(s.grpc, reflection.NewServer(reflOpts))

	// Pre-create the metric series of every method so dashboards show zeros
	// rather than nothing.
	metrics.InitializeMetrics(s.grpc)
	return s, nil
}

// MetricsHandler serves the Prometheus metrics of the server's Registerer in
// the text exposition format. It is what MetricsAddr serves at /metrics; use
// it to mount metrics elsewhere. If the Registerer is not a Gatherer it
// answers 404.
func (s *Server) MetricsHandler() http.Handler {
	if s.cfg.gatherer == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(s.cfg.gatherer, promhttp.HandlerOpts{})
}

// ListenAndServe listens on Config.ListenAddr and calls Serve.
func (s *Server) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", s.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("server: listen on %s: %w", s.cfg.ListenAddr, err)
	}
	return s.Serve(ctx, lis)
}

// Serve serves gRPC on lis (and metrics on Config.MetricsAddr, if set) until
// ctx is cancelled, then shuts down:
//
//  1. health reports NOT_SERVING for everything;
//  2. after DrainDelay, GracefulStop: no new calls, running calls finish;
//  3. calls still running after ShutdownTimeout are cut by Stop.
//
// It returns nil after a shutdown (graceful or not; a hard stop is logged) and
// an error if serving failed. Serve may be called once per Server; it closes
// lis.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if !s.started.CompareAndSwap(false, true) {
		_ = lis.Close()
		return errors.New("server: Serve called more than once")
	}
	if err := s.checkListener(lis); err != nil {
		_ = lis.Close()
		return err
	}

	s.reloadOnHangup(ctx)
	metricsSrv, err := s.startMetrics(ctx)
	if err != nil {
		_ = lis.Close()
		return err
	}
	if s.cfg.Limits.MaxConnections > 0 {
		lis = &limitListener{Listener: lis, t: s.conns}
	}

	// Readiness loops run until shutdown begins.
	probeCtx, stopProbes := context.WithCancel(ctx)
	var probes sync.WaitGroup
	for _, svc := range s.cfg.Services {
		if svc.Ready == nil {
			s.setServing(svc.Desc.ServiceName, true)
			continue
		}
		probes.Go(func() { s.watchReadiness(probeCtx, svc) })
	}
	if len(s.cfg.Services) == 0 {
		s.setServing("", true) // nothing to wait for
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.grpc.Serve(lis) }()
	s.logger.Info("serving gRPC",
		"addr", lis.Addr().String(),
		"services", s.serviceNames(),
		"tls", s.cfg.tlsConfig != nil,
		"auth", s.authMode(),
		"limits", s.cfg.Limits.String(),
	)

	select {
	case err := <-serveErr:
		// The listener failed before shutdown was asked for.
		stopProbes()
		probes.Wait()
		s.grpc.Stop()
		s.stopMetrics(metricsSrv)
		return fmt.Errorf("server: serve gRPC: %w", err)
	case <-ctx.Done():
	}

	stopProbes()
	probes.Wait()
	s.drainAndStop()
	s.stopMetrics(metricsSrv)

	// grpc.Server.Serve returns nil once stopped, or ErrServerStopped if the
	// stop won the race against its start.
	if err := <-serveErr; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("server: serve gRPC: %w", err)
	}
	s.logger.Info("server stopped")
	return nil
}

// drainAndStop turns health NOT_SERVING, waits DrainDelay, then stops
// gracefully within ShutdownTimeout or hard.
func (s *Server) drainAndStop() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.health.Shutdown() // everything NOT_SERVING, and stays so
	s.logger.Info("draining: health NOT_SERVING", "drain_delay", s.cfg.DrainDelay)

	if s.cfg.DrainDelay > 0 {
		timer := time.NewTimer(s.cfg.DrainDelay)
		<-timer.C
	}

	s.stopAll()
	stopped := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		s.logger.Warn("graceful stop did not finish in time; cutting remaining calls",
			"shutdown_timeout", s.cfg.ShutdownTimeout)
		// Stop closes every connection and returns; unlike GracefulStop
		// it does not wait for handlers that ignore their cancelled
		// context, so neither do we.
		s.grpc.Stop()
	}
}

// checkListener applies the open-server rule of Complete to the listener
// actually used, which may differ from ListenAddr when Serve is called
// directly.
func (s *Server) checkListener(lis net.Listener) error {
	if s.cfg.authenticates() || s.cfg.AllowUnauthenticated {
		return nil
	}
	if addr, ok := lis.Addr().(*net.TCPAddr); ok && !addr.IP.IsLoopback() {
		return fmt.Errorf("server: refusing to serve on non-loopback address %s without authentication: "+
			unauthenticatedHint, addr)
	}
	return nil
}

// startMetrics starts the /metrics HTTP server if MetricsAddr is set.
func (s *Server) startMetrics(ctx context.Context) (*http.Server, error) {
	if s.cfg.MetricsAddr == "" {
		return nil, nil
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", s.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("server: listen for metrics on %s: %w", s.cfg.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metricsAuth(s.MetricsHandler()))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("metrics server failed", "error", err)
		}
	}()
	s.logger.Info("serving metrics", "addr", lis.Addr().String(), "path", "/metrics")
	return srv, nil
}

// stopMetrics shuts the metrics server down, giving scrapes in progress a
// few seconds.
func (s *Server) stopMetrics(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
}

func (s *Server) serviceNames() []string {
	names := make([]string, 0, len(s.cfg.Services))
	for _, svc := range s.cfg.Services {
		names = append(names, svc.Desc.ServiceName)
	}
	slices.Sort(names)
	return names
}

// authMode describes how callers authenticate, for the startup log.
func (s *Server) authMode() string {
	mtls := s.cfg.mtls()
	tokens := s.cfg.AuthFile != "" || len(s.cfg.AuthTokens) > 0
	switch {
	case tokens && mtls:
		return "bearer+mtls"
	case tokens:
		return "bearer"
	case mtls:
		return "mtls"
	default:
		return "none"
	}
}

// SignalContext returns a context cancelled on SIGINT or SIGTERM, for passing
// to Serve or ListenAndServe. The first signal starts the graceful shutdown;
// the handler is then released, so a second signal kills the process as
// usual. Call stop when done to release it in any case.
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// The HTTP/2 flow-control windows every converge server and client (platform/client) use.
// Static: a value of 64 KiB or more turns grpc-go's BDP estimation off, and its pings with it.
const (
	// StreamWindowBytes is how much a peer may send on one stream before the receiver's
	// application has read it.
	StreamWindowBytes = 1 << 20
	// ConnWindowBytes is how much a peer may send on one connection, all streams together,
	// before the receiver acknowledges it.
	ConnWindowBytes = 16 << 20
)

// streamWorkers is the size of the pool of goroutines that run calls: a few per CPU (a call
// that finds every worker busy gets a goroutine of its own, as without the pool).
func streamWorkers() uint32 { return uint32(4 * runtime.GOMAXPROCS(0)) }
