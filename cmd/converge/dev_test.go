package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/converge-dev/converge/gen"
	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
)

// allServices are the five services `converge dev` serves.
var allServices = []*grpc.ServiceDesc{
	&schedulerv1.SchedulerService_ServiceDesc,
	&agentv1.AgentService_ServiceDesc,
	&verifierv1.VerifierService_ServiceDesc,
	&knowledgev1.KnowledgeService_ServiceDesc,
	&registryv1.RegistryService_ServiceDesc,
}

type devBundle struct {
	conn    *grpc.ClientConn
	addr    string
	dataDir string
}

// setupDev runs `converge dev` in-process on a free loopback port until the test ends, and answers
// a client connected to it once every service is SERVING.
func setupDev(t *testing.T, mutate func(*devOptions)) *devBundle {
	t.Helper()
	opts := devOptions{DataDir: filepath.Join(t.TempDir(), "data")}
	opts.LogFormat, opts.LogLevel = "text", "warn"
	if mutate != nil {
		mutate(&opts)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDev(ctx, opts, lis, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("converge dev did not stop within 30s of its context ending")
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	health := healthpb.NewHealthClient(conn)
	require.Eventually(t, func() bool {
		res, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 2*time.Minute, 20*time.Millisecond, "converge dev never reported SERVING") // migrating five stores takes long on a loaded machine
	return &devBundle{conn: conn, addr: lis.Addr().String(), dataDir: opts.DataDir}
}

func TestDevServesEveryServiceHealthy(t *testing.T) {
	t.Parallel()
	b := setupDev(t, nil)
	health := healthpb.NewHealthClient(b.conn)
	for _, sd := range allServices {
		res, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: sd.ServiceName})
		require.NoError(t, err, sd.ServiceName)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus(), sd.ServiceName)
	}
	// Each stateful service keeps its own SQLite database under the data directory.
	for _, s := range stateful {
		require.FileExists(t, filepath.Join(b.dataDir, s+".db"))
	}
}

func TestDevValidatesRequests(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	_, err := registryv1.NewRegistryServiceClient(b.conn).AcquireLock(context.Background(), &registryv1.AcquireLockRequest{
		Resource: "/etc/passwd", Holder: "", Ttl: nil,
	})
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	fields := map[string]bool{}
	for _, v := range grpcerr.Violations(err) {
		fields[v.Field] = true
	}
	require.Equal(t, map[string]bool{"resource": true, "holder": true, "ttl": true}, fields)
}

// Every RPC of every service, called with an empty request, answers a precise status: the request's
// own rules (InvalidArgument) or, for a valid request, Unimplemented naming what is missing, or
// success where the empty request is a real query (okWithEmptyRequest), or FailedPrecondition
// saying why the server cannot (preconditionWithEmptyRequest). Never Internal or Unknown, and never
// success without doing the work.
func TestDevEveryRPCAnswersPrecisely(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	files, err := gen.Files()
	require.NoError(t, err)
	for _, sd := range allServices {
		d, err := files.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		require.NoError(t, err)
		methods := d.(protoreflect.ServiceDescriptor).Methods()
		for i := 0; i < methods.Len(); i++ {
			m := methods.Get(i)
			full := "/" + sd.ServiceName + "/" + string(m.Name())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			req := dynamicpb.NewMessage(m.Input())
			res := dynamicpb.NewMessage(m.Output())
			if m.IsStreamingServer() {
				stream, err := b.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, full)
				require.NoError(t, err)
				require.NoError(t, stream.SendMsg(req))
				require.NoError(t, stream.CloseSend())
				err = stream.RecvMsg(res)
				require.NotEqual(t, io.EOF, err, "%s: stream ended without a status", full)
				requirePrecise(t, full, err)
			} else {
				requirePrecise(t, full, b.conn.Invoke(ctx, full, req, res))
			}
			cancel()
		}
	}
}

// okWithEmptyRequest are the RPCs whose empty request is valid and whose success does the work:
// a listing with no filter answers the (empty) list.
var okWithEmptyRequest = map[string]bool{
	"/converge.knowledge.v1.KnowledgeService/ListItems":         true,
	"/converge.registry.v1.RegistryService/ListLocks":           true,
	"/converge.registry.v1.RegistryService/ListOwners":          true,
	"/converge.registry.v1.RegistryService/ListAgents":          true,
	"/converge.registry.v1.RegistryService/ListStaleAgents":     true,
	"/converge.scheduler.v1.SchedulerService/ListTaskLists":     true,
	"/converge.scheduler.v1.SchedulerService/ListExecutions":    true,
	"/converge.scheduler.v1.SchedulerService/ListFeatureBuilds": true,
	"/converge.verifier.v1.VerifierService/ListReports":         true,
}

// preconditionWithEmptyRequest are the RPCs whose empty request is valid but that cannot work in
// this server's state, and say why (a dev server without --agents runs no agent worker).
var preconditionWithEmptyRequest = map[string]string{
	"/converge.agent.v1.AgentService/GetStatus": "runs no agent worker",
	"/converge.agent.v1.AgentService/Drain":     "runs no agent worker",
}

func requirePrecise(t *testing.T, method string, err error) {
	t.Helper()
	switch code := status.Code(err); code {
	case codes.OK:
		if !okWithEmptyRequest[method] {
			t.Errorf("%s answered OK to an empty request; want InvalidArgument or Unimplemented", method)
		}
	case codes.InvalidArgument:
		require.NotEmpty(t, grpcerr.Violations(err), "%s: InvalidArgument without field violations: %v", method, err)
	case codes.FailedPrecondition:
		why, ok := preconditionWithEmptyRequest[method]
		require.True(t, ok, "%s answered FailedPrecondition to an empty request: %v", method, err)
		require.Contains(t, status.Convert(err).Message(), why, method)
	case codes.Unimplemented:
		require.Contains(t, status.Convert(err).Message(), "not implemented yet", method)
		require.NotContains(t, status.Convert(err).Message(), "issue", method) // clients are not told tracker numbers
	default:
		t.Errorf("%s answered %v (%v); want InvalidArgument or Unimplemented", method, code, err)
	}
}

func TestDevAuthTokens(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.AuthTokens = true, []string{"s3cret"} })
	client := knowledgev1.NewKnowledgeServiceClient(b.conn)
	req := &knowledgev1.GetItemRequest{Id: "kn_1"}

	_, err := client.GetItem(context.Background(), req)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	bad := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")
	_, err = client.GetItem(bad, req)
	require.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	good := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	_, err = client.GetItem(good, req)
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err) // authenticated: no such item yet

	// Health needs no token (setupDev already waited on it without one).
	_, err = healthpb.NewHealthClient(b.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
}

// Data written under --data-dir survives a restart: the second start finds its schema applied.
func TestDevDataDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	ctx := context.Background()
	for range 2 {
		stores, err := openDevStores(ctx, dir, false)
		require.NoError(t, err)
		require.NoError(t, stores.scheduler.Ping(ctx))
		status, err := stores.scheduler.MigrationStatus(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, status)
		for _, m := range status {
			require.True(t, m.Applied, m.Name)
		}
		require.NoError(t, stores.Close())
	}
}

func TestDevRefusesOpenNonLoopback(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	opts := devOptions{InMemory: true}
	opts.LogFormat, opts.LogLevel = "text", "warn"
	err = runDev(context.Background(), opts, lis, io.Discard)
	require.ErrorContains(t, err, "loopback")
}
