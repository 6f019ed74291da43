package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"

	"github.com/converge-dev/converge/services/scheduler/plan/internal/planref"
)

// The packer was rewritten for speed (issue 17, P5: integer ids, slices, generation-stamped
// sets, levels by memoized longest path): on random lists of every shape its plan must be
// exactly the reference planner's (the code before the rewrite, internal/planref), wave by wave,
// placement by placement, reasons, conflicts, paths and messages included.

// equivalenceTasks is a random list: dependencies backwards and forwards (a DAG over a random
// permutation), files, directories, globs and identical globs over a small tree, readers and
// writers, priorities, and check-only tasks.
func equivalenceTasks(rng *rand.Rand, n int) []Task {
	paths := []string{
		"go.mod", "a/x.go", "a/y.go", "a/b/z.go", "a/b/w.ts", "c/x.go", "c/d/e.go", "c/d/f/g.go",
		"a/", "a/b/", "c/", "c/d/", "c/d/f/", "a/**/*.go", "a/*.go", "c/**", "**/*.ts", "a/{x,y}.go",
		"c/d/*.go", "b/x.go", "b/y.go", "b/z.go",
	}
	perm := rng.Perm(n) // topological order: task perm[k] may depend on perm[j], j < k
	tasks := make([]Task, n)
	for k, i := range perm {
		tasks[i] = Task{ID: fmt.Sprintf("t%d", i), Priority: int32(rng.IntN(4)) - 1}
		for range rng.IntN(4) {
			if k > 0 {
				d := int32(perm[rng.IntN(k)])
				if !containsDep(tasks[i].Deps, d) {
					tasks[i].Deps = append(tasks[i].Deps, d)
				}
			}
		}
		if rng.IntN(25) == 0 {
			tasks[i].Exclusive = true
			continue
		}
		for range rng.IntN(4) {
			p := paths[rng.IntN(len(paths))]
			if rng.IntN(3) == 0 {
				tasks[i].Impacts = append(tasks[i].Impacts, r(p))
			} else {
				tasks[i].Impacts = append(tasks[i].Impacts, w(p))
			}
		}
	}
	return tasks
}

func toRef(tasks []Task) []planref.Task {
	out := make([]planref.Task, len(tasks))
	for i, t := range tasks {
		out[i] = planref.Task{ID: t.ID, Priority: t.Priority, Deps: t.Deps, Impacts: t.Impacts, Exclusive: t.Exclusive}
	}
	return out
}

// shown is a placement as its readers see it: reasons, conflicts, paths and message rendered.
type shown struct {
	Task, Level int
	Reason      schedulerv1.PlacementReason
	Conflicts   []int
	Paths       []string
	Message     string
}

// shownPlan is a plan as its readers see it.
type shownPlan struct {
	Levels int
	Waves  [][]shown
}

// show renders every placement of r.
func show(r *Result) shownPlan {
	out := shownPlan{Levels: r.Levels, Waves: make([][]shown, len(r.Waves))}
	for i, wave := range r.Waves {
		out.Waves[i] = make([]shown, len(wave))
		for j := range wave {
			out.Waves[i][j] = showPlacement(r, &wave[j])
		}
	}
	return out
}

func showPlacement(r *Result, pl *Placement) shown {
	return shown{Task: pl.Task, Level: pl.Level, Reason: pl.Reason, Conflicts: r.Conflicts(pl), Paths: r.Paths(pl),
		Message: r.Message(pl)}
}

func fromRef(r *planref.Result) shownPlan {
	out := shownPlan{Levels: r.Levels, Waves: make([][]shown, len(r.Waves))}
	for i, wave := range r.Waves {
		out.Waves[i] = make([]shown, len(wave))
		for j, pl := range wave {
			out.Waves[i][j] = shown{Task: pl.Task, Level: pl.Level, Reason: pl.Reason, Conflicts: pl.Conflicts,
				Paths: pl.Paths, Message: pl.Message}
		}
	}
	return out
}

func requireSamePlan(t *testing.T, tasks []Task, maxParallel int, what string) {
	t.Helper()
	want, wantErr := planref.Plan(toRef(tasks), maxParallel)
	got, err := Plan(tasks, maxParallel)
	if wantErr != nil {
		require.Error(t, err, what)
		return
	}
	require.NoError(t, err, what)
	require.Equal(t, fromRef(want), show(got), what)
	requireResponseShows(t, tasks, got, what)
	levels, nLevels, err := Levels(tasks)
	require.NoError(t, err)
	wantLevels, wantN, _ := planref.Levels(toRef(tasks))
	require.Equal(t, wantLevels, levels, what)
	require.Equal(t, wantN, nLevels, what)
}

func TestPlanEqualsTheReferencePlanner(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 17))
		tasks := equivalenceTasks(rng, 1+rng.IntN(200))
		maxParallel := rng.IntN(8) // 0: the default
		requireSamePlan(t, tasks, maxParallel, fmt.Sprintf("seed %d", seed))
	}
}

// More distinct priorities than levelOrder sorts by counting: the level's own sort.
func TestPlanEqualsTheReferencePlannerWithManyPriorities(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 18))
		tasks := equivalenceTasks(rng, 1+rng.IntN(200))
		for i := range tasks {
			tasks[i].Priority = int32(rng.IntN(3*maxPriorities)) - maxPriorities
		}
		requireSamePlan(t, tasks, rng.IntN(8), fmt.Sprintf("seed %d", seed))
	}
}

func TestPlanEqualsTheReferencePlannerOnTheBenchmarkGraph(t *testing.T) {
	t.Parallel()
	requireSamePlan(t, benchGraph(10_000, 100_000), 32, "benchmark graph")
	// Waves wider than maxLateReport: their conflicts are found when the task is placed.
	requireSamePlan(t, benchGraph(10_000, 5_000), 3*maxLateReport, "wide waves")
}

func TestPlanEqualsTheReferencePlannerOnManyWritersOfOneFile(t *testing.T) {
	t.Parallel()
	tasks := make([]Task, 3000)
	for i := range tasks {
		tasks[i] = task(fmt.Sprintf("t%d", i), nil, w("same.go"), r(fmt.Sprintf("d/f%d.go", i%7)), w(fmt.Sprintf("e/%d/", i%3)))
	}
	requireSamePlan(t, tasks, 5, "many writers")
}

func TestLevelsFindCyclesBackwardsAndForwards(t *testing.T) {
	t.Parallel()
	for _, tasks := range [][]Task{
		{task("a", []int32{1}), task("b", []int32{0})},
		{task("a", nil), task("b", []int32{2}), task("c", []int32{3}), task("d", []int32{1})},
		{task("a", []int32{0})},
		{task("a", []int32{2}), task("b", []int32{0}), task("c", []int32{1})},
	} {
		_, _, err := Levels(tasks)
		require.ErrorIs(t, err, ErrCycle)
		_, err = Plan(tasks, 2)
		require.ErrorIs(t, err, ErrCycle)
	}
}

// FuzzPlanEqualsTheReferencePlanner plans fuzzer-chosen lists with both planners.
func FuzzPlanEqualsTheReferencePlanner(f *testing.F) {
	for seed := range uint64(20) {
		f.Add(seed, uint8(30), uint8(3))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n, maxParallel uint8) {
		rng := rand.New(rand.NewPCG(seed, 17))
		requireSamePlan(t, equivalenceTasks(rng, int(n)), int(maxParallel%9), "fuzz")
	})
}

// requireResponseShows checks that the response of plan r carries every placement as show
// renders it.
func requireResponseShows(t *testing.T, tasks []Task, r *Result, what string) {
	t.Helper()
	res := Response(tasks, r, nil)
	shownPlan := show(r)
	require.Len(t, res.GetWaves(), len(shownPlan.Waves), what)
	for w, wave := range res.GetWaves() {
		require.EqualValues(t, w+1, wave.GetWaveNumber(), what)
		require.Len(t, wave.GetPlacements(), len(shownPlan.Waves[w]), what)
		for i, wp := range wave.GetPlacements() {
			pl := shownPlan.Waves[w][i]
			var conflicts []string
			for _, c := range pl.Conflicts {
				conflicts = append(conflicts, tasks[c].ID)
			}
			require.Equal(t, tasks[pl.Task].ID, wp.GetTaskId(), what)
			require.Equal(t, pl.Reason, wp.GetReason(), what)
			require.EqualValues(t, pl.Level, wp.GetDependencyLevel(), what)
			require.Equal(t, conflicts, wp.GetConflictingTaskIds(), what)
			require.Equal(t, pl.Paths, wp.GetConflictingPaths(), what)
			require.Equal(t, pl.Message, wp.GetMessage(), what)
		}
	}
}

// A subset of a prepared list plans as the list of its tasks prepared anew: its plan, reasons,
// conflicts, messages and response.
func TestSubsetPlansAsItsTasksPreparedAnew(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 19))
		tasks := equivalenceTasks(rng, 1+rng.IntN(150))
		keep := make([]bool, len(tasks))
		newIndex := make([]int32, len(tasks))
		var kept []Task
		for i := range tasks {
			keep[i] = rng.IntN(4) > 0
			newIndex[i] = int32(len(kept))
			if keep[i] {
				kept = append(kept, tasks[i])
			}
		}
		for i := range kept { // their dependencies on the tasks left out dropped
			var deps []int32
			for _, d := range kept[i].Deps {
				if keep[d] {
					deps = append(deps, newIndex[d])
				}
			}
			kept[i].Deps = deps
		}
		maxParallel := rng.IntN(8)
		what := fmt.Sprintf("seed %d", seed)
		want, wantErr := Plan(kept, maxParallel)
		sub := Prepare(tasks).Subset(keep)
		require.Len(t, sub.Tasks(), len(kept), what)
		if len(kept) > 0 {
			require.Equal(t, kept, sub.Tasks(), what)
		}
		got, err := sub.Plan(t.Context(), maxParallel, DefaultBudget)
		if wantErr != nil {
			require.Error(t, err, what)
			continue
		}
		require.NoError(t, err, what)
		require.Equal(t, show(want), show(got), what)
		require.Equal(t, Response(kept, want, nil), Response(sub.Tasks(), got, nil), what)
	}
}
