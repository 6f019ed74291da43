// Command converge-agent runs a converge Agent: the worker that claims tasks from the Scheduler and
// runs the PIV loop in git worktrees. It is configured by flags and CONVERGE_* environment; --help
// names both.
package main

import (
	"os"

	"github.com/spf13/cobra"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/agent"
)

func main() { os.Exit(servicecmd.Execute(command())) }

func command() *cobra.Command {
	var flags servicecmd.Flags
	cmd := &cobra.Command{
		Use:   "converge-agent",
		Short: "converge Agent: the build worker (status and control API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := server.SignalContext(cmd.Context())
			defer stop()
			logger, err := flags.Logger(os.Stderr)
			if err != nil {
				return err
			}
			// The agent keeps no state of its own (it reports to the Scheduler), so it is ready at once.
			return flags.Serve(ctx, "agent", logger, server.Service{
				Desc: &agentv1.AgentService_ServiceDesc,
				Impl: agent.New(),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7075", 0)
	return cmd
}
