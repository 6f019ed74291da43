package scheduler

import (
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
)

// BenchmarkRoundTrip is the floor of one RPC in BenchmarkFanout: a health check through the
// Scheduler's gRPC server over bufconn with the whole interceptor chain, no store. It reports
// the process's CPU per call (client and server).
//
//	go test -run '^$' -bench BenchmarkRoundTrip ./
func BenchmarkRoundTrip(b *testing.B) {
	st, _ := benchStore(b, "sqlite", nil)
	s := New(st, WithWorkDir(b.TempDir()))
	conn := servertest.Serve(b, server.Config{
		Name:     "scheduler-bench",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}},
	})
	c := healthpb.NewHealthClient(conn)
	ctx := b.Context()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		b.Fatal(err)
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}
