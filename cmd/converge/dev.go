package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/spf13/cobra"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/agent"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	"github.com/converge-dev/converge/services/scheduler"
	"github.com/converge-dev/converge/services/verifier"
)

// devOptions configure `converge dev`.
type devOptions struct {
	servicecmd.Flags
	// DataDir holds one SQLite database per service.
	DataDir string
	// InMemory keeps nothing: every store is a private in-memory database.
	InMemory bool
	// VerifierAllowedRoots are the directories the Verifier may check as local_dir targets.
	VerifierAllowedRoots []string
}

func devCommand() *cobra.Command {
	var opts devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all five services in one process on the embedded default (SQLite, in-process locks)",
		Long: "converge dev serves the Scheduler, Agent, Verifier, Knowledge and Registry services on one " +
			"address (default 127.0.0.1:7070), with one SQLite database per service under --data-dir " +
			"(or nothing kept, with --in-memory). Nothing needs to be installed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := server.SignalContext(cmd.Context())
			defer stop()
			lis, err := net.Listen("tcp", opts.Listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", opts.Listen, err)
			}
			return runDev(ctx, opts, lis, os.Stderr)
		},
	}
	opts.Bind(cmd, "127.0.0.1:7070", 0)
	cmd.Flags().StringVar(&opts.DataDir, "data-dir", envOr("CONVERGE_DATA_DIR", ".converge"), "directory of the SQLite databases [CONVERGE_DATA_DIR]")
	cmd.Flags().BoolVar(&opts.InMemory, "in-memory", false, "keep nothing: in-memory databases, for throwaway runs")
	cmd.Flags().StringArrayVar(&opts.VerifierAllowedRoots, "verifier-allowed-root", verifier.AllowedRootsFromEnv("."), "directory the Verifier may check as a local_dir target, repeatable (default: the working directory) ["+verifier.EnvAllowedRoots+", ':'-separated]")
	return cmd
}

// runDev serves all five services on lis until ctx ends. Logs go to logOut.
func runDev(ctx context.Context, opts devOptions, lis net.Listener, logOut io.Writer) error {
	logger, err := opts.Logger(logOut)
	if err != nil {
		return err
	}
	if !opts.InMemory {
		if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
	}
	stores, err := openDevStores(ctx, opts.DataDir, opts.InMemory, database.WithLogger(logger))
	if err != nil {
		return err
	}
	defer stores.Close()

	// Registry: locks and heartbeats in process; agents, ownership and fencing epochs in SQLite.
	registryHot := inproc.New(stores.registry, "inproc")
	defer registryHot.Close()
	reg := registry.New(ctx, stores.registry, registryHot, registry.WithLogger(logger))

	opts.Listen = lis.Addr().String()
	srv, err := opts.NewServer("converge-dev", logger,
		server.Service{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: scheduler.New(stores.scheduler), Ready: stores.scheduler.Ping},
		server.Service{Desc: &agentv1.AgentService_ServiceDesc, Impl: agent.New()},
		server.Service{Desc: &verifierv1.VerifierService_ServiceDesc, Impl: verifier.New(stores.verifier, verifier.WithAllowedRoots(opts.VerifierAllowedRoots...), verifier.WithLogger(logger)), Ready: stores.verifier.Ping},
		server.Service{Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: knowledge.New(stores.knowledge), Ready: stores.knowledge.Ping},
		server.Service{Desc: &registryv1.RegistryService_ServiceDesc, Impl: reg, Ready: reg.Ready},
	)
	if err != nil {
		_ = lis.Close()
		return err
	}
	where := "in memory (nothing kept)"
	if !opts.InMemory {
		where = opts.DataDir
	}
	logger.Info("converge dev: scheduler, agent, verifier, knowledge and registry",
		slog.String("listen", opts.Listen), slog.String("data", where))
	return srv.Serve(ctx, lis)
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
