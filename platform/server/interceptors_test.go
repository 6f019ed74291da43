package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
)

func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

func TestAuth(t *testing.T) {
	t.Parallel()

	b := newBlocker()
	ts := startServer(t, server.Config{
		AuthTokens: []string{"token-one", "token-two"},
		Services:   []server.Service{registry(&registryService{}), b.service()},
	})
	conn := ts.dial(t)
	client := registryv1.NewRegistryServiceClient(conn)

	t.Run("MissingToken", func(t *testing.T) {
		t.Parallel()
		_, err := client.AcquireLock(t.Context(), validLock())
		require.Equal(t, codes.Unauthenticated, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "missing bearer token")
	})

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{"token-three", "token-on", "token-one-and-more", "x"} {
			_, err := client.AcquireLock(withToken(t.Context(), tok), validLock())
			require.Equal(t, codes.Unauthenticated, status.Code(err), "token %q", tok)
			require.Equal(t, "invalid bearer token", status.Convert(err).Message())
		}
	})

	t.Run("WrongScheme", func(t *testing.T) {
		t.Parallel()
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Basic token-one")
		_, err := client.AcquireLock(ctx, validLock())
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	})

	t.Run("GoodTokens", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{"token-one", "token-two"} {
			resp, err := client.AcquireLock(withToken(t.Context(), tok), validLock())
			require.NoError(t, err)
			require.True(t, resp.GetGranted())
		}
		// The scheme is case-insensitive.
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "bearer token-one")
		_, err := client.AcquireLock(ctx, validLock())
		require.NoError(t, err)
	})

	t.Run("AuthBeforeValidation", func(t *testing.T) {
		t.Parallel()
		// An unauthenticated caller learns nothing about the request rules.
		_, err := client.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	})

	t.Run("Streams", func(t *testing.T) {
		t.Parallel()
		stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, locksMethod)
		require.NoError(t, err)
		require.NoError(t, stream.CloseSend())
		require.Equal(t, codes.Unauthenticated, status.Code(stream.RecvMsg(&emptypb.Empty{})))

		stream, err = conn.NewStream(withToken(t.Context(), "token-two"), &grpc.StreamDesc{ClientStreams: true}, locksMethod)
		require.NoError(t, err)
		require.NoError(t, stream.SendMsg(validLock()))
		require.NoError(t, stream.CloseSend())
		require.NoError(t, stream.RecvMsg(&emptypb.Empty{}))
	})

	t.Run("HealthWithoutToken", func(t *testing.T) {
		t.Parallel()
		_, err := healthgrpc.NewHealthClient(conn).Check(t.Context(), &healthgrpc.HealthCheckRequest{})
		require.NoError(t, err)
		watch := watchHealth(t, conn, "")
		_, err = watch.Recv()
		require.NoError(t, err)
	})

	t.Run("ReflectionWithoutToken", func(t *testing.T) {
		t.Parallel()
		resp := reflectV1(t, conn, &reflectionv1.ServerReflectionRequest{
			MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
		})
		require.NotEmpty(t, resp.GetListServicesResponse().GetService())

		stream, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&reflectionv1alpha.ServerReflectionRequest{
			MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{},
		}))
		alpha, err := stream.Recv()
		require.NoError(t, err)
		require.NotEmpty(t, alpha.GetListServicesResponse().GetService())
	})
}

func TestAuthOffWithoutTokens(t *testing.T) {
	t.Parallel()

	ts := startServer(t, server.Config{Services: []server.Service{registry(&registryService{})}})
	_, err := registryv1.NewRegistryServiceClient(ts.dial(t)).AcquireLock(t.Context(), validLock())
	require.NoError(t, err)
}

func TestValidation(t *testing.T) {
	t.Parallel()

	b := newBlocker()
	ts := startServer(t, server.Config{Services: []server.Service{registry(&registryService{}), b.service()}})
	conn := ts.dial(t)
	client := registryv1.NewRegistryServiceClient(conn)

	t.Run("OneViolation", func(t *testing.T) {
		t.Parallel()
		req := validLock()
		req.Resource = ""
		_, err := client.AcquireLock(t.Context(), req)

		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code())
		require.Equal(t, "invalid AcquireLockRequest: resource: must be at least 1 characters", st.Message())
		require.Equal(t, []grpcerr.FieldViolation{
			{Field: "resource", Description: "must be at least 1 characters"},
		}, grpcerr.Violations(err))

		// Any client can read the standard BadRequest detail.
		require.Len(t, st.Details(), 1)
		_, ok := st.Details()[0].(*errdetails.BadRequest)
		require.True(t, ok)
	})

	t.Run("SeveralViolations", func(t *testing.T) {
		t.Parallel()
		_, err := client.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{
			Resource: "../etc/passwd",
			Holder:   "",
			Wait:     durationpb.New(-1),
		})
		require.Equal(t, codes.InvalidArgument, status.Code(err))

		fields := map[string]string{}
		for _, v := range grpcerr.Violations(err) {
			fields[v.Field] = v.Description
		}
		require.Contains(t, fields, "resource")
		require.Contains(t, fields, "holder")
		require.Contains(t, fields, "ttl")
		require.Contains(t, fields, "wait")
		require.Equal(t, "must be a clean repository-relative path: no leading '/', drive letter, '\\' or control character, no empty, '.', '..' or '.git' segment, at most 1024 bytes", fields["resource"])

		msg := status.Convert(err).Message()
		require.True(t, strings.HasPrefix(msg, "invalid AcquireLockRequest: "), msg)
		require.Contains(t, msg, "; ")
	})

	t.Run("ValidRequestPasses", func(t *testing.T) {
		t.Parallel()
		resp, err := client.AcquireLock(t.Context(), validLock())
		require.NoError(t, err)
		require.True(t, resp.GetGranted())
	})

	t.Run("StreamedMessages", func(t *testing.T) {
		t.Parallel()
		stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, locksMethod)
		require.NoError(t, err)
		require.NoError(t, stream.SendMsg(validLock()))
		require.NoError(t, stream.SendMsg(&registryv1.AcquireLockRequest{Resource: "/abs", Holder: "a", Ttl: durationpb.New(1e9)}))
		_ = stream.CloseSend()

		err = stream.RecvMsg(&emptypb.Empty{})
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		require.Equal(t, []string{"resource"}, violationFields(err))
	})
}

func violationFields(err error) []string {
	var fields []string
	for _, v := range grpcerr.Violations(err) {
		fields = append(fields, v.Field)
	}
	return fields
}

func TestPanicRecovery(t *testing.T) {
	t.Parallel()

	ts := startServer(t, server.Config{Services: []server.Service{registry(&registryService{})}})
	client := registryv1.NewRegistryServiceClient(ts.dial(t))

	req := validLock()
	req.Holder = "panic"
	_, err := client.AcquireLock(t.Context(), req)
	require.Equal(t, codes.Internal, status.Code(err))
	require.Regexp(t, `^internal error \(request id [^ ]+\)$`, status.Convert(err).Message()) // no panic details leak

	logs := ts.logs.String()
	require.Contains(t, logs, "level=ERROR")
	require.Contains(t, logs, "panic in gRPC handler")
	require.Contains(t, logs, "boom: holder asked for it")
	require.Contains(t, logs, "helpers_test.go") // the stack points at the handler

	// The server keeps serving.
	resp, err := client.AcquireLock(t.Context(), validLock())
	require.NoError(t, err)
	require.True(t, resp.GetGranted())
}

func TestRequestID(t *testing.T) {
	t.Parallel()

	impl := &registryService{}
	b := newBlocker()
	close(b.release) // Block returns at once
	ts := startServer(t, server.Config{Services: []server.Service{registry(impl), b.service()}})
	conn := ts.dial(t)
	client := registryv1.NewRegistryServiceClient(conn)

	// Subtests run in order: they read the id the handler saw last.
	t.Run("Echoed", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), server.RequestIDMetadataKey, "req-123")
		var header metadata.MD
		_, err := client.AcquireLock(ctx, validLock(), grpc.Header(&header))
		require.NoError(t, err)
		require.Equal(t, []string{"req-123"}, header.Get(server.RequestIDMetadataKey))
		require.Equal(t, "req-123", impl.lastRequestID()) // RequestID(ctx) in the handler
	})

	t.Run("Generated", func(t *testing.T) {
		var header metadata.MD
		_, err := client.AcquireLock(t.Context(), validLock(), grpc.Header(&header))
		require.NoError(t, err)
		ids := header.Get(server.RequestIDMetadataKey)
		require.Len(t, ids, 1)
		require.NotEmpty(t, ids[0])
		require.Equal(t, ids[0], impl.lastRequestID())
	})

	t.Run("UnusableIDReplaced", func(t *testing.T) {
		for _, bad := range []string{"has space", strings.Repeat("x", 129)} {
			ctx := metadata.AppendToOutgoingContext(t.Context(), server.RequestIDMetadataKey, bad)
			var header metadata.MD
			_, err := client.AcquireLock(ctx, validLock(), grpc.Header(&header))
			require.NoError(t, err)
			require.NotEqual(t, bad, header.Get(server.RequestIDMetadataKey)[0])
		}
	})

	t.Run("OnErrors", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), server.RequestIDMetadataKey, "req-err")
		var header, trailer metadata.MD
		_, err := client.AcquireLock(ctx, &registryv1.AcquireLockRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		require.Equal(t, codes.InvalidArgument, status.Code(err))
		got := append(header.Get(server.RequestIDMetadataKey), trailer.Get(server.RequestIDMetadataKey)...)
		require.Contains(t, got, "req-err")
	})

	t.Run("Streams", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), server.RequestIDMetadataKey, "req-stream")
		stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, locksMethod)
		require.NoError(t, err)
		require.NoError(t, stream.CloseSend())
		require.NoError(t, stream.RecvMsg(&emptypb.Empty{}))
		header, err := stream.Header()
		require.NoError(t, err)
		require.Equal(t, []string{"req-stream"}, header.Get(server.RequestIDMetadataKey))
	})

	t.Run("Logged", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), server.RequestIDMetadataKey, "req-log")
		require.NoError(t, conn.Invoke(ctx, blockMethod, &emptypb.Empty{}, &emptypb.Empty{}))

		var line string
		for l := range strings.Lines(ts.logs.String()) {
			if strings.Contains(l, "request_id=req-log") {
				line = l
			}
		}
		require.NotEmpty(t, line, "no log line for the call")
		require.Contains(t, line, `msg="finished call"`)
		require.Contains(t, line, "grpc.service=converge.test.v1.Blocker")
		require.Contains(t, line, "grpc.method=Block")
		require.Contains(t, line, "grpc.code=OK")
		require.Contains(t, line, "grpc.duration=")
	})
}

func TestHealthChecksNotLogged(t *testing.T) {
	t.Parallel()

	ts := startServer(t, server.Config{})
	conn := ts.dial(t)
	_, err := healthgrpc.NewHealthClient(conn).Check(t.Context(), &healthgrpc.HealthCheckRequest{})
	require.NoError(t, err)
	require.NoError(t, ts.stop())
	require.NotContains(t, ts.logs.String(), "grpc.health.v1.Health")
}

// TestHandlerErrorsResolved: the one error path. A handler's unexpected error is Internal with
// the request id and none of its text (logged with the request id), a store outage is
// Unavailable without the driver's text, a mapped domain error passes unchanged.
func TestHandlerErrorsResolved(t *testing.T) {
	t.Parallel()
	ts := startServer(t, server.Config{Services: []server.Service{registry(&registryService{})}})
	client := registryv1.NewRegistryServiceClient(ts.dial(t))

	req := validLock()
	req.Holder = "bug"
	var hdr metadata.MD
	_, err := client.AcquireLock(t.Context(), req, grpc.Header(&hdr))
	require.Equal(t, codes.Internal, status.Code(err))
	id := hdr.Get(server.RequestIDMetadataKey)
	require.Len(t, id, 1)
	require.Equal(t, "internal error (request id "+id[0]+")", status.Convert(err).Message())
	require.Contains(t, ts.logs.String(), "relation")
	require.Contains(t, ts.logs.String(), id[0])

	req.Holder = "outage"
	_, err = client.AcquireLock(t.Context(), req)
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.NotContains(t, status.Convert(err).Message(), "10.0.0.7")

	req.Holder = "domain"
	_, err = client.AcquireLock(t.Context(), req)
	require.Equal(t, codes.NotFound, status.Code(err))
}
