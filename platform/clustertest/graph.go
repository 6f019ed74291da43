package clustertest

import (
	mrand "math/rand/v2"
	"slices"
)

// RandomDAG is the random graph of the benchmarks (bench/dag's random shape, the Scheduler's
// BenchmarkRandomDAG): m distinct edges between uniformly random pairs of the n tasks, each
// pointing from the lower index to the higher (a uniform random DAG, G(n, m) oriented by a random
// topological order), from a fixed seed. deps[i] are the tasks i depends on, sorted.
func RandomDAG(n, m int, seed uint64) [][]int {
	rng := mrand.New(mrand.NewPCG(seed, 0xda9))
	m = min(m, n*(n-1)/2)
	deps := make([][]int, n)
	seen := map[[2]int]bool{}
	for edges := 0; edges < m; {
		a, b := rng.IntN(n), rng.IntN(n)
		if a == b {
			continue
		}
		from, to := min(a, b), max(a, b)
		if seen[[2]int{from, to}] {
			continue
		}
		seen[[2]int{from, to}] = true
		deps[to] = append(deps[to], from)
		edges++
	}
	for _, d := range deps {
		slices.Sort(d)
	}
	return deps
}
