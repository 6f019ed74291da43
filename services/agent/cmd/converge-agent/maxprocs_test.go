package main

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOneProcessorUnlessGOMAXPROCSIsSet(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	runtime.GOMAXPROCS(2)
	oneProcessor(func(string) (string, bool) { return "", false })
	require.Equal(t, 1, runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(2)
	oneProcessor(func(name string) (string, bool) { return "2", name == "GOMAXPROCS" })
	require.Equal(t, 2, runtime.GOMAXPROCS(0), "GOMAXPROCS in the environment is the operator's choice")
}
