package main

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStatCPUReadsThisProcess(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x // burn CPU so that utime moves past one tick
	}
	self, sys, children, err := statCPU(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, self)
	require.GreaterOrEqual(t, sys, time.Duration(0))
	require.LessOrEqual(t, sys, self)
	require.GreaterOrEqual(t, children, time.Duration(0))
}

func TestParseHandledSumsCodesByMethod(t *testing.T) {
	body := `# HELP grpc_server_handled_total Total number of RPCs completed on the server.
grpc_server_handled_total{grpc_code="OK",grpc_method="CompleteTask",grpc_service="converge.scheduler.v1.SchedulerService",grpc_type="unary"} 998
grpc_server_handled_total{grpc_code="Unavailable",grpc_method="CompleteTask",grpc_service="converge.scheduler.v1.SchedulerService",grpc_type="unary"} 2
grpc_server_handled_total{grpc_code="OK",grpc_method="Heartbeat",grpc_service="converge.registry.v1.RegistryService",grpc_type="unary"} 12
grpc_server_handled_total{grpc_code="OK",grpc_method="Check",grpc_service="grpc.health.v1.Health",grpc_type="unary"} 0
grpc_server_started_total{grpc_method="CompleteTask",grpc_service="converge.scheduler.v1.SchedulerService",grpc_type="unary"} 1000
`
	got := parseHandled(body)
	require.Equal(t, map[string]float64{"SchedulerService/CompleteTask": 1000, "RegistryService/Heartbeat": 12}, got)
	per := rpcsPerTask(map[string]float64{"SchedulerService/CompleteTask": 500}, got, 500)
	require.Equal(t, map[string]float64{"SchedulerService/CompleteTask": 1, "RegistryService/Heartbeat": 0.024}, per)
}
