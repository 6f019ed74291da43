// Command converge-agent runs one converge Agent worker: it registers with the Registry, claims
// assignments from the Scheduler and runs them in git worktrees, and serves the Agent API
// (status, drain, RunTask). It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/converge-dev/converge/gen"
	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/agent"
	"github.com/converge-dev/converge/services/agent/executor"
	"github.com/converge-dev/converge/services/agent/worker"
	"github.com/converge-dev/converge/services/agent/workspace"
)

func main() { os.Exit(servicecmd.Execute(command())) }

// agentFlags are the worker's own flags beside the server's.
type agentFlags struct {
	servicecmd.Flags
	scheduler, registry, knowledge string
	token, tokenFile               string
	dataDir, instanceID, execution string
	capabilities                   []string
	drainTimeout                   time.Duration
	allowedRoots, allowEnv         []string
	sandbox                        string
	cpuProfile                     string
	prefetch                       bool
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func command() *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "converge-agent",
		Short: "converge Agent: the build worker (claims assignments, runs them in git worktrees) and its control API",
		Args:  cobra.NoArgs,
		Long: "converge-agent registers with the Registry, claims assignments from the Scheduler and runs them in git " +
			"worktrees, and serves the Agent API. It runs on one processor (GOMAXPROCS=1) unless the environment sets " +
			"GOMAXPROCS: its own work is orchestration (a child process per command, a few RPCs), which a second one " +
			"made dearer, not faster.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			oneProcessor(os.LookupEnv)
			ctx, stop := server.SignalContext(cmd.Context())
			defer stop()
			logger, err := f.Logger(os.Stderr)
			if err != nil {
				return err
			}
			if f.scheduler == "" || f.registry == "" {
				return fmt.Errorf("--scheduler and --registry are required (CONVERGE_SCHEDULER_ADDR, CONVERGE_REGISTRY_ADDR)")
			}
			if v := os.Getenv("CONVERGE_AGENT_DRAIN_TIMEOUT"); v != "" && !cmd.Flags().Changed("drain-timeout") {
				if _, err := time.ParseDuration(v); err != nil {
					return fmt.Errorf("CONVERGE_AGENT_DRAIN_TIMEOUT %q: want a duration such as 30s", v)
				}
			}
			if err := servicecmd.BoolFromEnv(cmd, "prefetch", "CONVERGE_AGENT_PREFETCH"); err != nil {
				return err
			}
			token, err := f.clientToken(cmd, logger)
			if err != nil {
				return err
			}
			roots, err := workspace.NewRoots(f.allowedRoots)
			if err != nil {
				return fmt.Errorf("--allowed-root: %w", err)
			}
			if len(roots.Dirs()) == 0 {
				logger.Warn("no --allowed-root: this agent builds in no local repository (task lists naming a path or a file:// URL fail with REPOSITORY_NOT_ALLOWED)")
			}
			sandbox, err := executor.ParseSandbox(f.sandbox)
			if err != nil {
				return fmt.Errorf("--sandbox: %w", err)
			}
			if err := executor.CheckSandbox(ctx, sandbox); err != nil {
				return fmt.Errorf("--sandbox: %w", err)
			}
			hideEnvironment()
			if f.instanceID == "" {
				f.instanceID = worker.DefaultInstanceID()
			}
			if f.dataDir == "" {
				// One data dir per instance: two agents on one host never share mirrors, worktrees
				// or process records, and a restart under the same instance id finds what its
				// previous process left (and cleans it up).
				f.dataDir = filepath.Join(".converge", "agent", f.instanceID)
			}
			dial := func(addr string) (*grpc.ClientConn, error) { return client.Dial(addr, client.Options{Token: token}) }
			sc, err := dial(f.scheduler)
			if err != nil {
				return err
			}
			defer sc.Close()
			rc, err := dial(f.registry)
			if err != nil {
				return err
			}
			defer rc.Close()
			cfg := worker.Config{InstanceID: f.instanceID, Scheduler: schedulerv1.NewSchedulerServiceClient(sc),
				Registry: registryv1.NewRegistryServiceClient(rc), DataDir: f.dataDir, Capabilities: f.capabilities,
				ExecutionID: f.execution, Logger: logger, Roots: roots, AllowedEnv: f.allowEnv, Sandbox: sandbox, Prefetch: f.prefetch}
			if f.knowledge != "" {
				kc, err := dial(f.knowledge)
				if err != nil {
					return err
				}
				defer kc.Close()
				cfg.Knowledge = knowledgev1.NewKnowledgeServiceClient(kc)
			}
			// One registry for the server's metrics and the worker's (task phases), served on
			// --metrics-listen.
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			cfg.Metrics = reg
			w, err := worker.New(cfg)
			if err != nil {
				return err
			}
			files, err := gen.Files()
			if err != nil {
				return err
			}
			scfg := f.ServerConfig("agent", logger)
			scfg.DescriptorResolver, scfg.Registerer = files, reg
			scfg.Services = []server.Service{{Desc: &agentv1.AgentService_ServiceDesc, Impl: agent.New(agent.WithWorker(w))}}
			srv, err := scfg.Complete()
			if err != nil {
				return err
			}
			if f.cpuProfile != "" {
				stopProfile, err := servicecmd.StartCPUProfile(f.cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			// Bind first: an agent that cannot serve (the port is taken) exits before it registers
			// or claims anything.
			var lc net.ListenConfig
			lis, err := lc.Listen(ctx, "tcp", f.Listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w (nothing was registered; --listen 127.0.0.1:0 picks a free port)", f.Listen, err)
			}
			logger.Info("agent listening", "addr", lis.Addr().String(), "instance", w.InstanceID(), "session", w.SessionID(), "data_dir", cfg.DataDir)
			// The worker runs until drained; SIGTERM drains it (the current assignment finishes,
			// up to --drain-timeout) and then the server stops. When the server fails, the worker
			// is stopped with that cause and its Registry record ends FAILED.
			workCtx, stopWork := context.WithCancelCause(context.WithoutCancel(ctx))
			defer stopWork(nil)
			done := make(chan error, 1)
			go func() { done <- w.Run(workCtx) }()
			serveCtx, stopServe := context.WithCancel(context.Background())
			defer stopServe()
			workErr := make(chan error, 1)
			go func() {
				var err error
				select {
				case <-ctx.Done():
					w.Drain(f.drainTimeout)
					err = <-done
				case err = <-done:
				}
				if err != nil {
					logger.Error("worker stopped", "err", err)
				}
				workErr <- err
				stopServe()
			}()
			serveErr := srv.Serve(serveCtx, lis)
			if serveErr != nil {
				stopWork(fmt.Errorf("the agent's server failed: %w", serveErr))
				w.Drain(-1)
			}
			return errors.Join(serveErr, <-workErr)
		},
	}
	f.Bind(cmd, "127.0.0.1:7075", 0)
	fl := cmd.Flags()
	fl.Lookup("listen").Usage = "gRPC listen address; 127.0.0.1:0 picks a free port (the bound address is logged) [CONVERGE_LISTEN]"
	fl.StringVar(&f.scheduler, "scheduler", envOr("CONVERGE_SCHEDULER_ADDR", ""), "Scheduler address host:port [CONVERGE_SCHEDULER_ADDR]")
	fl.StringVar(&f.registry, "registry", envOr("CONVERGE_REGISTRY_ADDR", ""), "Registry address host:port [CONVERGE_REGISTRY_ADDR]")
	fl.StringVar(&f.knowledge, "knowledge", envOr("CONVERGE_KNOWLEDGE_ADDR", ""), "Knowledge address host:port; empty = no gotchas [CONVERGE_KNOWLEDGE_ADDR]")
	fl.StringVar(&f.token, "token", envOr("CONVERGE_TOKEN", ""), "bearer token sent to the services; prefer --token-file: a token in the arguments is visible to every process of the host [CONVERGE_TOKEN]")
	fl.StringVar(&f.tokenFile, "token-file", envOr("CONVERGE_TOKEN_FILE", ""), "file holding the bearer token sent to the services (read once at start) [CONVERGE_TOKEN_FILE]")
	fl.StringArrayVar(&f.allowedRoots, "allowed-root", splitPathList("CONVERGE_ALLOWED_ROOTS"), "directory under which local repositories (paths, file:// URLs) may be built in and pushed to, after resolving symbolic links; repeatable; none = no local repository [CONVERGE_ALLOWED_ROOTS, ':'-separated]")
	fl.StringVar(&f.sandbox, "sandbox", envOr("CONVERGE_AGENT_SANDBOX", "none"), "confine task processes: none, namespaces (own PID and mount namespaces: the agent and the host's processes are invisible, all die together) or namespaces-nonet (and no network); needs util-linux unshare [CONVERGE_AGENT_SANDBOX]")
	fl.StringSliceVar(&f.allowEnv, "allow-env", splitEnv("CONVERGE_AGENT_ALLOW_ENV"), "variable of the agent's environment a task list's executor may name (env_passthrough, api_key_env); repeatable; none = no variable; CONVERGE_* never [CONVERGE_AGENT_ALLOW_ENV, comma-separated]")
	fl.StringVar(&f.dataDir, "data-dir", envOr("CONVERGE_AGENT_DATA_DIR", ""), "mirror clones, worktrees and the records of running processes; empty = .converge/agent/<instance-id>, one per instance (two agent processes never share one) [CONVERGE_AGENT_DATA_DIR]")
	fl.StringVar(&f.instanceID, "instance-id", envOr("CONVERGE_INSTANCE_ID", ""), "agent instance id; empty = agent-<host>-<random> [CONVERGE_INSTANCE_ID]")
	fl.StringVar(&f.execution, "execution", envOr("CONVERGE_AGENT_EXECUTION", ""), "claim only this execution's assignments [CONVERGE_AGENT_EXECUTION]")
	fl.StringSliceVar(&f.capabilities, "capabilities", splitEnv("CONVERGE_AGENT_CAPABILITIES"), "capabilities announced to the Scheduler; empty = "+strings.Join(worker.DefaultCapabilities, ",")+" [CONVERGE_AGENT_CAPABILITIES]")
	fl.StringVar(&f.cpuProfile, "cpuprofile", envOr("CONVERGE_AGENT_CPUPROFILE", ""), "write a CPU profile (pprof) of the whole run to this file at exit; a %p in it is replaced by the process id [CONVERGE_AGENT_CPUPROFILE]")
	_ = fl.MarkHidden("cpuprofile")
	fl.BoolVar(&f.prefetch, "prefetch", false, "hold one assignment ahead of the one running: the next starts the moment the current one's work ends, its completion goes to the Scheduler meanwhile (for many short tasks: the one held ahead waits for this agent even when another is idle) [CONVERGE_AGENT_PREFETCH]")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", envDuration("CONVERGE_AGENT_DRAIN_TIMEOUT"), "on SIGTERM, cancel work still running after this long (0 = let it finish) [CONVERGE_AGENT_DRAIN_TIMEOUT]")
	return cmd
}

// envDuration reads a duration variable; an unset or unreadable one is 0 (RunE reports an
// unreadable one).
func envDuration(name string) time.Duration {
	d, _ := time.ParseDuration(os.Getenv(name))
	return d
}

// clientToken answers the bearer token sent to the services: --token-file's content, else
// --token (CONVERGE_TOKEN), with a warning when it was given on the command line.
func (f *agentFlags) clientToken(cmd *cobra.Command, logger interface{ Warn(string, ...any) }) (string, error) {
	if f.tokenFile != "" {
		if cmd.Flags().Changed("token") {
			return "", fmt.Errorf("--token and --token-file are exclusive: give the token in the file only")
		}
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" || strings.ContainsAny(tok, "\r\n") {
			return "", fmt.Errorf("--token-file %s: want one token on one line", f.tokenFile)
		}
		return tok, nil
	}
	if cmd.Flags().Changed("token") {
		logger.Warn("--token puts the token in the agent's arguments, which every process of the host can read (/proc/PID/cmdline): use --token-file")
	}
	return f.token, nil
}

// splitPathList reads a ':'-separated list of directories; unset or empty is none.
func splitPathList(name string) []string {
	var out []string
	for _, d := range filepath.SplitList(os.Getenv(name)) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

func splitEnv(name string) []string {
	v := os.Getenv(name)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// oneProcessor runs the agent on one processor unless GOMAXPROCS is set. The agent's own work
// is orchestration: with a second processor the runtime woke a spinning thread for each of a
// task's goroutine hand-offs, ≈ 15 % of the agent's CPU per no-op task (issue 17, six
// alternated pairs of bench/dag's fan-out: 0.79–0.93× with one).
func oneProcessor(lookup func(string) (string, bool)) {
	if _, set := lookup("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(1)
	}
}
