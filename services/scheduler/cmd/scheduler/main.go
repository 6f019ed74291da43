// Command converge-scheduler runs the converge Scheduler service on its own: task lists, waves, executions, leases and the event stream.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"os"

	"github.com/spf13/cobra"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/scheduler"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

func main() { os.Exit(servicecmd.Execute(command())) }

func command() *cobra.Command {
	var flags servicecmd.Flags
	cmd := &cobra.Command{
		Use:   "converge-scheduler",
		Short: "converge Scheduler service: task lists, waves, executions, leases and the event stream",
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
			return flags.Serve(ctx, "scheduler", logger, server.Service{
				Desc:  &schedulerv1.SchedulerService_ServiceDesc,
				Impl:  scheduler.New(st),
				Ready: servicecmd.ReadyProbe(st, flags.Migrate),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7071", servicecmd.NeedsPostgres)
	return cmd
}
