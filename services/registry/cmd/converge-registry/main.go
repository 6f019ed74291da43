// Command converge-registry runs the converge Registry service on its own: file locks, ownership and agent heartbeats.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/registry"
)

func main() { servicecmd.Main(registry.Module()) }

func command() *cobra.Command { return registry.Module().Command() }
