package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// converge dev collects garbage at GOGC=devGOGC unless the environment sets GOGC, and its help
// says so.
func TestDevGCPercentUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	devGCPercent(func(string) (string, bool) { return "", false })
	require.Equal(t, devGOGC, debug.SetGCPercent(100))
	devGCPercent(func(name string) (string, bool) { return "100", name == "GOGC" })
	require.Equal(t, 100, debug.SetGCPercent(100), "GOGC in the environment is the operator's choice")
	require.Contains(t, devCommand().Long, "GOGC=200")
}
