package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/gen"
	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/agent"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/scheduler"
	"github.com/converge-dev/converge/services/verifier"
)

// devOptions configure `converge dev` (and the suite `converge run` starts in-process).
type devOptions struct {
	servicecmd.Flags
	// DataDir holds one SQLite database per service, the Scheduler's work dir and the local
	// agents' data.
	DataDir string
	// InMemory keeps nothing: every store is a private in-memory database and the work dirs are
	// temporary.
	InMemory bool
	// VerifierAllowedRoots are the directories the Verifier may check as local_dir targets (the
	// Scheduler's work dir, where it checks run branches out for Verify Done, is always added).
	VerifierAllowedRoots []string
	// Agents is how many local agent workers run in the process (0 = none).
	Agents int
	// AgentPrefetch makes each local agent hold one assignment ahead of the one it runs
	// (worker.Config.Prefetch).
	AgentPrefetch bool
	// AgentAllowedRoots are where the local agents may build in local repositories (paths and
	// file:// URLs, symbolic links resolved); nil = anywhere (the CLI always gives at least the
	// working directory, `converge run` the repository it builds in).
	AgentAllowedRoots []string
	// AgentDrainTimeout bounds how long stopping waits for the agents to finish their current
	// assignment before they are cancelled (default 30 s).
	AgentDrainTimeout time.Duration
	// DrainDelay is how long health reports NOT_SERVING before the server stops (0 = the server's
	// default). `converge run` needs none: nobody balances load onto its private suite.
	DrainDelay time.Duration
	// Ready, when set, is called once every service reports SERVING and the agents have started.
	Ready func(addr string)
	// Dashboard: the web dashboard's flags (dashboard.go).
	Dashboard dashboardFlags
	// InsecureNoAuth turns the dev token off: any local user may call the suite.
	InsecureNoAuth bool
	// DevToken is accepted besides AuthTokens (the generated dev token, devtoken.go); "" for none.
	DevToken string
	// CPUProfile, when set, is the file a CPU profile (pprof) of the whole run is written to at
	// exit (a %p replaced by the process id).
	CPUProfile string
}

func devCommand() *cobra.Command {
	var opts devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run all five services in one process on the embedded default (SQLite, in-process locks), with optional local agents",
		Long: "converge dev serves the Scheduler, Agent, Verifier, Knowledge and Registry services on one " +
			"address (default 127.0.0.1:7070), with one SQLite database per service under --data-dir " +
			"(or nothing kept, with --in-memory). --agents N also runs N agent workers in the process, " +
			"drained when it stops. Nothing needs to be installed. Unless the environment sets GOGC, its garbage " +
			"collector runs at GOGC=200 (the heap may grow to three times what is live before a collection, " +
			"instead of twice): it collects half as often.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Agents < 0 {
				return usagef("--agents %d: want 0 or more", opts.Agents)
			}
			devGCPercent(os.LookupEnv)
			if err := servicecmd.BoolFromEnv(cmd, "agent-prefetch", "CONVERGE_AGENT_PREFETCH"); err != nil {
				return err
			}
			for flag, env := range servicecmd.LimitDurationEnv {
				if err := servicecmd.DurationFromEnv(cmd, flag, env); err != nil {
					return err
				}
			}
			if !opts.InsecureNoAuth {
				tok, path, err := newDevToken(opts.DataDir, opts.InMemory)
				if err != nil {
					return err
				}
				opts.DevToken = tok
				announceDevToken(cmd.ErrOrStderr(), tok, path)
			}
			if opts.CPUProfile != "" {
				stopProfile, err := servicecmd.StartCPUProfile(opts.CPUProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
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
	cmd.Flags().StringVar(&opts.DataDir, "data-dir", envOr("CONVERGE_DATA_DIR", ".converge"), "directory of the SQLite databases, the Scheduler's work dir and the agents' data [CONVERGE_DATA_DIR]")
	cmd.Flags().BoolVar(&opts.InMemory, "in-memory", false, "keep nothing: in-memory databases and temporary work dirs, for throwaway runs")
	cmd.Flags().StringArrayVar(&opts.VerifierAllowedRoots, "verifier-allowed-root", verifier.AllowedRootsFromEnv("."), "directory the Verifier may check as a local_dir target, repeatable (default: the working directory) ["+verifier.EnvAllowedRoots+", ':'-separated]")
	cmd.Flags().IntVar(&opts.Agents, "agents", 0, "local agent workers to run in the process (they claim work from this server)")
	cmd.Flags().StringArrayVar(&opts.AgentAllowedRoots, "agent-allowed-root", agentRootsFromEnv("."), "directory under which the local agents may build in and push to local repositories, repeatable (default: the working directory) [CONVERGE_ALLOWED_ROOTS, ':'-separated]")
	cmd.Flags().BoolVar(&opts.AgentPrefetch, "agent-prefetch", false, "each local agent holds one assignment ahead of the one it runs: the next starts the moment the current one's work ends (for many short tasks: the one held ahead waits for its agent even when another is idle) [CONVERGE_AGENT_PREFETCH]")
	cmd.Flags().DurationVar(&opts.AgentDrainTimeout, "agent-drain-timeout", 30*time.Second, "on stop, how long the local agents may finish their current assignment before it is cancelled")
	cmd.Flags().BoolVar(&opts.InsecureNoAuth, "insecure-no-auth", false, "no dev token: every local user may call the suite (and run commands as you through the Verifier)")
	cmd.Flags().StringVar(&opts.CPUProfile, "cpuprofile", envOr("CONVERGE_DEV_CPUPROFILE", ""), "write a CPU profile (pprof) of the whole run to this file when it stops; a %p in it is replaced by the process id [CONVERGE_DEV_CPUPROFILE]")
	opts.Dashboard.bind(cmd)
	return cmd
}

// devGOGC is converge dev's garbage-collector target unless GOGC is set. Its live heap is small
// (≈ 16 MB on a 3,000-task fan-out) and every task allocates ≈ 100 KB, so at the runtime's 100
// it collected 24–25 times in that run, at 200 10–12 times for a heap goal of 48 MB instead of
// 32; converge dev's CPU per task 0.85–1.00× of GOGC=100's in alternated pairs (issue 17,
// bench/PROFILE.md, branch p17grpc).
const devGOGC = 200

// devGCPercent sets devGOGC unless the environment sets GOGC (the operator's choice).
func devGCPercent(lookup func(string) (string, bool)) {
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(devGOGC)
	}
}

// runDev serves all five services on lis, with opts.Agents local agents, until ctx ends; then it
// drains the agents and stops the server. Logs go to logOut.
func runDev(ctx context.Context, opts devOptions, lis net.Listener, logOut io.Writer) (err error) {
	logger, err := opts.Logger(logOut)
	if err != nil {
		_ = lis.Close()
		return err
	}
	// base holds the Scheduler's work dir and the agents' data: the data dir, or a temporary
	// directory removed at the end with --in-memory.
	base := opts.DataDir
	if opts.InMemory {
		if base, err = os.MkdirTemp("", "converge-dev-"); err != nil {
			_ = lis.Close()
			return err
		}
		defer os.RemoveAll(base)
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		_ = lis.Close()
		return fmt.Errorf("--data-dir: %w", err)
	}
	// The Scheduler checks run branches out here for Verify Done, so the Verifier must allow it.
	workDir, err := absDir(filepath.Join(base, "scheduler-work"))
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("scheduler work dir: %w", err)
	}

	// Background work (registry, scheduler driver, server) lives until the agents are drained,
	// which is after ctx ends.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()

	opts.Listen = lis.Addr().String()
	// The server accepts the dev token too; it is what the suite calls itself with.
	flags := opts.Flags
	if opts.DevToken != "" {
		flags.AuthTokens = append([]string{opts.DevToken}, opts.AuthTokens...)
	}
	// The Scheduler reaches the Verifier, and the local agents every service, through this
	// server's own address: the same contracts as between separate binaries.
	self, err := dialSelf(flags, opts.Listen)
	if err != nil {
		_ = lis.Close()
		return err
	}
	defer self.Close()

	// The stateful services are the standalone binaries' modules, each on its own SQLite database
	// (or a private in-memory one), their background work started once their schema is current.
	var services []server.Service
	for _, m := range devModules() {
		b, err := m.Build(ctx, servicecmd.Runtime{Flags: &opts.Flags, Logger: logger.With("service", m.Name),
			Embedded: &servicecmd.Embedded{SQLite: sqlitePath(opts.DataDir, m.Name, opts.InMemory), Self: self,
				WorkDir: workDir, AllowedRoots: opts.VerifierAllowedRoots}})
		if b.Close != nil {
			defer b.Close()
		}
		if err != nil {
			_ = lis.Close()
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		svc := *b.Desc
		var then []func()
		if b.Start != nil {
			then = append(then, func() { b.Start(bg) })
		}
		svc.Ready = servicecmd.ReadyProbe(b.Store, true, then...)
		services = append(services, svc)
	}

	files, err := gen.Files()
	if err != nil {
		_ = lis.Close()
		return err
	}
	// The local agents are made now (the Agent service shows the first) and started once every
	// service is SERVING.
	pool := &agentPool{logger: logger, prefetch: opts.AgentPrefetch}
	local := &localConn{self: self}
	if err := pool.create(opts.Agents, local, filepath.Join(base, "agents"), opts.AgentAllowedRoots); err != nil {
		_ = lis.Close()
		return err
	}
	var agentOpts []agent.Option
	if w := pool.first(); w != nil {
		agentOpts = append(agentOpts, agent.WithWorker(w))
	}

	cfg := flags.ServerConfig("converge-dev", logger)
	cfg.DescriptorResolver = files
	cfg.DrainDelay = opts.DrainDelay
	cfg.Services = append(services, server.Service{Desc: &agentv1.AgentService_ServiceDesc, Impl: agent.New(agentOpts...)})
	srv, err := cfg.Complete()
	if err != nil {
		_ = lis.Close()
		return err
	}
	local.serve(srv, flags) // the local agents call the server in-process from now on
	where := "in memory (nothing kept)"
	if !opts.InMemory {
		where = opts.DataDir
	}
	logger.Info("converge dev: scheduler, agent, verifier, knowledge and registry",
		slog.String("listen", opts.Listen), slog.String("data", where), slog.Int("agents", opts.Agents))

	// The web dashboard, on its own HTTP listener when --dashboard is given (dashboard.go).
	stopDashboard, err := startDashboard(bg, opts, logger)
	if err != nil {
		_ = lis.Close()
		return err
	}
	defer stopDashboard()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(bg, lis) }()

	// Once every service is SERVING: the agents, then Ready.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	started := make(chan error, 1)
	go func() {
		if err := waitServing(startCtx, self); err != nil {
			started <- err
			return
		}
		pool.run(bg)
		if opts.Ready != nil {
			opts.Ready(opts.Listen)
		}
		started <- nil
	}()

	stopAll := func() error {
		pool.stop(opts.AgentDrainTimeout)
		stopBG()
		return <-served
	}
	for {
		select {
		case err := <-served:
			// The server stopped by itself: it could not serve.
			stopBG()
			cancelStart()
			if started != nil {
				_ = <-started // the server's error is the one to report
			}
			pool.stop(0)
			return err
		case err := <-started:
			started = nil
			if err != nil && ctx.Err() == nil {
				return errors.Join(fmt.Errorf("converge dev: %w", err), stopAll())
			}
		case <-ctx.Done():
			if started != nil {
				_ = <-started // the agents are started or were never going to be
			}
			return stopAll()
		}
	}
}

// devModules are the stateful services converge dev serves, as their standalone binaries do (the
// Agent is a worker pool, not a module).
func devModules() []servicecmd.Module {
	return []servicecmd.Module{scheduler.Module(), registry.Module(), knowledge.Module(), verifier.Module()}
}

// absDir creates dir and answers its absolute path with symbolic links resolved (what the
// Verifier compares allowed roots against).
func absDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
