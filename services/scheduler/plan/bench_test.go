package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// benchGraph is a DAG of n tasks with exactly m dependencies: task j depends on tasks chosen at
// random among the 2,000 before it. Each task writes one of 20,000 files in 200 packages (so
// writers collide), reads its package's shared file, and one task in 100 also writes its
// package's directory or a glob over its package's tests.
func benchGraph(n, m int) []Task {
	rng := rand.New(rand.NewPCG(42, 42))
	tasks := make([]Task, n)
	// Spread m dependencies: as many per task as fit, the rest one more on the last tasks.
	per := m / n
	extra := m - per*n
	for j := range tasks {
		k := per
		if j >= n-extra {
			k++
		}
		k = min(k, j)
		deps := make([]int32, 0, k)
		seen := make(map[int32]bool, k)
		window := min(j, 2000)
		for len(deps) < k {
			d := int32(j - 1 - rng.IntN(window))
			if !seen[d] {
				seen[d] = true
				deps = append(deps, d)
			}
		}
		pkg := rng.IntN(200)
		tasks[j] = Task{
			ID:       fmt.Sprintf("T%d", j),
			Priority: int32(rng.IntN(3)),
			Deps:     deps,
			Impacts: []tasklist.Impact{
				w(fmt.Sprintf("pkg%03d/file%05d.go", pkg, rng.IntN(20000))),
				r(fmt.Sprintf("pkg%03d/shared.go", pkg)),
			},
		}
		switch rng.IntN(200) {
		case 0:
			tasks[j].Impacts = append(tasks[j].Impacts, w(fmt.Sprintf("pkg%03d/gen/", pkg)))
		case 1:
			tasks[j].Impacts = append(tasks[j].Impacts, w(fmt.Sprintf("pkg%03d/**/*_test.go", pkg)))
		}
	}
	// Fix up the first tasks, which cannot have "per" dependencies: give the missing ones to the
	// last tasks so that the total is exactly m.
	total := 0
	for _, t := range tasks {
		total += len(t.Deps)
	}
	for j := n - 1; total < m; j-- {
		have := map[int32]bool{}
		for _, d := range tasks[j].Deps {
			have[d] = true
		}
		for d := int32(j - 1); d >= 0 && total < m; d-- {
			if !have[d] {
				tasks[j].Deps = append(tasks[j].Deps, d)
				total++
				break
			}
		}
	}
	return tasks
}

// kahn is the plain topological sort the planner is measured against: the same compressed
// adjacency and queue as Levels, without levels, priorities, files or reasons.
func kahn(tasks []Task) []int32 {
	n := len(tasks)
	off := make([]int32, n+1)
	indeg := make([]int32, n)
	for i, t := range tasks {
		for _, d := range t.Deps {
			off[d+1]++
		}
		indeg[i] = int32(len(t.Deps))
	}
	for i := range n {
		off[i+1] += off[i]
	}
	adj := make([]int32, off[n])
	pos := make([]int32, n)
	copy(pos, off[:n])
	for i, t := range tasks {
		for _, d := range t.Deps {
			adj[pos[d]] = int32(i)
			pos[d]++
		}
	}
	order := make([]int32, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			order = append(order, int32(i))
		}
	}
	for head := 0; head < len(order); head++ {
		u := order[head]
		for _, v := range adj[off[u]:off[u+1]] {
			if indeg[v]--; indeg[v] == 0 {
				order = append(order, v)
			}
		}
	}
	return order
}

// BenchmarkPlan100k plans a 100,000-task DAG with 1,000,000 dependencies (max_parallel 32) and,
// in the same iterations, runs a plain Kahn topological sort of the same graph. It reports both
// times and their ratio ("plan/kahn"). The 10k sub-benchmark (10,000 tasks, 100,000
// dependencies) shows how the time grows with the size.
//
//	go test -run '^$' -bench Plan100k -benchtime 5x ./plan
func BenchmarkPlan100k(b *testing.B) {
	for _, size := range []struct {
		name string
		n, m int
	}{{"10k", 10_000, 100_000}, {"100k", 100_000, 1_000_000}} {
		b.Run(size.name, func(b *testing.B) { benchmarkPlan(b, size.n, size.m) })
	}
}

func benchmarkPlan(b *testing.B, n, m int) {
	tasks := benchGraph(n, m)
	edges := 0
	for _, t := range tasks {
		edges += len(t.Deps)
	}
	if edges != m {
		b.Fatalf("graph has %d edges, want %d", edges, m)
	}
	var kahnTime, planTime time.Duration
	waves, levels := 0, 0
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if len(kahn(tasks)) != n {
			b.Fatal("kahn: cycle")
		}
		mid := time.Now()
		res, err := Plan(tasks, 32)
		if err != nil {
			b.Fatal(err)
		}
		kahnTime += mid.Sub(start)
		planTime += time.Since(mid)
		waves, levels = len(res.Waves), res.Levels
	}
	b.ReportMetric(float64(kahnTime.Nanoseconds())/float64(b.N), "kahn-ns/op")
	b.ReportMetric(float64(planTime.Nanoseconds())/float64(b.N), "plan-ns/op")
	b.ReportMetric(float64(planTime)/float64(kahnTime), "plan/kahn")
	b.ReportMetric(float64(waves), "waves")
	b.ReportMetric(float64(levels), "levels")
}
