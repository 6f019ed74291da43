// Command converge-verifier runs the converge Verifier service on its own: Verify Done with evidence.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/verifier"
)

func main() { servicecmd.Main(verifier.Module()) }
