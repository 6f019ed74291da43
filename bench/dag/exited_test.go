package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/clustertest"
)

// A run's process that exits ends the wait for the run with its name and its log's tail (an agent
// that died at start left bench/dag polling the log until --timeout); one that runs does not.
func TestExitedNamesTheProcessAndItsLog(t *testing.T) {
	dying := clustertest.StartProcess(t, clustertest.ProcessSpec{Name: "agent-01", Bin: "/bin/sh",
		Args: []string{"-c", "echo 'panic: flag redefined'; exit 2"}})
	running := clustertest.StartProcess(t, clustertest.ProcessSpec{Name: "scheduler-0", Bin: "/bin/sleep", Args: []string{"60"}})
	require.NoError(t, exited([]*clustertest.Process{running}))
	<-dying.Done()
	err := exited([]*clustertest.Process{running, dying})
	require.ErrorContains(t, err, "agent-01 exited before the run ended")
	require.ErrorContains(t, err, "panic: flag redefined")
	require.NotContains(t, err.Error(), "scheduler-0")
}
