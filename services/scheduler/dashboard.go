package scheduler

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/dashboard"
	"github.com/converge-dev/converge/platform/servicecmd"
)

// dashboardFlags are converge-scheduler's web dashboard flags: the dashboard (platform/dashboard)
// on its own HTTP listener, reading the Scheduler through its own gRPC address and the Verifier,
// Registry and Knowledge through theirs — the public APIs, as grpcurl would, each call with the
// viewer's token and never the Scheduler's own.
type dashboardFlags struct {
	// Listen is the dashboard's HTTP address; empty = no dashboard.
	Listen string
	// ReadToken is sent with reads for viewers who have not signed in (a read-only view).
	ReadToken string
	// KnowledgeAddr is the Knowledge service, for the knowledge page and a task's knowledge.
	KnowledgeAddr string
}

func (f *dashboardFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.Listen, "dashboard", envOr("CONVERGE_DASHBOARD", ""), "serve the web dashboard on this HTTP address, e.g. 0.0.0.0:7080; empty = none. It reads and steers through the services' gRPC APIs with each viewer's token [CONVERGE_DASHBOARD]")
	fs.StringVar(&f.ReadToken, "dashboard-read-token", envOr("CONVERGE_DASHBOARD_READ_TOKEN", ""), "token the dashboard reads with for viewers who have not signed in (a read-only view; actions always need the viewer's own token) [CONVERGE_DASHBOARD_READ_TOKEN]")
	fs.StringVar(&f.KnowledgeAddr, "knowledge", envOr("CONVERGE_KNOWLEDGE_ADDR", ""), "Knowledge address host:port, read by the dashboard's knowledge pages and written with what fixed a feature build's failed criteria; empty = neither [CONVERGE_KNOWLEDGE_ADDR]")
}

// serve starts the dashboard; stop closes it and its connections.
func (f *dashboardFlags) serve(ctx context.Context, rt servicecmd.Runtime, verifierAddr, registryAddr string) (stop func(), err error) {
	fl := rt.Flags
	if err := dashboard.CheckExposure(dashboard.Exposure{Listen: f.Listen, AuthTokens: len(fl.AuthTokens) > 0 || fl.AuthFile != "",
		AllowUnauthenticated: fl.AllowUnauthenticated, ClientCA: fl.TLSClientCA != ""}); err != nil {
		return nil, err
	}
	var conns []*grpc.ClientConn
	closeConns := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	// Connections without credentials: the Scheduler's own connections to the Verifier and the
	// Registry carry its token, which a viewer must never borrow.
	dial := func(addr string) (grpc.ClientConnInterface, error) {
		if addr == "" {
			return nil, nil
		}
		c, err := client.Dial(addr, client.Options{})
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		return c, nil
	}
	self, err := dashboard.DialSelf(fl.Listen, fl.TLSCert != "")
	if err != nil {
		return nil, err
	}
	conns = append(conns, self)
	c := dashboard.Conns{Scheduler: self}
	for _, x := range []struct {
		addr string
		to   *grpc.ClientConnInterface
	}{{verifierAddr, &c.Verifier}, {registryAddr, &c.Registry}, {f.KnowledgeAddr, &c.Knowledge}} {
		if *x.to, err = dial(x.addr); err != nil {
			closeConns()
			return nil, err
		}
	}
	log := rt.Logger.With("component", "dashboard")
	d, err := dashboard.New(c, dashboard.Options{ReadToken: f.ReadToken, Logger: log})
	if err != nil {
		closeConns()
		return nil, err
	}
	srv, err := dashboard.Serve(ctx, f.Listen, d, log)
	if err != nil {
		closeConns()
		return nil, err
	}
	log.Info("serving the web dashboard", slog.String("url", "http://"+srv.Addr()+"/"))
	return func() {
		srv.Close()
		closeConns()
	}, nil
}
