// Command converge is converge's CLI: `converge dev` runs all five services in one process on the
// embedded default (SQLite, in-process locks); `converge migrate` applies the services' schema
// migrations to Postgres or to the dev data directory.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/platform/servicecmd"
)

func main() { os.Exit(servicecmd.Execute(rootCommand())) }

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "converge",
		Short: "converge runs coding-agent builds and calls them done only when Verify Done says so",
		Long: "converge runs autonomous coding-agent builds as parallel waves of tasks in git worktrees, " +
			"and calls work done only when an independent verifier answers CONVERGED.",
		SilenceUsage: true,
	}
	root.AddCommand(devCommand(), migrateCommand())
	return root
}
