// Command converge-knowledge runs the converge Knowledge service on its own: the gotcha knowledge base.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/knowledge"
)

func main() { servicecmd.Main(knowledge.Module()) }
