package plan

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// Shorthands for impacts: w("a.go") writes, r("a.go") reads; the kind is inferred from the path
// ("dir/" is a directory, "*.go" a glob).
func w(path string) tasklist.Impact {
	return tasklist.Impact{Path: path, Kind: tasklist.InferKind(path), Operation: commonv1.FileOperation_FILE_OPERATION_UPDATE}
}

func r(path string) tasklist.Impact {
	return tasklist.Impact{Path: path, Kind: tasklist.InferKind(path), Operation: commonv1.FileOperation_FILE_OPERATION_READ}
}

// task is a task with dependencies given by index.
func task(id string, deps []int32, impacts ...tasklist.Impact) Task {
	return Task{ID: id, Deps: deps, Impacts: impacts}
}

// waveIDs renders a plan as "wave: ids" lines, for short comparisons.
func waveIDs(tasks []Task, res *Result) []string {
	var out []string
	for i, wave := range res.Waves {
		ids := make([]string, len(wave))
		for j, pl := range wave {
			ids[j] = tasks[pl.Task].ID
		}
		out = append(out, fmt.Sprintf("%d: %s", i+1, strings.Join(ids, " ")))
	}
	return out
}

// placementOf finds the placement of a task by id.
func placementOf(t *testing.T, tasks []Task, res *Result, id string) shown {
	t.Helper()
	for _, wave := range res.Waves {
		for i := range wave {
			if tasks[wave[i].Task].ID == id {
				return showPlacement(res, &wave[i])
			}
		}
	}
	t.Fatalf("task %s not placed", id)
	return shown{}
}

func TestLevelsMakeWaves(t *testing.T) {
	t.Parallel()
	// a ← b ← d, a ← c ← d, e alone.
	tasks := []Task{
		task("a", nil, w("a.go")),
		task("b", []int32{0}, w("b.go")),
		task("c", []int32{0}, w("c.go")),
		task("d", []int32{1, 2}, w("d.go")),
		task("e", nil, w("e.go")),
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: a e", "2: b c", "3: d"}, waveIDs(tasks, res))
	require.Equal(t, 3, res.Levels)

	d := placementOf(t, tasks, res, "d")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL, d.Reason)
	require.Equal(t, 2, d.Level)
	require.Equal(t, "dependency level 2: after b", d.Message)
	require.Equal(t, "dependency level 0: waits for no task", placementOf(t, tasks, res, "a").Message)
}

func TestTwoWritersOfOneFileLandInDifferentWaves(t *testing.T) {
	t.Parallel()
	tasks := []Task{
		task("1.1", nil, w("api/routes.go"), w("api/habits.go")),
		task("1.2", nil, w("api/routes.go"), w("api/checkins.go")),
		task("1.3", nil, w("README.md")),
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: 1.1 1.3", "2: 1.2"}, waveIDs(tasks, res))

	pl := placementOf(t, tasks, res, "1.2")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, pl.Reason)
	require.Equal(t, []int{0}, pl.Conflicts)
	require.Equal(t, []string{"api/routes.go"}, pl.Paths)
	require.Equal(t, "file conflict with 1.1 on api/routes.go (wave 1)", pl.Message)
	require.Equal(t, 0, pl.Level, "still dependency level 0")
}

func TestReadersShareWritersDoNot(t *testing.T) {
	t.Parallel()
	tasks := []Task{
		task("read1", nil, r("schema.sql")),
		task("read2", nil, r("schema.sql")),
		task("write", nil, w("schema.sql")),
		task("read3", nil, r("schema.sql")),
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: read1 read2 read3", "2: write"}, waveIDs(tasks, res))
}

func TestOverlapKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		a, b     tasklist.Impact
		conflict bool
	}{
		{"same file", w("a/b.go"), w("a/b.go"), true},
		{"other file", w("a/b.go"), w("a/c.go"), false},
		{"file under directory", w("a/b/c.go"), w("a/"), true},
		{"directory over file", w("a/"), w("a/b/c.go"), true},
		{"file next to directory", w("ab/c.go"), w("a/"), false},
		{"nested directories", w("a/b/"), w("a/"), true},
		{"sibling directories", w("a/b/"), w("a/c/"), false},
		{"same directory", w("a/"), w("a/"), true},
		{"reader under a written directory", r("a/b.go"), w("a/"), true},
		{"reader of a directory and reader of a file", r("a/"), r("a/b.go"), false},
		{"glob matching a file", w("server/routes/**/*.ts"), w("server/routes/v1/habits.ts"), true},
		{"glob not matching a file", w("server/routes/**/*.ts"), w("server/routes/habits.go"), false},
		{"glob under a directory", w("src/**/*.go"), w("src/api/"), true},
		{"glob beside a directory", w("src/*.go"), w("docs/"), false},
		{"glob over a directory's parent", w("src/*.go"), w("src/api/"), false},
		{"globs with different extensions", w("src/*.go"), w("src/*.ts"), false},
		{"globs that can meet", w("src/**"), w("src/api/*.go"), true},
		{"globs in different directories", w("a/*.go"), w("b/*.go"), false},
		{"identical globs", w("a/*.go"), w("a/*.go"), true},
		{"identical globs, both read", r("a/*.go"), r("a/*.go"), false},
		{"brace alternatives", w("src/{a,b}.go"), w("src/b.go"), true},
		{"character classes", w("src/[ab].go"), w("src/c.go"), false},
		{"glob under a name and a file of that name", w("src/**"), w("src"), true},
		{"glob and a file outside its literal prefix", w("src/**/*.go"), w("lib/a.go"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, order := range [][2]tasklist.Impact{{c.a, c.b}, {c.b, c.a}} {
				tasks := []Task{task("x", nil, order[0]), task("y", nil, order[1])}
				res, err := Plan(tasks, 4)
				require.NoError(t, err)
				require.Equal(t, c.conflict, len(res.Waves) == 2, "%s vs %s: %v", order[0].Path, order[1].Path, waveIDs(tasks, res))
				if c.conflict {
					pl := placementOf(t, tasks, res, "y")
					require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, pl.Reason)
					require.Equal(t, []int{0}, pl.Conflicts)
					require.Equal(t, []string{order[1].Path}, pl.Paths)
				}
			}
		})
	}
}

func TestMaxParallelCapsWaves(t *testing.T) {
	t.Parallel()
	var tasks []Task
	for i := range 5 {
		tasks = append(tasks, task(fmt.Sprintf("t%d", i), nil, w(fmt.Sprintf("f%d.go", i))))
	}
	res, err := Plan(tasks, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"1: t0 t1", "2: t2 t3", "3: t4"}, waveIDs(tasks, res))
	pl := placementOf(t, tasks, res, "t4")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_MAX_PARALLEL, pl.Reason)
	require.Equal(t, "wave 2 already holds 2 tasks (max_parallel 2)", pl.Message)

	res, err = Plan(tasks, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"1: t0 t1 t2 t3", "2: t4"}, waveIDs(tasks, res), "0 means %d", DefaultMaxParallel)
}

func TestPriorityThenListOrder(t *testing.T) {
	t.Parallel()
	tasks := []Task{
		{ID: "low", Impacts: []tasklist.Impact{w("shared.go")}},
		{ID: "high", Priority: 10, Impacts: []tasklist.Impact{w("shared.go")}},
		{ID: "other", Impacts: []tasklist.Impact{w("other.go")}},
		{ID: "mid", Priority: 5, Impacts: []tasklist.Impact{w("mid.go")}},
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	// high takes shared.go first; within the wave, higher priority first, then list order.
	require.Equal(t, []string{"1: high mid other", "2: low"}, waveIDs(tasks, res))
}

func TestFirstFitFillsEarlierWaves(t *testing.T) {
	t.Parallel()
	tasks := []Task{
		task("a", nil, w("q.go")),
		task("b", nil, w("q.go")),
		task("c", nil, w("q.go"), w("p.go")),
		task("d", nil, w("p.go")), // p.go is only in wave 3: wave 1 has room
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: a d", "2: b", "3: c"}, waveIDs(tasks, res))
}

func TestManyWritersOfOneFile(t *testing.T) {
	t.Parallel()
	// Every task writes go.mod: one wave each, found without probing every earlier wave.
	var tasks []Task
	for i := range 2000 {
		tasks = append(tasks, task(fmt.Sprintf("t%d", i), nil, w("go.mod"), w(fmt.Sprintf("f%d.go", i))))
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Len(t, res.Waves, 2000)
	last := placementOf(t, tasks, res, "t1999")
	require.Equal(t, "file conflict with t1998 on go.mod (wave 1999)", last.Message)
}

func TestCycleIsAnError(t *testing.T) {
	t.Parallel()
	_, err := Plan([]Task{task("a", []int32{1}), task("b", []int32{0})}, 4)
	require.ErrorIs(t, err, ErrCycle)
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	tasks := randomTasks(rand.New(rand.NewPCG(1, 2)), 500)
	first, err := Plan(tasks, 3)
	require.NoError(t, err)
	for range 3 {
		again, err := Plan(tasks, 3)
		require.NoError(t, err)
		require.Equal(t, first, again)
	}
}

func TestFromSpecLeavesCompletedOut(t *testing.T) {
	t.Parallel()
	spec := &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{
		{Id: "1.1", Title: "done", File: "a.go", Status: commonv1.TaskStatus_TASK_STATUS_COMPLETED},
		{Id: "1.2", Title: "next", File: "b.go", DependsOn: []string{"1.1"}},
		{Id: "1.3", Title: "last", File: "a.go", DependsOn: []string{"1.2"}, Priority: 3},
	}}
	tasks, completed := FromSpec(spec, false)
	require.Equal(t, []string{"1.1"}, completed)
	require.Len(t, tasks, 2)
	require.Empty(t, tasks[0].Deps, "a dependency on a completed task is satisfied")
	require.Equal(t, []int32{0}, tasks[1].Deps)
	require.EqualValues(t, 3, tasks[1].Priority)

	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	out := Response(tasks, res, completed)
	require.EqualValues(t, 2, out.GetTaskCount())
	require.EqualValues(t, 2, out.GetLevelCount())
	require.Equal(t, []string{"1.1"}, out.GetCompletedTaskIds())
	require.Equal(t, "1.2", out.GetWaves()[0].GetPlacements()[0].GetTaskId())
	require.EqualValues(t, 2, out.GetWaves()[1].GetWaveNumber())

	tasks, completed = FromSpec(spec, true)
	require.Empty(t, completed)
	require.Len(t, tasks, 3)
	require.Equal(t, []int32{0}, tasks[1].Deps)
}

// Random lists hold the plan's invariants: every task placed once, after its dependencies, in a
// wave of its own level; no wave over max_parallel or with two overlapping tasks (checked pair by
// pair, independently of the planner's index); and first fit: every earlier wave of the level
// was full or held a conflicting task when the task was placed.
func TestPlanInvariants(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tasks := randomTasks(rng, 20+rng.IntN(150))
		maxParallel := 1 + rng.IntN(6)
		res, err := Plan(tasks, maxParallel)
		require.NoError(t, err)
		levels, _, err := Levels(tasks)
		require.NoError(t, err)

		waveOf := make([]int, len(tasks))
		for i := range waveOf {
			waveOf[i] = -1
		}
		for wi, wave := range res.Waves {
			require.NotEmpty(t, wave)
			require.LessOrEqual(t, len(wave), maxParallel)
			for _, pl := range wave {
				require.Equal(t, -1, waveOf[pl.Task], "placed twice")
				waveOf[pl.Task] = wi
				require.Equal(t, levels[pl.Task], pl.Level)
				require.Equal(t, levels[wave[0].Task], pl.Level, "one level per wave")
			}
			for i := range wave {
				for j := i + 1; j < len(wave); j++ {
					require.False(t, conflictNaive(tasks[wave[i].Task], tasks[wave[j].Task]),
						"seed %d wave %d: %s and %s overlap", seed, wi+1, tasks[wave[i].Task].ID, tasks[wave[j].Task].ID)
				}
			}
		}
		for i, tk := range tasks {
			require.NotEqual(t, -1, waveOf[i], "not placed")
			for _, d := range tk.Deps {
				require.Less(t, waveOf[d], waveOf[i], "after its dependency")
			}
		}
		// First fit, replayed in placement order (waves list tasks in placement order).
		rank := map[int]int{}
		for _, wave := range res.Waves {
			for pos, pl := range wave {
				rank[pl.Task] = pos
			}
		}
		order := placementOrder(tasks, levels)
		seen := map[int]bool{}
		for _, ti := range order {
			for wi := waveOf[ti] - 1; wi >= 0 && levels[res.Waves[wi][0].Task] == levels[ti]; wi-- {
				var before []int
				for _, pl := range res.Waves[wi] {
					if seen[pl.Task] {
						before = append(before, pl.Task)
					}
				}
				blocked := len(before) >= maxParallel
				for _, o := range before {
					blocked = blocked || conflictNaive(tasks[ti], tasks[o])
				}
				require.True(t, blocked, "seed %d: %s could have gone to wave %d", seed, tasks[ti].ID, wi+1)
			}
			seen[ti] = true
		}
	}
}

// placementOrder is the order the planner takes tasks in: by level, priority, list order.
func placementOrder(tasks []Task, levels []int) []int {
	order := make([]int, len(tasks))
	for i := range order {
		order[i] = i
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && less(tasks, levels, order[j], order[j-1]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	return order
}

func less(tasks []Task, levels []int, a, b int) bool {
	if levels[a] != levels[b] {
		return levels[a] < levels[b]
	}
	if tasks[a].Priority != tasks[b].Priority {
		return tasks[a].Priority > tasks[b].Priority
	}
	return a < b
}

// conflictNaive compares two tasks impact by impact, without the planner's index.
func conflictNaive(a, b Task) bool {
	for _, x := range a.Impacts {
		for _, y := range b.Impacts {
			if (x.Writes() || y.Writes()) && overlapNaive(x, y) {
				return true
			}
		}
	}
	return false
}

func overlapNaive(x, y tasklist.Impact) bool {
	glob := commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB
	dir := commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY
	if x.Kind == glob || y.Kind == glob {
		return overlaps(&impact{path: x.Path, kind: x.Kind}, &impact{path: y.Path, kind: y.Kind})
	}
	a, b := x.Node(), y.Node()
	return a == b || (x.Kind == dir && strings.HasPrefix(b, a+"/")) || (y.Kind == dir && strings.HasPrefix(a, b+"/"))
}

// randomTasks is a random DAG over a small tree of files, directories and globs, so that
// conflicts of every kind happen.
func randomTasks(rng *rand.Rand, n int) []Task {
	paths := []string{
		"go.mod", "a/x.go", "a/y.go", "a/b/z.go", "a/b/w.ts", "c/x.go", "c/d/e.go",
		"a/", "a/b/", "c/", "c/d/", "a/**/*.go", "a/*.go", "c/**", "**/*.ts", "a/{x,y}.go",
	}
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = Task{ID: fmt.Sprintf("t%d", i), Priority: int32(rng.IntN(3))}
		for range rng.IntN(3) {
			if i > 0 {
				d := int32(rng.IntN(i))
				if !containsDep(tasks[i].Deps, d) {
					tasks[i].Deps = append(tasks[i].Deps, d)
				}
			}
		}
		for range rng.IntN(3) {
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

func containsDep(deps []int32, d int32) bool {
	for _, x := range deps {
		if x == d {
			return true
		}
	}
	return false
}

// Issue 12 defect 12: a check-only task (no declared files, in a list with a repository)
// conflicts with every other task: it runs alone in its wave, which no later task joins, and the
// placements say so.
func TestCheckOnlyTaskRunsAloneInItsWave(t *testing.T) {
	t.Parallel()
	check := Task{ID: "check", Exclusive: true}
	tasks := []Task{task("a", nil, w("a.go")), check, task("b", nil, w("b.go")), task("c", nil, w("c.go")),
		{ID: "check2", Exclusive: true}, task("d", []int32{0}, w("a.go"))}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: a b c", "2: check", "3: check2", "4: d"}, waveIDs(tasks, res))

	pl := placementOf(t, tasks, res, "check")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, pl.Reason)
	require.Equal(t, []int{0}, pl.Conflicts, "it conflicts with the wave before (a; b and c came later)")
	require.Contains(t, pl.Message, "declares no files in a list with a repository: a check-only task conflicts with every other task")
	pl = placementOf(t, tasks, res, "check2")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, pl.Reason)
	require.Equal(t, []int{1}, pl.Conflicts)

	// Alone at the start of a level, and a task after it in the same level.
	tasks = []Task{check, task("a", nil, w("a.go"))}
	res, err = Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: check", "2: a"}, waveIDs(tasks, res))
	pl = placementOf(t, tasks, res, "check")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL, pl.Reason)
	require.Contains(t, pl.Message, "runs alone in its wave")
	pl = placementOf(t, tasks, res, "a")
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, pl.Reason)
	require.Equal(t, []int{0}, pl.Conflicts)
	require.Contains(t, pl.Message, "wave 1 holds check, which declares no files")
}

// Only a list with a repository makes a task without files check-only: without one every task
// works in a scratch directory and nothing conflicts.
func TestFromSpecMarksTasksWithoutFilesCheckOnlyWithARepository(t *testing.T) {
	t.Parallel()
	spec := &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{
		{Id: "1", Title: "writes", File: "a.go"},
		{Id: "2", Title: "checks", Command: "go test ./..."},
		{Id: "3", Title: "lists", Files: []*commonv1.FileImpact{{Path: "b.go"}}},
	}}
	tasks, _ := FromSpec(spec, false)
	for _, tk := range tasks {
		require.False(t, tk.Exclusive, "no repository: %s", tk.ID)
	}
	res, err := Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: 1 2 3"}, waveIDs(tasks, res))

	spec.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/srv/repo"}}
	tasks, _ = FromSpec(spec, false)
	require.Equal(t, []bool{false, true, false}, []bool{tasks[0].Exclusive, tasks[1].Exclusive, tasks[2].Exclusive})
	res, err = Plan(tasks, 4)
	require.NoError(t, err)
	require.Equal(t, []string{"1: 1 3", "2: 2"}, waveIDs(tasks, res))
}
