// Command converge-verifier runs the converge Verifier service on its own: Verify Done with evidence.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"os"

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
	var flags servicecmd.Flags
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
			return flags.Serve(ctx, "verifier", logger, server.Service{
				Desc:  &verifierv1.VerifierService_ServiceDesc,
				Impl:  verifier.New(st),
				Ready: servicecmd.ReadyProbe(st, flags.Migrate),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7074", servicecmd.NeedsPostgres)
	return cmd
}
