package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/server"
)

// rawCodec sends a rawRequest as is: a client that does not check UTF-8 or that sends garbage.
type rawCodec struct{}

type rawRequest []byte

func (rawCodec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(rawRequest); ok {
		return r, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// structs is a test service whose Echo takes a google.protobuf.Struct (arbitrarily nested).
var structsDesc = grpc.ServiceDesc{
	ServiceName: "converge.test.v1.Structs",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(context.Context, any) (any, error) { return &emptypb.Empty{}, nil }
			return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/converge.test.v1.Structs/Echo"}, handler)
		},
	}},
}

// A request that does not decode is InvalidArgument naming the field, never grpc-go's Internal:
// invalid UTF-8 in a string, nesting past the decoder's limit, a truncated message; unary and
// streamed.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	b := newBlocker()
	ts := startServer(t, server.Config{Services: []server.Service{
		registry(&registryService{}), b.service(), {Desc: &structsDesc, Impl: struct{}{}},
	}})
	conn := ts.dial(t)
	raw := grpc.ForceCodec(rawCodec{})

	// holder = "QZXWVUTS" on the wire becomes invalid UTF-8 of the same length.
	req := validLock()
	req.Holder = "QZXWVUTS"
	good, err := proto.Marshal(req)
	require.NoError(t, err)
	badUTF8 := rawRequest(bytes.ReplaceAll(good, []byte("QZXWVUTS"), []byte("\xff\xfe\xc0\xafabcd")))

	t.Run("InvalidUTF8", func(t *testing.T) {
		t.Parallel()
		err := conn.Invoke(t.Context(), "/converge.registry.v1.RegistryService/AcquireLock", badUTF8, &registryv1.AcquireLockResponse{}, raw)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Equal(t, []string{"holder"}, violationFields(err))
		require.Equal(t, "invalid AcquireLockRequest: holder: must be valid UTF-8", status.Convert(err).Message())
	})

	t.Run("Truncated", func(t *testing.T) {
		t.Parallel()
		err := conn.Invoke(t.Context(), "/converge.registry.v1.RegistryService/AcquireLock", rawRequest(good[:len(good)-3]), &registryv1.AcquireLockResponse{}, raw)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.NotEmpty(t, violationFields(err))
	})

	t.Run("NestedTooDeep", func(t *testing.T) {
		t.Parallel()
		s := &structpb.Struct{}
		for range 10000 {
			s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
		}
		deep, err := proto.Marshal(s)
		require.NoError(t, err)
		err = conn.Invoke(t.Context(), "/converge.test.v1.Structs/Echo", rawRequest(deep), &emptypb.Empty{}, raw)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		fields := violationFields(err)
		require.Len(t, fields, 1)
		require.True(t, strings.HasPrefix(fields[0], "fields[0].value.struct_value.fields[0]"), fields[0])
		require.LessOrEqual(t, len(fields[0]), 260)
		require.Contains(t, status.Convert(err).Message(), "nested more than 10000 messages deep")

		// Within the limit it decodes.
		s = &structpb.Struct{}
		for range 100 {
			s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
		}
		require.NoError(t, conn.Invoke(t.Context(), "/converge.test.v1.Structs/Echo", s, &emptypb.Empty{}))
	})

	t.Run("Streamed", func(t *testing.T) {
		t.Parallel()
		stream, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, locksMethod, raw)
		require.NoError(t, err)
		require.NoError(t, stream.SendMsg(validLock()))
		require.NoError(t, stream.SendMsg(badUTF8))
		_ = stream.CloseSend()
		err = stream.RecvMsg(&emptypb.Empty{})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Equal(t, []string{"holder"}, violationFields(err))
	})

	t.Run("ValidStillPasses", func(t *testing.T) {
		t.Parallel()
		err := conn.Invoke(t.Context(), "/converge.registry.v1.RegistryService/AcquireLock", rawRequest(good), &registryv1.AcquireLockResponse{}, raw)
		require.NoError(t, err)
	})
}
