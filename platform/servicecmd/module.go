package servicecmd

import (
	"context"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/converge-dev/converge/platform/server"
)

// Module is one converge service as converge's binaries serve it: alone, by its standalone binary
// (services/<name>/cmd/converge-<name>, through Main, on Postgres), and with the others in one
// process by `converge dev` (through Build with Runtime.Embedded set, on SQLite). The common flags
// and environment, the logger, signals, the readiness probe that migrates and checks the schema,
// background work started once the schema is current, drain and stop all come from here; the
// module says only what is its own. Adding a common flag is one edit (Flags.Bind), adding a
// service one Module (services/<name>/module.go), served by both.
type Module struct {
	// Name is the service's name ("knowledge"): the binary is converge-<Name>.
	Name string
	// Short is the one-line description of the binary.
	Short string
	// Listen is the default listen address.
	Listen string
	// Needs says which stores the binary connects to (their flags exist only then).
	Needs Needs
	// Bind registers the module's own flags on fs, each with its CONVERGE_* variable; nil: none.
	Bind func(fs *pflag.FlagSet)
	// DurationEnv maps duration flags to the variables read when the flag is not given (see
	// DurationFromEnv).
	DurationEnv map[string]string
	// Check validates the module's flags before anything starts; nil: nothing to check.
	Check func() error
	// Build opens the module's stores and builds its service, flags parsed. ctx ends at shutdown.
	Build func(ctx context.Context, rt Runtime) (Built, error)
}

// Runtime is what a Module's Build gets: the common flags and the logger, and, inside converge
// dev, what the process shares.
type Runtime struct {
	Flags  *Flags
	Logger *slog.Logger
	// Embedded is set when converge dev builds the module inside its one process; nil for the
	// standalone binary.
	Embedded *Embedded
}

// Embedded is what converge dev gives each module it serves in its one process.
type Embedded struct {
	// SQLite is the path of the module's SQLite database (database.SQLiteMemory: a private
	// in-memory one), opened and migrated by Build.
	SQLite string
	// Self reaches every service of the process through its own address: what the standalone
	// binaries reach through their address flags (the same contracts as between binaries).
	Self *grpc.ClientConn
	// WorkDir is a directory of the process: the Scheduler checks run branches out there, so the
	// Verifier allows it.
	WorkDir string
	// AllowedRoots are more directories the Verifier may check (converge dev
	// --verifier-allowed-root).
	AllowedRoots []string
}

// Built is a Module's service, ready to serve.
type Built struct {
	// Desc and Impl are the gRPC service.
	Desc *server.Service
	// Store is the durable store: readiness migrates it (with --migrate) and checks its schema.
	Store Store
	// ReadyAlso is another readiness check (e.g. Redis); nil: none.
	ReadyAlso func(context.Context) error
	// Start runs the background work once the schema is current; nil: none.
	Start func(ctx context.Context)
	// Close releases what Build opened, after the server stopped; nil: nothing.
	Close func()
}

// Main runs m's binary and exits with its status.
func Main(m Module) { os.Exit(Execute(m.Command())) }

// Command is m's root command: `converge-<name> [flags]`.
func (m Module) Command() *cobra.Command {
	var flags Flags
	// cpuProfile is the service binaries' own (converge dev and converge-agent, which bind the
	// common flags too, have a --cpuprofile of their own).
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "converge-" + m.Name,
		Short: m.Short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := SecretsFromFiles(cmd); err != nil {
				return err
			}
			for flag, env := range LimitDurationEnv {
				if err := DurationFromEnv(cmd, flag, env); err != nil {
					return err
				}
			}
			for flag, env := range m.DurationEnv {
				if err := DurationFromEnv(cmd, flag, env); err != nil {
					return err
				}
			}
			if m.Check != nil {
				if err := m.Check(); err != nil {
					return err
				}
			}
			logger, err := flags.Logger(os.Stderr)
			if err != nil {
				return err
			}
			if cpuProfile != "" {
				stopProfile, err := StartCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stopProfile()
			}
			ctx, stop := server.SignalContext(cmd.Context())
			defer stop()
			b, err := m.Build(ctx, Runtime{Flags: &flags, Logger: logger})
			if b.Close != nil {
				defer b.Close()
			}
			if err != nil {
				return err
			}
			svc := *b.Desc
			var then []func()
			if b.Start != nil {
				then = append(then, func() { b.Start(ctx) })
			}
			svc.Ready = ReadyProbe(b.Store, flags.Migrate, then...)
			if b.ReadyAlso != nil {
				svc.Ready = AllReady(svc.Ready, b.ReadyAlso)
			}
			return flags.Serve(ctx, m.Name, logger, svc)
		},
	}
	flags.Bind(cmd, m.Listen, m.Needs)
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", env("CONVERGE_SERVICE_CPUPROFILE", ""), "write a CPU profile (pprof) of the whole run to this file when the service stops; a %p in it is replaced by the process id [CONVERGE_SERVICE_CPUPROFILE]")
	if m.Bind != nil {
		m.Bind(cmd.Flags())
	}
	return cmd
}
