package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A run on converge dev is watched by its ending entry alone (waitEnd) and its figures come from
// the whole log read afterwards (clustertest.ExecutionLog): every task's completion is in them, the wall ends at
// the ending entry (after the last completion: EndMs ≥ 0), and the observer's reads during the
// run are the cheap polls, fewer than one per task.
func TestEmbeddedRunReadsTheWholeLogAfterItsEnd(t *testing.T) {
	t.Parallel()
	o := options{tasks: 40, agents: 2, timeout: 2 * time.Minute}
	g, err := makeGraph("fanout", o)
	require.NoError(t, err)
	r, err := embedded(g, o, "eager", true)
	require.NoError(t, err)
	require.Equal(t, "CONVERGED_PENDING_HUMAN", r.Outcome)
	require.Equal(t, 40, r.Completed)
	require.Positive(t, r.WallS)
	require.GreaterOrEqual(t, r.EndMs, 0.0)
	// The claim → start figures come from the log's LEASE_GRANTED and TASK_STARTED entries. On a
	// fast host most tasks start within the millisecond of store time their lease was granted in
	// (the p50 is then 0 ms), not all 40 of them.
	require.Equal(t, "claim→start", r.Latency)
	require.Positive(t, r.LatMaxMs)
	require.GreaterOrEqual(t, r.LatMaxMs, r.LatP50Ms)
	require.Less(t, r.RPCsPerTask["SchedulerService/GetExecutionLog"], 1.0)
}
