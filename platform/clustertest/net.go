package clustertest

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// FreeAddr answers a loopback address nothing listens on (a port the kernel just released).
func FreeAddr(tb TB) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// FreePort is FreeAddr's port.
func FreePort(tb TB) string {
	tb.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(tb))
	return port
}

// Eventually polls cond every 50 ms until it holds (true) or timeout passes (false).
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Dial answers a plaintext client connection to addr, closed when tb ends.
func Dial(tb TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("clustertest: dial %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Health answers the health of service ("" for the whole server) at addr, or the error.
func Health(addr, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return res.GetStatus(), err
}

// DefaultHealthTimeout bounds WaitHealth when given no timeout.
const DefaultHealthTimeout = 60 * time.Second

// WaitHealth waits until service ("" for the server) at addr reports want; it fails tb with p's
// last output lines when timeout (0: DefaultHealthTimeout) passes or p exits first.
func WaitHealth(tb TB, p *Process, addr, service string, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration) {
	tb.Helper()
	if err := waitHealth(p, addr, service, want, timeout); err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
}

func waitHealth(p *Process, addr, service string, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultHealthTimeout
	}
	var last string
	exited := false
	ok := Eventually(timeout, func() bool {
		got, err := Health(addr, service)
		last = fmt.Sprintf("%v %v", got, err)
		if err == nil && got == want {
			return true
		}
		exited = p != nil && p.Exited()
		return exited
	})
	if ok && !exited {
		return nil
	}
	name, out := addr, ""
	if p != nil {
		name, out = p.Name+" at "+addr, p.Tail(40)
	}
	if exited {
		return fmt.Errorf("%s exited (%v) before its health %q was %v; output:\n%s", name, p.ExitErr(), service, want, out)
	}
	return fmt.Errorf("%s: health %q never became %v within %s (last: %s); output:\n%s", name, service, want, timeout, last, out)
}
