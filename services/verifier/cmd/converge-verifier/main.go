// Command converge-verifier runs the converge Verifier service on its own: Verify Done with evidence.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"os"
	"strconv"

	"github.com/spf13/cobra"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/verifier"
	"github.com/converge-dev/converge/services/verifier/store/postgres"
)

func main() { os.Exit(servicecmd.Execute(command())) }

func command() *cobra.Command {
	var (
		flags            servicecmd.Flags
		allowedRoots     []string
		scratchDir       string
		maxVerifications int
	)
	cmd := &cobra.Command{
		Use:   "converge-verifier",
		Short: "converge Verifier service: Verify Done with evidence",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			svc := verifier.New(st,
				verifier.WithAllowedRoots(allowedRoots...),
				verifier.WithScratchDir(scratchDir),
				verifier.WithMaxVerifications(maxVerifications),
				verifier.WithLogger(logger),
			)
			return flags.Serve(ctx, "verifier", logger, server.Service{
				Desc:  &verifierv1.VerifierService_ServiceDesc,
				Impl:  svc,
				Ready: servicecmd.ReadyProbe(st, flags.Migrate),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7074", servicecmd.NeedsPostgres)
	fs := cmd.Flags()
	fs.StringArrayVar(&allowedRoots, "allowed-root", verifier.AllowedRootsFromEnv(),
		"directory whose subdirectories Verify may check as local_dir targets, repeatable; none: local_dir is refused ["+
			verifier.EnvAllowedRoots+", ':'-separated]")
	fs.StringVar(&scratchDir, "scratch-dir", os.Getenv("CONVERGE_VERIFIER_SCRATCH_DIR"),
		"where repository checkouts and command scratch directories go (default: the OS temporary directory) [CONVERGE_VERIFIER_SCRATCH_DIR]")
	fs.IntVar(&maxVerifications, "max-verifications", envInt("CONVERGE_VERIFIER_MAX_VERIFICATIONS", verifier.DefaultMaxVerifications),
		"verifications run at once; more answer ResourceExhausted [CONVERGE_VERIFIER_MAX_VERIFICATIONS]")
	return cmd
}

// envInt reads an integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}
