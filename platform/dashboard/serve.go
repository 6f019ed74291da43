package dashboard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/client"
)

// Conns are the connections the dashboard calls each service over. They carry no credentials of
// their own: every call carries the viewer's token, so a connection must never be one a service
// uses with its own token (that would lend the viewer the service's rights). A nil connection
// leaves that service's pages saying it is not configured.
type Conns struct {
	// Scheduler serves runs, tasks, logs and the actions.
	Scheduler grpc.ClientConnInterface
	// Verifier serves the Verify Done reports and the sign-offs.
	Verifier grpc.ClientConnInterface
	// Registry serves agents and locks.
	Registry grpc.ClientConnInterface
	// Knowledge serves the knowledge page and a task's knowledge.
	Knowledge grpc.ClientConnInterface
}

// Same answers Conns that reach every service over one connection (converge dev serves all five
// on one address).
func Same(conn grpc.ClientConnInterface) Conns {
	return Conns{Scheduler: conn, Verifier: conn, Registry: conn, Knowledge: conn}
}

// Exposure is how the API the dashboard reads is protected, to check that the dashboard does not
// open it wider (CheckExposure).
type Exposure struct {
	// Listen is the dashboard's HTTP address.
	Listen string
	// AuthTokens is set when the API requires bearer tokens (--auth-token or --auth-file).
	AuthTokens bool
	// AllowUnauthenticated is set when the API was opened on purpose (--allow-unauthenticated).
	AllowUnauthenticated bool
	// ClientCA is set when the API authenticates client certificates (mutual TLS).
	ClientCA bool
}

// CheckExposure refuses a dashboard weaker than the API: one that would pass on nothing for an
// API that authenticates client certificates (the dashboard has no viewer's certificate to
// present), and one on a non-loopback address in front of an API that requires no token (anyone
// who reaches it could steer the runs).
func CheckExposure(e Exposure) error {
	if e.ClientCA {
		return errors.New("--dashboard with --tls-client-ca: the dashboard cannot present a viewer's client certificate; use --auth-token")
	}
	if !e.AuthTokens && !e.AllowUnauthenticated && !Loopback(e.Listen) {
		return fmt.Errorf("--dashboard %s is not a loopback address and the API has no --auth-token: anyone who reaches it could steer the runs (give --auth-token, or --allow-unauthenticated)", e.Listen)
	}
	return nil
}

// Loopback reports whether a host:port can only be reached from this machine.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// DialSelf connects to a gRPC server of this process at listen (its listen address: an
// unspecified host, "0.0.0.0:7071" or ":7071", is reached on loopback) with no credentials; tlsOn
// when it serves TLS (its own certificate is not checked: it is this process).
func DialSelf(listen string, tlsOn bool) (*grpc.ClientConn, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("dashboard: listen address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	o := client.Options{}
	if tlsOn {
		o.TLS = true
		o.Config = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // our own listener
	}
	return client.Dial(net.JoinHostPort(host, port), o)
}

// Server is a dashboard served on its own HTTP listener.
type Server struct {
	srv  *http.Server
	lis  net.Listener
	done chan struct{}
}

// Serve serves h on listen until Close; requests' contexts end with ctx. An address that cannot
// be bound is an error naming --dashboard.
func Serve(ctx context.Context, listen string, h http.Handler, logger *slog.Logger) (*Server, error) {
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--dashboard %s: %w", listen, err)
	}
	s := &Server{lis: lis, done: make(chan struct{}), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("dashboard stopped", slog.Any("error", err))
		}
	}()
	return s, nil
}

// Addr is the address the dashboard listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the dashboard: requests get a moment to finish, live event streams are cut.
func (s *Server) Close() {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	_ = s.srv.Close()
	<-s.done
}

// missing is the connection of a service the dashboard was not given: every call answers
// Unavailable, naming the service.
type missing string

func (m missing) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return status.Errorf(codes.Unavailable, "the dashboard has no address of the %s (converge-scheduler --%s)", string(m), strings.ToLower(string(m)))
}

func (m missing) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, m.Invoke(context.Background(), "", nil, nil)
}

func orMissing(c grpc.ClientConnInterface, name string) grpc.ClientConnInterface {
	if c == nil {
		return missing(name)
	}
	return c
}
