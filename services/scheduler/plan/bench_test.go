package plan

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/converge-dev/converge/services/scheduler/plan/internal/planref"
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
// in the same iterations, runs a plain Kahn topological sort of the same graph. The 10k
// sub-benchmark (10,000 tasks, 100,000 dependencies) shows how the time grows with the size.
//
// A list is planned in two steps: Prepare interns its paths (once per list: a stored list keeps
// its Prepared), then Prepared.Plan plans it. Both are timed in every iteration, apart:
// "plan-ns/op" and "plan/kahn" are the plan of a prepared list (what planning a stored list
// again costs), "prep-ns/op" the interning, and "prep+plan/kahn" both (a list planned once, as
// given: what Plan costs). "min-…" are the fastest iteration of each (the figure least moved by
// other load on the machine), "cpu-…" the CPU time of the benchmark's thread. Plan leaves the
// placements' messages to whoever reads them: "resp-cpu-ns/op" is Response (every message
// rendered, the response built, what StartExecution and PlanWaves pay on top of Plan), and
// "cpu-prep+plan+resp/cpu-kahn" the three together against Kahn. "cpu-paths/cpu-kahn" is the floor
// of any planner that checks file conflicts, which Kahn does not: one pass that reads and hashes
// each task's paths, nothing kept. The "before" sub-benchmarks run the planner before the
// rewrite (internal/planref) in the same run: "plan" is then its whole plan.
//
//	go test -run '^$' -bench Plan100k -benchtime 5x ./plan
func BenchmarkPlan100k(b *testing.B) {
	for _, size := range []struct {
		name string
		n, m int
	}{{"10k", 10_000, 100_000}, {"100k", 100_000, 1_000_000}} {
		b.Run(size.name, func(b *testing.B) { benchmarkPlan(b, size.n, size.m, planOf) })
		b.Run(size.name+"/before", func(b *testing.B) { benchmarkPlan(b, size.n, size.m, planBefore) })
	}
}

// A planner under benchmark: prepare (nil: none) and plan, which returns the number of waves and
// levels and a function that builds the plan's response (nil: none).
type planner struct {
	prepare func([]Task) *Prepared
	plan    func(tasks []Task, pr *Prepared, maxParallel int) (int, int, func(), error)
}

var (
	planOf = planner{prepare: Prepare, plan: func(tasks []Task, pr *Prepared, maxParallel int) (int, int, func(), error) {
		res, err := pr.Plan(context.Background(), maxParallel, DefaultBudget)
		if err != nil {
			return 0, 0, nil, err
		}
		return len(res.Waves), res.Levels, func() { Response(tasks, res, nil) }, nil
	}}
	planBefore = planner{plan: func(tasks []Task, _ *Prepared, maxParallel int) (int, int, func(), error) {
		res, err := planref.Plan(toRef(tasks), maxParallel)
		if err != nil {
			return 0, 0, nil, err
		}
		return len(res.Waves), res.Levels, nil, nil
	}}
)

// timing sums one measured step over the iterations: wall, fastest wall and thread CPU.
type timing struct {
	wall, min, cpu time.Duration
}

func (t *timing) add(wall, cpu time.Duration) {
	if t.min == 0 || wall < t.min {
		t.min = wall
	}
	t.wall += wall
	t.cpu += cpu
}

func benchmarkPlan(b *testing.B, n, m int, pl planner) {
	tasks := benchGraph(n, m)
	edges := 0
	for _, t := range tasks {
		edges += len(t.Deps)
	}
	if edges != m {
		b.Fatalf("graph has %d edges, want %d", edges, m)
	}
	var kahnT, prepT, planT, bothT timing
	var respCPU, pathsCPU time.Duration
	runtime.LockOSThread() // the thread's CPU time is the benchmark's
	defer runtime.UnlockOSThread()
	waves, levels := 0, 0
	b.ResetTimer()
	for b.Loop() {
		c0, t0 := threadCPU(b), time.Now()
		if len(kahn(tasks)) != n {
			b.Fatal("kahn: cycle")
		}
		c1, t1 := threadCPU(b), time.Now()
		var pr *Prepared
		if pl.prepare != nil {
			pr = pl.prepare(tasks)
		}
		c2, t2 := threadCPU(b), time.Now()
		nWaves, nLevels, respond, err := pl.plan(tasks, pr, 32)
		if err != nil {
			b.Fatal(err)
		}
		c3, t3 := threadCPU(b), time.Now()
		if respond != nil {
			respond()
			respCPU += threadCPU(b) - c3
		}
		c4 := threadCPU(b)
		if pathPass(tasks) == 0 {
			b.Fatal("no paths")
		}
		pathsCPU += threadCPU(b) - c4
		kahnT.add(t1.Sub(t0), c1-c0)
		prepT.add(t2.Sub(t1), c2-c1)
		planT.add(t3.Sub(t2), c3-c2)
		bothT.add(t3.Sub(t1), c3-c1)
		waves, levels = nWaves, nLevels
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	ratio := func(a, k time.Duration) float64 { return float64(a) / float64(k) }
	b.ReportMetric(per(kahnT.wall), "kahn-ns/op")
	b.ReportMetric(per(planT.wall), "plan-ns/op")
	b.ReportMetric(ratio(planT.wall, kahnT.wall), "plan/kahn")
	// The fastest iteration of each: on a shared machine the minimum is the least disturbed.
	b.ReportMetric(float64(kahnT.min.Nanoseconds()), "kahn-min-ns")
	b.ReportMetric(float64(planT.min.Nanoseconds()), "plan-min-ns")
	b.ReportMetric(ratio(planT.min, kahnT.min), "min-plan/min-kahn")
	// CPU time of the benchmark's thread (GC work on other threads left out): what other load
	// on the machine moves least.
	b.ReportMetric(per(kahnT.cpu), "kahn-cpu-ns/op")
	b.ReportMetric(per(planT.cpu), "plan-cpu-ns/op")
	b.ReportMetric(ratio(planT.cpu, kahnT.cpu), "cpu-plan/cpu-kahn")
	if pl.prepare != nil {
		b.ReportMetric(per(prepT.wall), "prep-ns/op")
		b.ReportMetric(per(prepT.cpu), "prep-cpu-ns/op")
		b.ReportMetric(ratio(bothT.wall, kahnT.wall), "prep+plan/kahn")
		b.ReportMetric(ratio(bothT.min, kahnT.min), "min-prep+plan/min-kahn")
		b.ReportMetric(ratio(bothT.cpu, kahnT.cpu), "cpu-prep+plan/cpu-kahn")
	}
	if respCPU > 0 {
		b.ReportMetric(per(respCPU), "resp-cpu-ns/op")
		b.ReportMetric(ratio(bothT.cpu+respCPU, kahnT.cpu), "cpu-prep+plan+resp/cpu-kahn")
	}
	b.ReportMetric(ratio(pathsCPU, kahnT.cpu), "cpu-paths/cpu-kahn")
	b.ReportMetric(float64(waves), "waves")
	b.ReportMetric(float64(levels), "levels")
}

// pathPass reads and hashes every impact's path once (a sum of the hashes, so that nothing is
// left out): the least a planner that names each file must do.
func pathPass(tasks []Task) uint64 {
	seed := internSeed
	sum := uint64(0)
	for i := range tasks {
		for _, im := range tasks[i].Impacts {
			sum += maphash.String(seed, im.Path)
		}
	}
	return sum
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}
