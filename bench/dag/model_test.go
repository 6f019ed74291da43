package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModelSchedule: the uniform model's walls and latencies on graphs whose schedule is known
// by hand, and on the random DAG the bench runs: no shorter than its tasks over its workers, and
// eager no longer than strict there (500 against 504 units; not a rule of every graph: a greedy
// list schedule may end later when more is allowed to start).
func TestModelSchedule(t *testing.T) {
	fan, err := makeGraph("fanout", options{tasks: 10})
	require.NoError(t, err)
	m, err := modelSchedule(fan, 2, 10, true)
	require.NoError(t, err)
	require.Equal(t, uniformModel{Dispatch: "eager", WallUnits: 5}, m, "10 independent tasks on 2 workers: 5 units, no dependency")

	chain, err := makeGraph("chain", options{chainTasks: 7})
	require.NoError(t, err)
	m, err = modelSchedule(chain, 2, 7, false)
	require.NoError(t, err)
	require.Equal(t, uniformModel{Dispatch: "strict", WallUnits: 7}, m, "a chain: one task a unit, each started as its dependency completed")

	// 0 → {1, 2, 3}; 4 independent; 5 → 1. Waves: {0, 4}, {1, 2, 3}, {5}. The critical path
	// (0 → 1 → 5, three long) is claimed first in each wave.
	g := graph{shape: "random", deps: [][]int{nil, {0}, {0}, {0}, nil, {1}}}
	m, err = modelSchedule(g, 2, 6, false)
	require.NoError(t, err)
	// Unit 0: 0 and 4. Unit 1: 1 and 2 (each started as 0 completed). Unit 2: 3 (waited a unit
	// for a worker); strict: 5's wave opens only when 3 completes, at unit 3.
	// Latencies: 1, 2 → 0; 3 → 1; 5 → 3 − 2 = 1. p50 of [0 0 1 1] (pct: the 2nd) 0, p99 1.
	require.Equal(t, uniformModel{Dispatch: "strict", WallUnits: 4, P50Units: 0, P99Units: 1}, m)
	m, err = modelSchedule(g, 2, 6, true)
	require.NoError(t, err)
	// Eager: at unit 2, 3 (the open wave's) and 5 (its dependency 1 completed) start together.
	require.Equal(t, uniformModel{Dispatch: "eager", WallUnits: 3, P50Units: 0, P99Units: 1}, m)

	random, err := makeGraph("random", options{tasks: 1000, edges: 5000, seed: 1})
	require.NoError(t, err)
	strict, err := modelSchedule(random, 2, 1000, false)
	require.NoError(t, err)
	eager, err := modelSchedule(random, 2, 1000, true)
	require.NoError(t, err)
	require.GreaterOrEqual(t, eager.WallUnits, 500, "2 workers run 1,000 tasks in no fewer than 500 units")
	require.LessOrEqual(t, eager.WallUnits, strict.WallUnits)
	t.Logf("random DAG, 1,000 tasks / 5,000 edges, 2 workers: strict %+v, eager %+v", strict, eager)
}
