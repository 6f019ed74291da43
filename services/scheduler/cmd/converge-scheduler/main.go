// Command converge-scheduler runs the converge Scheduler service on its own: task lists, waves, executions, leases and the event stream.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/scheduler"
)

func main() { servicecmd.Main(scheduler.Module()) }

// staleAfterEnv sets --stale-after when the flag is not given.
const staleAfterEnv = scheduler.StaleAfterEnv

func command() *cobra.Command { return scheduler.Module().Command() }
