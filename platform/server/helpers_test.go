package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
)

// testServer is a Server serving on an in-memory listener.
type testServer struct {
	lis    *bufconn.Listener
	logs   *syncBuffer
	cancel context.CancelFunc

	stopped chan struct{} // closed when Serve has returned
	err     error         // Serve's result, set before stopped is closed
}

// startServer completes cfg and serves it on bufconn until the test ends.
// Unless set, logs go to a buffer the test can read and DrainDelay is off.
func startServer(t *testing.T, cfg server.Config) *testServer {
	t.Helper()

	ts := &testServer{
		lis:     bufconn.Listen(1 << 20),
		logs:    &syncBuffer{},
		stopped: make(chan struct{}),
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.DrainDelay == 0 {
		cfg.DrainDelay = -1
	}
	srv, err := cfg.Complete()
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	go func() {
		ts.err = srv.Serve(ctx, ts.lis)
		close(ts.stopped)
	}()
	t.Cleanup(func() { require.NoError(t, ts.stop()) })
	return ts
}

// stop cancels the server's context and returns Serve's result once it has
// returned. It may be called more than once.
func (ts *testServer) stop() error {
	ts.cancel()
	<-ts.stopped
	return ts.err
}

// hasStopped reports whether Serve has returned, without waiting.
func (ts *testServer) hasStopped() bool {
	select {
	case <-ts.stopped:
		return true
	default:
		return false
	}
}

// dial connects to the server, in plaintext unless opts say otherwise.
func (ts *testServer) dial(t *testing.T, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return ts.lis.DialContext(ctx)
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines to log into.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// registryService is a real RegistryService whose AcquireLock grants every
// lock, panics for holder "panic", and records the request id it saw.
type registryService struct {
	registryv1.UnimplementedRegistryServiceServer

	mu         sync.Mutex
	requestIDs []string
}

func (r *registryService) AcquireLock(ctx context.Context, req *registryv1.AcquireLockRequest) (*registryv1.AcquireLockResponse, error) {
	r.mu.Lock()
	r.requestIDs = append(r.requestIDs, server.RequestID(ctx))
	r.mu.Unlock()
	switch req.GetHolder() {
	case "panic":
		panic("boom: holder asked for it")
	case "bug":
		return nil, fmt.Errorf(`query locks: ERROR: relation "locks" does not exist (SQLSTATE 42P01) at /srv/db.go`)
	case "outage":
		return nil, fmt.Errorf("acquire: %w", &database.UnavailableError{Err: errors.New("dial tcp 10.0.0.7:5432: connection refused")})
	case "domain":
		return nil, grpcerr.NotFound("lock %q not found", req.GetResource())
	}
	return &registryv1.AcquireLockResponse{Granted: true}, nil
}

func (r *registryService) lastRequestID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.requestIDs) == 0 {
		return ""
	}
	return r.requestIDs[len(r.requestIDs)-1]
}

func registry(impl *registryService) server.Service {
	return server.Service{Desc: &registryv1.RegistryService_ServiceDesc, Impl: impl}
}

// validLock is an AcquireLockRequest that passes its protovalidate rules.
func validLock() *registryv1.AcquireLockRequest {
	return &registryv1.AcquireLockRequest{
		Resource: "services/registry/lock.go",
		Holder:   "agent-1",
		Ttl:      durationpb.New(30 * time.Second),
	}
}

// blocker is a hand-written service for lifecycle tests. Block returns only
// once the test closes release (not when its context ends: it stands for a
// handler that ignores cancellation). Locks is a client stream of
// AcquireLockRequests, to exercise validation of streamed messages.
type blocker struct {
	entered chan struct{} // receives once per Block call that has started
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

const (
	blockMethod = "/converge.test.v1.Blocker/Block"
	locksMethod = "/converge.test.v1.Blocker/Locks"
)

func (b *blocker) service() server.Service {
	return server.Service{Desc: &blockerDesc, Impl: b}
}

var blockerDesc = grpc.ServiceDesc{
	ServiceName: "converge.test.v1.Blocker",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Block",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(context.Context, any) (any, error) {
				b := srv.(*blocker)
				b.entered <- struct{}{}
				<-b.release
				return &emptypb.Empty{}, nil
			}
			if interceptor == nil {
				return handler(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: blockMethod}, handler)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Locks",
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				var req registryv1.AcquireLockRequest
				err := stream.RecvMsg(&req)
				if err == io.EOF {
					return stream.SendMsg(&emptypb.Empty{})
				}
				if err != nil {
					return err
				}
			}
		},
	}},
}
