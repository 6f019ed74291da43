// Command converge-knowledge runs the converge Knowledge service on its own: the gotcha knowledge base.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"os"

	"github.com/spf13/cobra"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

func main() { os.Exit(servicecmd.Execute(command())) }

func command() *cobra.Command {
	var flags servicecmd.Flags
	cmd := &cobra.Command{
		Use:   "converge-knowledge",
		Short: "converge Knowledge service: the gotcha knowledge base",
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
			return flags.Serve(ctx, "knowledge", logger, server.Service{
				Desc:  &knowledgev1.KnowledgeService_ServiceDesc,
				Impl:  knowledge.New(st),
				Ready: servicecmd.ReadyProbe(st, flags.Migrate),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7073", servicecmd.NeedsPostgres)
	return cmd
}
