package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/cmd/converge/dashboard"
	"github.com/converge-dev/converge/platform/client"
)

// dashboardFlags are `converge dev`'s dashboard flags.
type dashboardFlags struct {
	// Listen is the dashboard's HTTP address; empty = no dashboard.
	Listen string
	// ReadToken is sent with reads for viewers who have not signed in (a read-only view).
	ReadToken string
	// Ready, when set, is called with the dashboard's address once it listens (tests).
	Ready func(addr string)
}

func (f *dashboardFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.Listen, "dashboard", os.Getenv("CONVERGE_DASHBOARD"), "serve the web dashboard on this HTTP address, e.g. 127.0.0.1:7080 (default: none) [CONVERGE_DASHBOARD]")
	cmd.Flags().StringVar(&f.ReadToken, "dashboard-read-token", os.Getenv("CONVERGE_DASHBOARD_READ_TOKEN"), "token the dashboard reads with for viewers who have not signed in (a read-only view; actions always need the viewer's own token) [CONVERGE_DASHBOARD_READ_TOKEN]")
}

// loopback reports whether a host:port can only be reached from this machine.
func loopback(addr string) bool {
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

// startDashboard serves the dashboard on opts.Dashboard.Listen (nothing when it is empty), calling
// the suite at opts.Listen through its public gRPC API with no credentials of its own. stop closes
// it.
func startDashboard(ctx context.Context, opts devOptions, logger *slog.Logger) (stop func(), err error) {
	if opts.Dashboard.Listen == "" {
		return func() {}, nil
	}
	// Never weaker than the API: the dashboard passes on the viewer's bearer token, and has no
	// client certificate of a viewer to pass on; and it does not open the suite to the network when
	// the API would refuse to be opened so.
	if opts.TLSClientCA != "" {
		return nil, usagef("--dashboard with --tls-client-ca: the dashboard cannot present a viewer's client certificate; use --auth-token")
	}
	if len(opts.AuthTokens) == 0 && !opts.AllowUnauthenticated && !loopback(opts.Dashboard.Listen) {
		return nil, usagef("--dashboard %s is not a loopback address and the suite has no --auth-token: anyone who reaches it could steer the runs (give --auth-token, or --allow-unauthenticated)", opts.Dashboard.Listen)
	}
	o := client.Options{}
	if opts.TLSCert != "" {
		o.TLS = true
		o.Config = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // our own listener
	}
	conn, err := client.Dial(opts.Listen, o)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d, err := dashboard.New(conn, dashboard.Options{ReadToken: opts.Dashboard.ReadToken, Logger: logger.With("service", "dashboard")})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	lis, err := net.Listen("tcp", opts.Dashboard.Listen)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("--dashboard %s: %w", opts.Dashboard.Listen, err)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("dashboard stopped", slog.Any("error", err))
		}
	}()
	logger.Info("converge dev: dashboard", slog.String("url", "http://"+lis.Addr().String()+"/"))
	if opts.Dashboard.Ready != nil {
		opts.Dashboard.Ready(lis.Addr().String())
	}
	return func() {
		// Live event streams end with the suite; give the rest a moment.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
		<-done
		_ = conn.Close()
	}, nil
}
