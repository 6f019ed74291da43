package main

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestLocalAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":               "",
		"0.0.0.0:7071":   "127.0.0.1:7071",
		":7072":          "127.0.0.1:7072",
		"[::]:7073":      "127.0.0.1:7073",
		"10.0.0.5:7074":  "10.0.0.5:7074",
		"127.0.0.1:7075": "127.0.0.1:7075",
	} {
		require.Equal(t, want, localAddr(in), in)
	}
}

// TestCheck runs a real gRPC health server: SERVING passes, NOT_SERVING and an unknown service
// fail, and so does a closed port.
func TestCheck(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()

	hs.SetServingStatus("converge.scheduler.v1.SchedulerService", healthpb.HealthCheckResponse_NOT_SERVING)
	require.NoError(t, check(addr, "", false, 5*time.Second))
	require.ErrorContains(t, check(addr, "converge.scheduler.v1.SchedulerService", false, 5*time.Second), "NOT_SERVING")
	require.ErrorContains(t, check(addr, "nope", false, 5*time.Second), "NotFound")
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	require.ErrorContains(t, check(addr, "", false, 5*time.Second), "NOT_SERVING")

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedAddr := closed.Addr().String()
	require.NoError(t, closed.Close())
	require.Error(t, check(closedAddr, "", false, 2*time.Second))
	require.ErrorContains(t, check("", "", false, time.Second), "no address")
}
