package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/converge-dev/converge/gen"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

// BenchmarkLockPath splits the cost of one lock cycle (acquire + release of one resource by one
// client) over gRPC into its layers, on the in-process backend (no Redis: what is left is the
// server path) and an in-memory connection (no TCP):
//
//   - direct: the backend called in process;
//
//   - grpc-bare: a plain grpc.Server with the Registry and no interceptor;
//
//   - grpc-platform: the platform server (request id, logging, metrics, quotas, error
//     resolution, protovalidate, readiness gate, recovery), as the services run;
//
//   - grpc-platform-batch8: AcquireLocks + ReleaseLocks of 8 files on the platform server (one
//     op is one batch cycle: 8 files).
//
//     cd bench/registry && go test -run '^$' -bench LockPath -benchmem -cpuprofile cpu.prof .
func BenchmarkLockPath(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.New(ctx, filepath.Join(b.TempDir(), "registry.db"), database.WithMigrate())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	hb := inproc.New(st, "inproc")
	b.Cleanup(func() { _ = hb.Close() })
	svc := registry.New(st, hb)
	ttl := durationpb.New(30 * time.Second)

	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, granted, err := hb.Acquire(ctx, "bench/direct.go", "bench-1", 30*time.Second, 0)
			if err != nil || !granted {
				b.Fatal(err, granted)
			}
			if err := hb.Release(ctx, l.Resource, l.Holder, l.Token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("grpc-bare", func(b *testing.B) {
		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer()
		registryv1.RegisterRegistryServiceServer(srv, svc)
		go func() { _ = srv.Serve(lis) }()
		b.Cleanup(srv.Stop)
		conn, err := grpc.NewClient("passthrough:///bufnet",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		cycles(b, registryv1.NewRegistryServiceClient(conn), "bench/bare.go", ttl)
	})
	files, err := gen.Files()
	if err != nil {
		b.Fatal(err)
	}
	// Every call logged, as a service at the default level does, to a handler that discards it.
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	conn := servertest.Serve(b, server.Config{Logger: logger, DescriptorResolver: files,
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: svc, Ready: svc.Ready}}})
	c := registryv1.NewRegistryServiceClient(conn)
	b.Run("grpc-platform", func(b *testing.B) { cycles(b, c, "bench/platform.go", ttl) })
	b.Run("grpc-platform-batch8", func(b *testing.B) {
		resources := make([]string, 8)
		for i := range resources {
			resources[i] = fmt.Sprintf("bench/task/file-%d.go", i)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := c.AcquireLocks(ctx, &registryv1.AcquireLocksRequest{Resources: resources, Holder: "bench-1", Ttl: ttl})
			if err != nil || !res.GetGranted() {
				b.Fatal(err, res)
			}
			grants := make([]*registryv1.LockGrant, len(res.GetLocks()))
			for i, l := range res.GetLocks() {
				grants[i] = &registryv1.LockGrant{Resource: l.GetResource(), Token: l.GetToken()}
			}
			if _, err := c.ReleaseLocks(ctx, &registryv1.ReleaseLocksRequest{Holder: "bench-1", Locks: grants}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// cycles runs AcquireLock + ReleaseLock of resource through c, one op per cycle.
func cycles(b *testing.B, c registryv1.RegistryServiceClient, resource string, ttl *durationpb.Duration) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: resource, Holder: "bench-1", Ttl: ttl})
		if err != nil || !res.GetGranted() {
			b.Fatal(err, res)
		}
		if _, err := c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: resource, Holder: "bench-1", Token: res.GetLock().GetToken()}); err != nil {
			b.Fatal(err)
		}
	}
}
