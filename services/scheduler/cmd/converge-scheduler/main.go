// Command converge-scheduler runs the converge Scheduler service on its own: task lists, waves, executions, leases and the event stream.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/scheduler"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

func main() { os.Exit(servicecmd.Execute(command())) }

func command() *cobra.Command {
	var (
		flags    servicecmd.Flags
		verifier string
		registry string
		stale    time.Duration
		token    string
		workDir  string
	)
	cmd := &cobra.Command{
		Use:   "converge-scheduler",
		Short: "converge Scheduler service: task lists, waves, executions, leases and the event stream",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := servicecmd.DurationFromEnv(cmd, "stale-after", staleAfterEnv); err != nil {
				return err
			}
			ctx, stop := server.SignalContext(cmd.Context())
			defer stop()
			logger, err := flags.Logger(os.Stderr)
			if err != nil {
				return err
			}
			st, err := postgres.New(ctx, flags.PostgresURL, database.WithLogger(logger))
			if err != nil {
				return err
			}
			defer st.Close()
			opts := []scheduler.Option{scheduler.WithLogger(logger), scheduler.WithWorkDir(workDir)}
			if verifier != "" {
				conn, err := client.Dial(verifier, client.Options{Token: token})
				if err != nil {
					return err
				}
				defer conn.Close()
				opts = append(opts, scheduler.WithVerifier(verifierv1.NewVerifierServiceClient(conn)))
			}
			if registry != "" {
				conn, err := client.Dial(registry, client.Options{Token: token})
				if err != nil {
					return err
				}
				defer conn.Close()
				opts = append(opts, scheduler.WithRegistry(registryv1.NewRegistryServiceClient(conn), stale))
			}
			s := scheduler.New(st, opts...)
			// The driver (lease reaper, Verify Done) runs on every replica; one leads at a time. It
			// starts once the schema is current (the readiness probe's first success).
			return flags.Serve(ctx, "scheduler", logger, server.Service{
				Desc:  &schedulerv1.SchedulerService_ServiceDesc,
				Impl:  s,
				Ready: servicecmd.ReadyProbe(st, flags.Migrate, func() { s.Start(ctx) }),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7071", servicecmd.NeedsPostgres)
	cmd.Flags().StringVar(&verifier, "verifier", envOr("CONVERGE_VERIFIER_ADDR", ""), "Verifier address host:port for Verify Done; empty = runs with done-criteria end BLOCKED [CONVERGE_VERIFIER_ADDR]")
	cmd.Flags().StringVar(&registry, "registry", envOr("CONVERGE_REGISTRY_ADDR", ""), "Registry address host:port: the reaper requeues what agents the Registry reports stale hold, before their leases run out; empty = leases alone [CONVERGE_REGISTRY_ADDR]")
	cmd.Flags().DurationVar(&stale, "stale-after", 30*time.Second, "an agent silent this long to the Registry and to the Scheduler loses its assignments, its Registry locks released first (with --registry) ["+staleAfterEnv+"]")
	cmd.Flags().StringVar(&token, "token", envOr("CONVERGE_TOKEN", ""), "bearer token sent to the Verifier [CONVERGE_TOKEN]")
	cmd.Flags().StringVar(&workDir, "work-dir", envOr("CONVERGE_SCHEDULER_WORK_DIR", os.TempDir()), "where Verify Done checks run branches out for the Verifier when it cannot fetch them itself (local paths, non-http(s) URLs; the Verifier must allow it as a root) [CONVERGE_SCHEDULER_WORK_DIR]")
	return cmd
}

// staleAfterEnv sets --stale-after when the flag is not given.
const staleAfterEnv = "CONVERGE_STALE_AFTER"

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
