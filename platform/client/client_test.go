package client_test

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/converge-dev/converge/platform/client"
)

// healthServer serves gRPC health on a loopback port until tb ends and answers its address
// and the authorization headers of the calls it has had, in order.
func healthServer(tb testing.TB) (string, func() []string) {
	tb.Helper()
	var (
		mu   sync.Mutex
		auth []string
	)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		auth = append(auth, md.Get("authorization")...)
		mu.Unlock()
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	return lis.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), auth...)
	}
}

func healthClient(tb testing.TB, dial func() (*grpc.ClientConn, error)) healthpb.HealthClient {
	tb.Helper()
	conn, err := dial()
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestDialSendsTheTokenOnEveryCall: the bearer token (its metadata built once) is on every
// call, and a client without one sends none.
func TestDialSendsTheTokenOnEveryCall(t *testing.T) {
	addr, seen := healthServer(t)
	withToken := healthClient(t, func() (*grpc.ClientConn, error) { return client.Dial(addr, client.Options{Token: "s3cret"}) })
	without := healthClient(t, func() (*grpc.ClientConn, error) { return client.Dial(addr, client.Options{}) })
	for range 3 {
		_, err := withToken.Check(context.Background(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
	}
	_, err := without.Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"Bearer s3cret", "Bearer s3cret", "Bearer s3cret"}, seen())
}

// plainDial is a client with Dial's transport and nothing else: no stats handler.
func plainDial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, client.TransportOptions()...)...)
}

// TestDialWithoutProvidersHasNoStatsHandler: in a process that set no OpenTelemetry provider
// or propagator (this test binary, every converge process today) a call through Dial's
// connection costs what one through a bare connection does — no otelgrpc client handler whose
// spans and metrics would go nowhere. With the handler a call allocated ≈ 20 more objects.
func TestDialWithoutProvidersHasNoStatsHandler(t *testing.T) {
	addr, _ := healthServer(t)
	clients := map[string]healthpb.HealthClient{
		"dial":  healthClient(t, func() (*grpc.ClientConn, error) { return client.Dial(addr, client.Options{}) }),
		"plain": healthClient(t, func() (*grpc.ClientConn, error) { return plainDial(addr) }),
	}
	allocs := map[string]float64{}
	for name, c := range clients {
		_, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		allocs[name] = testing.AllocsPerRun(200, func() {
			if _, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Logf("allocations per call (client and server): Dial %.1f, bare connection %.1f", allocs["dial"], allocs["plain"])
	require.Less(t, allocs["dial"]-allocs["plain"], 5.0)
}

// BenchmarkCall is one unary call (health Check over loopback TCP) through Dial's connection
// with a bearer token, and through a bare connection for comparison, with the process's CPU
// per call (client and server):
//
//	cd platform/client && go test -run '^$' -bench Call -benchmem .
func BenchmarkCall(b *testing.B) {
	addr, _ := healthServer(b)
	for _, bc := range []struct {
		name string
		dial func() (*grpc.ClientConn, error)
	}{
		{"dial", func() (*grpc.ClientConn, error) { return client.Dial(addr, client.Options{Token: "bench"}) }},
		{"plain", func() (*grpc.ClientConn, error) { return plainDial(addr) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := healthClient(b, bc.dial)
			req := &healthpb.HealthCheckRequest{}
			_, err := c.Check(context.Background(), req)
			require.NoError(b, err)
			cpu0 := processCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := c.Check(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
