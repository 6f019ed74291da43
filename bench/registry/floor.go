package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The floor: a lock is a gRPC call, so a lock cycle (two unary RPCs) can be no cheaper than two
// unary RPCs that do nothing, on a plain grpc.Server (no interceptor, no validation, no Redis)
// over the same loopback TCP at the same concurrency. Its pairs per second ÷ SET/s is the
// ceiling of P3's ratio in this design.

// noopMethod is the floor's one method: an Empty in, an Empty out.
const noopMethod = "/bench.Noop/Call"

var noopDesc = grpc.ServiceDesc{
	ServiceName: "bench.Noop",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in emptypb.Empty
			if err := dec(&in); err != nil {
				return nil, err
			}
			return &emptypb.Empty{}, nil
		},
	}},
}

// floorServer serves noopDesc on a plain grpc.Server on loopback TCP, and answers one client
// connection per client (as the lock rounds have) and a stop.
func floorServer(clients int) ([]*grpc.ClientConn, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer()
	srv.RegisterService(&noopDesc, struct{}{})
	go func() { _ = srv.Serve(lis) }()
	conns := make([]*grpc.ClientConn, 0, clients)
	stop := func() {
		for _, c := range conns {
			_ = c.Close()
		}
		srv.Stop()
	}
	for range clients {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			stop()
			return nil, nil, err
		}
		conns = append(conns, conn)
	}
	return conns, stop, nil
}

// floorRound runs pairs of no-op unary calls on every connection for d and answers the pairs
// per second and the latency of the first call of each pair (as a lock cycle's is AcquireLock's).
func floorRound(ctx context.Context, conns []*grpc.ClientConn, d time.Duration) (result, error) {
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		latencies []time.Duration
		pairs     int
		firstErr  error
	)
	cpu0 := usageNow()
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range conns {
		wg.Go(func() {
			mine := make([]time.Duration, 0, 1<<14)
			n := 0
			var err error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err = c.Invoke(ctx, noopMethod, &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
					break
				}
				mine = append(mine, time.Since(t0))
				if err = c.Invoke(ctx, noopMethod, &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
					break
				}
				n++
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, mine...)
			pairs += n
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("no-op call: %w", err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	return summarize(latencies, pairs, elapsed, cpu0), nil
}
