package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/converge-dev/converge/platform/server"
)

// holdDesc is a service whose calls last until the client ends them: Hold (a server stream) and
// Work (unary), to fill quotas.
const (
	holdMethod = "/converge.test.v1.Hold/Hold"
	workMethod = "/converge.test.v1.Hold/Work"
)

type holder struct{}

var holdDesc = grpc.ServiceDesc{
	ServiceName: "converge.test.v1.Hold",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Work",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, _ any) (any, error) {
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: workMethod}, handler)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Hold",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			in := new(emptypb.Empty)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			if err := stream.SendMsg(&emptypb.Empty{}); err != nil { // "I hold it"
				return err
			}
			<-stream.Context().Done()
			return nil
		},
	}},
}

// serveTCP serves cfg on a loopback TCP listener until the test ends and answers its address.
func serveTCP(t *testing.T, cfg server.Config) (*server.Server, string) {
	t.Helper()
	if cfg.DrainDelay == 0 {
		cfg.DrainDelay = -1
	}
	cfg.Logger = discardLogger()
	srv, err := cfg.Complete()
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return srv, lis.Addr().String()
}

func dialTCP(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func healthOf(t *testing.T, addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	conn := dialTCP(t, addr)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return res.GetStatus(), err
}

// hold opens a Hold stream on conn and waits until the server holds it; it ends with the test.
func hold(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := conn.NewStream(ctx, &holdDesc.Streams[0], holdMethod)
	if err != nil {
		return err
	}
	if err := st.SendMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	return st.RecvMsg(&emptypb.Empty{})
}

// Idle connections beyond the limit close the longest-idle ones: the server holds at most
// MaxConnections, and a health probe on a new connection is still answered SERVING.
func TestConnectionLimitClosesIdleConnections(t *testing.T) {
	t.Parallel()
	const max = 8
	srv, addr := serveTCP(t, server.Config{Limits: server.Limits{MaxConnections: max}})
	var idle []net.Conn
	for range 5 * max {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		idle = append(idle, c)
	}
	t.Cleanup(func() {
		for _, c := range idle {
			_ = c.Close()
		}
	})
	require.Eventually(t, func() bool { return srv.OpenConnections() <= max }, 10*time.Second, 10*time.Millisecond)
	got, err := healthOf(t, addr)
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, got)
	require.LessOrEqual(t, srv.OpenConnections(), max)
}

// When every connection has a call in flight, a new connection is refused, not an old call cut.
func TestConnectionLimitKeepsBusyConnections(t *testing.T) {
	t.Parallel()
	const max = 2
	srv, addr := serveTCP(t, server.Config{
		Limits:   server.Limits{MaxConnections: max},
		Services: []server.Service{{Desc: &holdDesc, Impl: holder{}}},
	})
	var busy []*grpc.ClientConn
	for range max {
		c := dialTCP(t, addr)
		require.NoError(t, hold(t, c))
		busy = append(busy, c)
	}
	require.Equal(t, max, srv.OpenConnections())
	_, err := healthOf(t, addr)
	require.Equal(t, codes.Unavailable, status.Code(err), "a third connection is refused: %v", err)
	// The held calls are untouched: each connection still serves another call.
	for _, c := range busy {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		require.NoError(t, err)
	}
}

// A principal (here the anonymous one of a server without auth) holds at most
// StreamsPerPrincipal streams; one more is ResourceExhausted naming the quota, and health
// streams never count.
func TestStreamsPerPrincipal(t *testing.T) {
	t.Parallel()
	const quota = 3
	_, addr := serveTCP(t, server.Config{
		Limits:   server.Limits{StreamsPerPrincipal: quota},
		Services: []server.Service{{Desc: &holdDesc, Impl: holder{}}},
	})
	conn := dialTCP(t, addr)
	for range quota {
		require.NoError(t, hold(t, conn))
	}
	err := hold(t, conn)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), server.StreamsQuota)
	require.Contains(t, status.Convert(err).Message(), server.AnonymousPrincipal)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	res, err := w.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus())
}

// A named quota bounds unary calls in flight, and a call ended gives its unit back.
func TestQuotaOnUnaryMethods(t *testing.T) {
	t.Parallel()
	_, addr := serveTCP(t, server.Config{
		Limits:   server.Limits{Quotas: []server.Quota{{Name: "work per principal", Methods: []string{workMethod}, PerPrincipal: 1}}},
		Services: []server.Service{{Desc: &holdDesc, Impl: holder{}}},
	})
	conn := dialTCP(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	start := func() chan error {
		c := make(chan error, 1)
		go func() { c <- conn.Invoke(ctx, workMethod, &emptypb.Empty{}, &emptypb.Empty{}) }()
		return c
	}
	first := start()

	var err error
	require.Eventually(t, func() bool {
		select {
		case e := <-first: // a probe took the unit before the first call did: start it again
			t.Logf("the first call lost the unit to a probe (%v): starting it again", e)
			first = start()
			return false
		default:
		}
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		err = conn.Invoke(cctx, workMethod, &emptypb.Empty{}, &emptypb.Empty{})
		return status.Code(err) == codes.ResourceExhausted
	}, 10*time.Second, 10*time.Millisecond, "last: %v", err)
	require.Contains(t, status.Convert(err).Message(), "work per principal")

	cancel()
	require.Equal(t, codes.Canceled, status.Code(<-first))
	require.Eventually(t, func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer ccancel()
		return status.Code(conn.Invoke(cctx, workMethod, &emptypb.Empty{}, &emptypb.Empty{})) == codes.DeadlineExceeded
	}, 10*time.Second, 10*time.Millisecond, "the quota is free again: the call runs until its deadline")
}
