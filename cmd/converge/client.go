package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/client"
)

// defaultServer is where `converge dev` listens, and so where the client commands look.
const defaultServer = "127.0.0.1:7070"

// clientFlags are how the client commands (run --server, watch, status, logs) reach a deployment.
type clientFlags struct {
	// Server is the Scheduler's address (host:port).
	Server string
	// Token is the bearer token sent with every call.
	Token string
	// TLS turns TLS on (system roots, or TLSCA).
	TLS bool
	// TLSCA is a PEM file of the CA that signed the server's certificate; implies TLS.
	TLSCA string
}

// bind registers the flags; serverDefault "" means "no default" (run: in-process suite).
func (f *clientFlags) bind(cmd *cobra.Command, serverDefault, serverUsage string) {
	fs := cmd.Flags()
	fs.StringVar(&f.Server, "server", envOr("CONVERGE_SERVER", serverDefault), serverUsage+" [CONVERGE_SERVER]")
	fs.StringVar(&f.Token, "token", os.Getenv("CONVERGE_TOKEN"), "bearer token sent with every call [CONVERGE_TOKEN]")
	fs.BoolVar(&f.TLS, "tls", false, "connect with TLS (system roots, or --tls-ca)")
	fs.StringVar(&f.TLSCA, "tls-ca", "", "PEM file of the CA of the server's certificate (implies --tls)")
}

// dial connects to the server; the connection is lazy, check reaches it.
func (f *clientFlags) dial() (*grpc.ClientConn, error) {
	token := f.Token
	if token == "" {
		token = discoverDevToken(f.Server) // `converge dev` on this machine (devtoken.go)
	}
	o := client.Options{Token: token, TLS: f.TLS || f.TLSCA != ""}
	if f.TLSCA != "" {
		pem, err := os.ReadFile(f.TLSCA)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca %s: no PEM certificate in it", f.TLSCA)
		}
		o.Config = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	conn, err := client.Dial(f.Server, o)
	if err != nil {
		return nil, usagef("--server %q: %v", f.Server, err)
	}
	return conn, nil
}

// connect dials the server and checks that it answers SERVING, with a message that says what to
// do when it does not.
func (f *clientFlags) connect(ctx context.Context) (*grpc.ClientConn, error) {
	conn, err := f.dial()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	switch {
	case err != nil && (status.Code(err) == codes.DeadlineExceeded || status.Code(err) == codes.Unavailable):
		_ = conn.Close()
		return nil, fmt.Errorf("no converge server answers at %s: start one with `converge dev` (or give --server)", f.Server)
	case err != nil:
		_ = conn.Close()
		return nil, fmt.Errorf("converge server at %s: %w", f.Server, err)
	case res.GetStatus() != healthpb.HealthCheckResponse_SERVING:
		_ = conn.Close()
		return nil, fmt.Errorf("converge server at %s is %s (starting or draining): try again shortly", f.Server, res.GetStatus())
	}
	return conn, nil
}

// rpcError words a failed call for a person: the status message, with a hint for the codes that
// have an obvious next step.
func rpcError(what string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", what, err)
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return fmt.Errorf("%s: %s (give --token or CONVERGE_TOKEN; a local `converge dev` writes its token to <data-dir>/dev-token, "+
			"which the CLI reads when run from the same directory or with CONVERGE_DATA_DIR)", what, st.Message())
	case codes.Unavailable:
		return fmt.Errorf("%s: the server is unreachable: %s", what, st.Message())
	case codes.Canceled:
		return fmt.Errorf("%s: %w", what, context.Canceled)
	}
	return fmt.Errorf("%s: %s: %s", what, st.Code(), st.Message())
}

// isTransient says whether a stream error is worth reconnecting after.
func isTransient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown:
		return true
	}
	return false
}
