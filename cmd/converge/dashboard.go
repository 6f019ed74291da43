package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/platform/dashboard"
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
	if err := dashboard.CheckExposure(dashboard.Exposure{Listen: opts.Dashboard.Listen, AuthTokens: len(opts.AuthTokens) > 0 || opts.AuthFile != "",
		AllowUnauthenticated: opts.AllowUnauthenticated, ClientCA: opts.TLSClientCA != ""}); err != nil {
		return nil, usageError{err}
	}
	conn, err := dashboard.DialSelf(opts.Listen, opts.TLSCert != "")
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	d, err := dashboard.New(dashboard.Same(conn), dashboard.Options{ReadToken: opts.Dashboard.ReadToken, Logger: logger.With("service", "dashboard")})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	srv, err := dashboard.Serve(ctx, opts.Dashboard.Listen, d, logger)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	logger.Info("converge dev: dashboard", slog.String("url", "http://"+srv.Addr()+"/"))
	if opts.Dashboard.Ready != nil {
		opts.Dashboard.Ready(srv.Addr())
	}
	return func() {
		srv.Close()
		_ = conn.Close()
	}, nil
}
