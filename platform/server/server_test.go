package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/converge-dev/converge/gen"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/server"
)

const (
	serving    = healthgrpc.HealthCheckResponse_SERVING
	notServing = healthgrpc.HealthCheckResponse_NOT_SERVING
)

var registryName = registryv1.RegistryService_ServiceDesc.ServiceName

// watchHealth opens a health Watch stream for service.
func watchHealth(t *testing.T, conn *grpc.ClientConn, service string) healthgrpc.Health_WatchClient {
	t.Helper()
	stream, err := healthgrpc.NewHealthClient(conn).Watch(t.Context(), &healthgrpc.HealthCheckRequest{Service: service})
	require.NoError(t, err)
	return stream
}

// nextStatus returns the next status a Watch stream reports.
func nextStatus(t *testing.T, stream healthgrpc.Health_WatchClient) healthgrpc.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := stream.Recv()
	require.NoError(t, err)
	return resp.GetStatus()
}

// waitStatus reads a Watch stream until it reports want.
func waitStatus(t *testing.T, stream healthgrpc.Health_WatchClient, want healthgrpc.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for {
		if nextStatus(t, stream) == want {
			return
		}
	}
}

func checkHealth(t *testing.T, conn *grpc.ClientConn, service string) healthgrpc.HealthCheckResponse_ServingStatus {
	t.Helper()
	resp, err := healthgrpc.NewHealthClient(conn).Check(t.Context(), &healthgrpc.HealthCheckRequest{Service: service})
	require.NoError(t, err)
	return resp.GetStatus()
}

func TestHealthWaitsForReady(t *testing.T) {
	t.Parallel()

	var calls atomic.Int32
	ts := startServer(t, server.Config{
		Services: []server.Service{{
			Desc: &registryv1.RegistryService_ServiceDesc,
			Impl: &registryService{},
			Ready: func(context.Context) error {
				if n := calls.Add(1); n <= 3 {
					return fmt.Errorf("connection refused (attempt %d)", n)
				}
				return nil
			},
		}},
	})
	conn := ts.dial(t)

	require.Eventually(t, func() bool {
		return checkHealth(t, conn, registryName) == serving
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, serving, checkHealth(t, conn, ""))
	require.GreaterOrEqual(t, calls.Load(), int32(4))

	// Each failure was logged at WARN with the retry delay.
	logs := ts.logs.String()
	for n := 1; n <= 3; n++ {
		require.Contains(t, logs, fmt.Sprintf("converge.registry.v1.RegistryService store not ready: connection refused (attempt %d); retrying in ", n))
	}
	require.Contains(t, logs, "level=WARN")
	require.Contains(t, logs, "converge.registry.v1.RegistryService ready; health SERVING")
}

func TestHealthFollowsProbe(t *testing.T) {
	t.Parallel()

	var healthy atomic.Bool
	probed := make(chan struct{}, 1)
	ts := startServer(t, server.Config{
		ReadyProbeInterval: 10 * time.Millisecond,
		Services: []server.Service{{
			Desc: &registryv1.RegistryService_ServiceDesc,
			Impl: &registryService{},
			Ready: func(context.Context) error {
				select {
				case probed <- struct{}{}:
				default:
				}
				if !healthy.Load() {
					return errors.New("store down")
				}
				return nil
			},
		}},
	})
	conn := ts.dial(t)
	svc := watchHealth(t, conn, registryName)
	overall := watchHealth(t, conn, "")

	// Not serving while the probe fails, however often it is retried.
	require.Equal(t, notServing, nextStatus(t, svc))
	require.Equal(t, notServing, nextStatus(t, overall))
	<-probed
	<-probed
	require.Equal(t, notServing, checkHealth(t, conn, registryName))

	healthy.Store(true)
	require.Equal(t, serving, nextStatus(t, svc))
	require.Equal(t, serving, nextStatus(t, overall))

	// A later probe failure flips it back, and recovery flips it again.
	healthy.Store(false)
	require.Equal(t, notServing, nextStatus(t, svc))
	require.Equal(t, notServing, nextStatus(t, overall))
	require.Contains(t, ts.logs.String(), "store no longer ready, health NOT_SERVING: store down")

	healthy.Store(true)
	require.Equal(t, serving, nextStatus(t, svc))
	require.Equal(t, serving, nextStatus(t, overall))
}

func TestHealthOverallNeedsEveryService(t *testing.T) {
	t.Parallel()

	var registryReady atomic.Bool
	b := newBlocker()
	ts := startServer(t, server.Config{
		Services: []server.Service{
			b.service(), // no Ready: serving at once
			{
				Desc: &registryv1.RegistryService_ServiceDesc,
				Impl: &registryService{},
				Ready: func(context.Context) error {
					if !registryReady.Load() {
						return errors.New("not yet")
					}
					return nil
				},
			},
		},
	})
	conn := ts.dial(t)

	require.Eventually(t, func() bool {
		return checkHealth(t, conn, "converge.test.v1.Blocker") == serving
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, notServing, checkHealth(t, conn, registryName))
	require.Equal(t, notServing, checkHealth(t, conn, ""))

	registryReady.Store(true)
	waitStatus(t, watchHealth(t, conn, ""), serving)
	require.Equal(t, serving, checkHealth(t, conn, registryName))

	// Unknown services are reported as such.
	_, err := healthgrpc.NewHealthClient(conn).Check(t.Context(), &healthgrpc.HealthCheckRequest{Service: "nope.v1.Nope"})
	require.Equal(t, codes.NotFound, status.Code(err))
}

func TestDrain(t *testing.T) {
	t.Parallel()

	b := newBlocker()
	ts := startServer(t, server.Config{
		// Long enough for the NOT_SERVING update to reach the watcher
		// before its stream is ended; ordering is otherwise guaranteed by
		// the blocked call.
		DrainDelay: 300 * time.Millisecond,
		Services:   []server.Service{b.service()},
	})
	conn := ts.dial(t)

	watch := watchHealth(t, conn, "")
	waitStatus(t, watch, serving)

	// A call is in flight when shutdown starts.
	callErr := make(chan error, 1)
	go func() {
		callErr <- conn.Invoke(context.Background(), blockMethod, &emptypb.Empty{}, &emptypb.Empty{})
	}()
	<-b.entered

	ts.cancel()

	// Health goes NOT_SERVING while the server is still up.
	require.Equal(t, notServing, nextStatus(t, watch))
	require.False(t, ts.hasStopped())

	// When GracefulStop begins, Watch streams end rather than hold it up.
	_, err := watch.Recv()
	require.Equal(t, codes.Unavailable, status.Code(err), "err: %v", err)
	require.Contains(t, status.Convert(err).Message(), "shutting down")

	// The in-flight call holds the stop until it finishes, then succeeds.
	require.False(t, ts.hasStopped())
	close(b.release)
	require.NoError(t, <-callErr)
	require.NoError(t, ts.stop())
	require.Contains(t, ts.logs.String(), "draining: health NOT_SERVING")
}

func TestHardStop(t *testing.T) {
	t.Parallel()

	b := newBlocker()
	// Registered first so it runs last: the handler is still blocked when
	// the server has stopped.
	t.Cleanup(func() { close(b.release) })

	ts := startServer(t, server.Config{
		ShutdownTimeout: 100 * time.Millisecond,
		Services:        []server.Service{b.service()},
	})
	conn := ts.dial(t)

	callErr := make(chan error, 1)
	go func() {
		callErr <- conn.Invoke(context.Background(), blockMethod, &emptypb.Empty{}, &emptypb.Empty{})
	}()
	<-b.entered

	require.NoError(t, ts.stop())
	require.Equal(t, codes.Unavailable, status.Code(<-callErr))
	require.Contains(t, ts.logs.String(), "graceful stop did not finish in time; cutting remaining calls")
}

func TestServeTwice(t *testing.T) {
	t.Parallel()

	srv, err := server.Config{Logger: discardLogger(), DrainDelay: -1}.Complete()
	require.NoError(t, err)

	// An already cancelled context: Serve starts, drains and returns at once.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.NoError(t, srv.Serve(ctx, newLoopbackListener(t)))

	require.ErrorContains(t, srv.Serve(ctx, newLoopbackListener(t)), "Serve called more than once")
}

func TestServeRefusesOpenNonLoopbackListener(t *testing.T) {
	t.Parallel()

	srv, err := server.Config{Logger: discardLogger()}.Complete()
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	err = srv.Serve(t.Context(), lis)
	require.ErrorContains(t, err, "refusing to serve on non-loopback address")
}

func TestListenAndServeWithMetrics(t *testing.T) {
	t.Parallel()

	addr, metricsAddr := freeAddr(t), freeAddr(t)
	srv, err := server.Config{
		ListenAddr:  addr,
		MetricsAddr: metricsAddr,
		Logger:      discardLogger(),
		DrainDelay:  -1,
	}.Complete()
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx) }()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	require.Eventually(t, func() bool {
		resp, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == serving
	}, 10*time.Second, 10*time.Millisecond)

	body := httpGet(t, "http://"+metricsAddr+"/metrics")
	require.Contains(t, body, `grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"}`)
	require.Contains(t, body, "grpc_server_handling_seconds_bucket")
	require.Contains(t, body, "go_goroutines") // default registry has the Go collector

	cancel()
	require.NoError(t, <-done)

	// Both listeners are closed after shutdown.
	_, err = net.Dial("tcp", metricsAddr)
	require.Error(t, err)
	_, err = net.Dial("tcp", addr)
	require.Error(t, err)
}

func TestMetricsOnRegisterer(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	impl := &registryService{}
	ts := startServer(t, server.Config{
		Registerer: reg,
		Services:   []server.Service{registry(impl)},
	})
	conn := ts.dial(t)
	client := registryv1.NewRegistryServiceClient(conn)

	// Series exist for every method before any call.
	require.Equal(t, 0.0, counterValue(t, reg, "grpc_server_handled_total", map[string]string{
		"grpc_service": registryName, "grpc_method": "AcquireLock", "grpc_code": "OK",
	}))

	_, err := client.AcquireLock(t.Context(), validLock())
	require.NoError(t, err)
	_, err = client.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{})
	require.Error(t, err)

	require.Equal(t, 1.0, counterValue(t, reg, "grpc_server_handled_total", map[string]string{
		"grpc_service": registryName, "grpc_method": "AcquireLock", "grpc_code": "OK",
	}))
	// Rejected calls are counted too.
	require.Equal(t, 1.0, counterValue(t, reg, "grpc_server_handled_total", map[string]string{
		"grpc_service": registryName, "grpc_method": "AcquireLock", "grpc_code": "InvalidArgument",
	}))

	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	require.Contains(t, names, "grpc_server_handling_seconds")
}

func TestMetricsHandler(t *testing.T) {
	t.Parallel()

	srv, err := server.Config{Logger: discardLogger()}.Complete()
	require.NoError(t, err)

	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "grpc_server_handled_total")
}

func TestReflection(t *testing.T) {
	t.Parallel()

	files, err := gen.Files()
	require.NoError(t, err)

	withComments := startServer(t, server.Config{
		DescriptorResolver: files,
		Services:           []server.Service{registry(&registryService{})},
	})
	plain := startServer(t, server.Config{
		Services: []server.Service{registry(&registryService{})},
	})

	t.Run("V1ListsServices", func(t *testing.T) {
		t.Parallel()
		resp := reflectV1(t, withComments.dial(t), &reflectionv1.ServerReflectionRequest{
			MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
		})
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		require.Contains(t, names, registryName)
		require.Contains(t, names, "grpc.health.v1.Health")
		require.Contains(t, names, "grpc.reflection.v1.ServerReflection")
		require.Contains(t, names, "grpc.reflection.v1alpha.ServerReflection")
	})

	t.Run("V1AlphaListsServices", func(t *testing.T) {
		t.Parallel()
		client := reflectionv1alpha.NewServerReflectionClient(withComments.dial(t))
		stream, err := client.ServerReflectionInfo(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&reflectionv1alpha.ServerReflectionRequest{
			MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{},
		}))
		resp, err := stream.Recv()
		require.NoError(t, err)
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		require.Contains(t, names, registryName)
	})

	t.Run("FallsBackToLinkedDescriptors", func(t *testing.T) {
		t.Parallel()
		// Health and error details are not in the gen descriptors; grpcurl
		// needs both (to call Health/Check and to print BadRequest details).
		conn := withComments.dial(t)
		for _, symbol := range []string{"grpc.health.v1.Health", "google.rpc.BadRequest"} {
			resp := reflectV1(t, conn, &reflectionv1.ServerReflectionRequest{
				MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
			})
			require.NotEmpty(t, resp.GetFileDescriptorResponse().GetFileDescriptorProto(), "symbol %s: %v", symbol, resp)
		}
	})

	t.Run("DescriptorResolverCarriesComments", func(t *testing.T) {
		t.Parallel()
		require.NotEmpty(t, leadingComments(t, withComments.dial(t)))
		// Without it, the generated descriptors have no comments.
		require.Empty(t, leadingComments(t, plain.dial(t)))
	})
}

// leadingComments returns the leading comments of the file declaring the
// registry service, as reflection describes it.
func leadingComments(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	resp := reflectV1(t, conn, &reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: registryName},
	})
	raw := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
	require.NotEmpty(t, raw, "response: %v", resp)
	var fd descriptorpb.FileDescriptorProto
	require.NoError(t, proto.Unmarshal(raw[0], &fd))
	require.Equal(t, "converge/registry/v1/registry.proto", fd.GetName())
	var comments []string
	for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
		if c := strings.TrimSpace(loc.GetLeadingComments()); c != "" {
			comments = append(comments, c)
		}
	}
	return comments
}

func reflectV1(t *testing.T, conn *grpc.ClientConn, req *reflectionv1.ServerReflectionRequest) *reflectionv1.ServerReflectionResponse {
	t.Helper()
	stream, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(req))
	resp, err := stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
	return resp
}

func TestSignalContext(t *testing.T) {
	t.Parallel()

	ctx, stop := server.SignalContext(t.Context())
	defer stop()
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
	<-ctx.Done() // the signal cancelled the context instead of killing the test
}

// --- helpers ---

func discardLogger() *slog.Logger {
	return slog.New(slog.DiscardHandler)
}

func newLoopbackListener(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lis.Close() })
	return lis
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// counterValue returns the value of the counter series of family name whose
// labels include want; it fails the test if there is none.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	require.Failf(t, "no such series", "%s%v", name, want)
	return 0
}

// schemaBehind is a readiness error whose text is fit for clients.
type schemaBehind struct{}

func (schemaBehind) Error() string        { return "schema is behind: run with --migrate" }
func (schemaBehind) PublicReason() string { return "schema is behind: run with --migrate" }

// A service that has never been ready answers Unavailable instead of running handlers against a
// store that is not there; the probe runs inline first, so the first call after it turns ready is
// served without waiting for the background probe.
func TestCallsWaitForAServiceThatWasNeverReady(t *testing.T) {
	t.Parallel()

	var readyErr atomic.Pointer[error]
	set := func(err error) { readyErr.Store(&err) }
	set(fmt.Errorf("dial tcp 10.1.2.3:5432: connection refused"))
	ts := startServer(t, server.Config{
		ReadyProbeInterval: time.Hour,
		Services: []server.Service{{
			Desc: &registryv1.RegistryService_ServiceDesc,
			Impl: &registryService{},
			Ready: func(context.Context) error {
				return *readyErr.Load()
			},
		}},
	})
	client := registryv1.NewRegistryServiceClient(ts.dial(t))

	_, err := client.AcquireLock(t.Context(), validLock())
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "is not ready yet")
	require.NotContains(t, status.Convert(err).Message(), "10.1.2.3", "the store's address stays in the log")

	set(schemaBehind{})
	_, err = client.AcquireLock(t.Context(), validLock())
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "schema is behind: run with --migrate")

	set(nil)
	_, err = client.AcquireLock(t.Context(), validLock())
	require.NoError(t, err, "the inline probe found the service ready")
}
