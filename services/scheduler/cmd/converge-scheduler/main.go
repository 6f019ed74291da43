// Command converge-scheduler runs the converge Scheduler service on its own: task lists, waves, executions, leases and the event stream.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

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

func main() { servicecmd.Main(module()) }

// staleAfterEnv sets --stale-after when the flag is not given.
const staleAfterEnv = "CONVERGE_STALE_AFTER"

func command() *cobra.Command { return module().Command() }

func module() servicecmd.Module {
	var (
		verifier string
		registry string
		stale    time.Duration
		token    string
		workDir  string
	)
	return servicecmd.Module{
		Name:        "scheduler",
		Short:       "converge Scheduler service: task lists, waves, executions, leases and the event stream",
		Listen:      "127.0.0.1:7071",
		Needs:       servicecmd.NeedsPostgres,
		DurationEnv: map[string]string{"stale-after": staleAfterEnv},
		Bind: func(fs *pflag.FlagSet) {
			fs.StringVar(&verifier, "verifier", envOr("CONVERGE_VERIFIER_ADDR", ""), "Verifier address host:port for Verify Done; empty = runs with done-criteria end BLOCKED [CONVERGE_VERIFIER_ADDR]")
			fs.StringVar(&registry, "registry", envOr("CONVERGE_REGISTRY_ADDR", ""), "Registry address host:port: the reaper requeues what agents the Registry reports stale hold, before their leases run out; empty = leases alone [CONVERGE_REGISTRY_ADDR]")
			fs.DurationVar(&stale, "stale-after", 30*time.Second, "an agent silent this long to the Registry and to the Scheduler loses its assignments, its Registry locks released first (with --registry) ["+staleAfterEnv+"]")
			fs.StringVar(&token, "token", envOr("CONVERGE_TOKEN", ""), "bearer token sent to the Verifier [CONVERGE_TOKEN]")
			fs.StringVar(&workDir, "work-dir", envOr("CONVERGE_SCHEDULER_WORK_DIR", os.TempDir()), workDirUsage)
		},
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			var closers []func()
			closeAll := func() {
				for i := len(closers) - 1; i >= 0; i-- {
					closers[i]()
				}
			}
			st, err := postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
			if err != nil {
				return servicecmd.Built{}, err
			}
			closers = append(closers, func() { _ = st.Close() })
			dial := func(addr string) (*grpc.ClientConn, error) {
				conn, err := client.Dial(addr, client.Options{Token: token})
				if err == nil {
					closers = append(closers, func() { _ = conn.Close() })
				}
				return conn, err
			}
			opts := []scheduler.Option{scheduler.WithLogger(rt.Logger), scheduler.WithWorkDir(workDir)}
			if verifier != "" {
				conn, err := dial(verifier)
				if err != nil {
					return servicecmd.Built{Close: closeAll}, err
				}
				opts = append(opts, scheduler.WithVerifier(verifierv1.NewVerifierServiceClient(conn)))
			}
			if registry != "" {
				conn, err := dial(registry)
				if err != nil {
					return servicecmd.Built{Close: closeAll}, err
				}
				opts = append(opts, scheduler.WithRegistry(registryv1.NewRegistryServiceClient(conn), stale))
			}
			s := scheduler.New(st, opts...)
			// The driver (lease reaper, Verify Done) runs on every replica; one leads at a time. It
			// starts once the schema is current (the readiness probe's first success).
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s},
				Store: st,
				Start: s.Start,
				Close: closeAll,
			}, nil
		},
	}
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

const workDirUsage = "where Verify Done checks run branches out for the Verifier when it cannot fetch them itself (local paths, non-http(s) URLs; the Verifier must allow it as a root) [CONVERGE_SCHEDULER_WORK_DIR]"
