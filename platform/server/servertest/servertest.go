// Package servertest serves services on the real platform server over an in-memory connection
// (bufconn) for tests: the whole interceptor chain (auth, validation, recovery, ...) runs and
// nothing touches the network.
package servertest

import (
	"context"
	"log/slog"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/server"
)

// Serve runs cfg's server until the test ends (its Serve must then return nil) and answers a
// client connected to it. Unset Name, Logger and DrainDelay default to a quiet test server that
// stops at once; tracing is off. The client has platform/client's transport settings.
func Serve(t testing.TB, cfg server.Config) *grpc.ClientConn {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DrainDelay == 0 {
		cfg.DrainDelay = -1
	}
	cfg.DisableTracing = true
	srv, err := cfg.Complete()
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("servertest: serve: %v", err)
		}
	})
	opts := append(client.TransportOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		t.Fatalf("servertest: dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
