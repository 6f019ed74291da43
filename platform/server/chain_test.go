package server_test

import (
	"context"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/server"
)

// BenchmarkUnaryChain is one unary RPC (AcquireLock, a handler that answers at once) through a
// real Server over bufconn, with the whole interceptor chain (request id, logging at Warn,
// metrics, auth by bearer token, quotas, errors, validation, readiness, recovery), with tracing
// off and on (on: no tracer or meter provider is set, as in every converge process). It reports the process's CPU per call (client and server) beside the
// allocations:
//
//	cd platform/server && go test -run '^$' -bench UnaryChain -benchmem .
func BenchmarkUnaryChain(b *testing.B) {
	for _, tracing := range []bool{false, true} {
		b.Run(map[bool]string{false: "tracing=off", true: "tracing=on"}[tracing], func(b *testing.B) {
			c := chainClient(b, tracing)
			call := withToken(context.Background(), "bench-token")
			req := validLock()
			_, err := c.AcquireLock(call, req)
			require.NoError(b, err)
			cpu0 := processCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.AcquireLock(call, req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// chainClient serves a registryService on a real Server over bufconn until tb ends (bearer
// token "bench-token", logs at Warn into nothing, tracing as asked) and answers a client of it.
func chainClient(tb testing.TB, tracing bool) registryv1.RegistryServiceClient {
	tb.Helper()
	srv, err := server.Config{
		Name: "chain-bench", Logger: slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		DrainDelay: -1, AuthTokens: []string{"bench-token"}, DisableTracing: !tracing,
		Services: []server.Service{registry(&registryService{})},
	}.Complete()
	require.NoError(tb, err)
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	tb.Cleanup(func() { cancel(); require.NoError(tb, <-served) })
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = conn.Close() })
	return registryv1.NewRegistryServiceClient(conn)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestNoTracingHandlerWithoutProviders: a server with tracing on (the default) in a process
// that set no OpenTelemetry provider or propagator makes a call cost what a server with tracing
// off does — no stats handler whose spans and metrics would go nowhere. With the handler a call
// allocated 19 more objects.
func TestNoTracingHandlerWithoutProviders(t *testing.T) {
	allocs := map[bool]float64{}
	for _, tracing := range []bool{false, true} {
		c := chainClient(t, tracing)
		call := withToken(context.Background(), "bench-token")
		req := validLock()
		_, err := c.AcquireLock(call, req)
		require.NoError(t, err)
		allocs[tracing] = testing.AllocsPerRun(200, func() {
			if _, err := c.AcquireLock(call, req); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Logf("allocations per call: tracing off %.1f, on %.1f", allocs[false], allocs[true])
	require.Less(t, allocs[true]-allocs[false], 5.0)
}
