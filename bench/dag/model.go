package main

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/converge-dev/converge/services/scheduler/plan"
)

// The uniform model of a graph's run (issue 17, P2b): the schedule the Scheduler's claim order
// makes of graph g on --agents workers when every task takes the same time, one unit. Every
// worker is then free at the same instants, and at each instant each one claims as the
// Scheduler's lease does (claim.go, eager.go): the pending task of lowest claim position
// (plan.ClaimPositions: the critical path first) in the open wave, else, eager, the one of lowest
// position among the later waves' tasks whose dependencies all completed; a wave closes when its
// last task completes (no repository: nothing to integrate). The bench's tasks each write their
// own file, so the plan's waves are the dependency levels and no task waits for a conflict.
//
// Scaled by a time per task, the model is that schedule at that speed: every start and
// completion is a whole number of units, so the wall and each dependency done → dependent start
// latency are those numbers of units times the task's time. A deployment whose tasks take no
// less than its floor's time per task (a fan-out floor's wall × workers ÷ tasks) cannot run the
// graph in fewer than WallUnits of it, and with this claim order its p50 is about P50Units of it
// (real tasks are not all alike, and a real start adds its claim → start delay: measured p50s
// were −3 … +9 % of the model's, bench/PROFILE.md 2026-12-08): bench/report's P2b verdict names
// both. Beside a real run, wall ÷ WallUnits is the run's time per task and P50Units of it the
// p50 the model predicts, against the measured one.

// uniformModel is one dispatch mode's schedule of a graph in units of a task's time.
type uniformModel struct {
	Dispatch  string `json:"dispatch"`
	WallUnits int    `json:"wall_units"`
	// P50Units and P99Units are the dependency done → dependent start latencies' percentiles
	// (pct, as the runs'), over the tasks with dependencies.
	P50Units float64 `json:"latency_p50_units"`
	P99Units float64 `json:"latency_p99_units"`
}

// modelSchedule runs the uniform model of g on workers workers with max_parallel maxParallel,
// eager or strict.
func modelSchedule(g graph, workers, maxParallel int, eager bool) (uniformModel, error) {
	n := len(g.deps)
	m := uniformModel{Dispatch: "strict"}
	if eager {
		m.Dispatch = "eager"
	}
	if n == 0 || workers <= 0 {
		return m, fmt.Errorf("model: %d tasks on %d workers", n, workers)
	}
	tasks := make([]plan.Task, n)
	dependents := make([][]int, n)
	unmet := make([]int, n)
	for i, ds := range g.deps {
		tasks[i] = plan.Task{ID: taskID(i)}
		for _, d := range ds {
			tasks[i].Deps = append(tasks[i].Deps, int32(d))
			dependents[d] = append(dependents[d], i)
		}
		unmet[i] = len(ds) // RandomDAG's edges are distinct
	}
	res, err := plan.Plan(tasks, maxParallel)
	if err != nil {
		return m, fmt.Errorf("model: %w", err)
	}
	positions := plan.ClaimPositions(tasks, res)
	wave := make([]int, n)
	byWave := make([][]int, len(res.Waves)) // each wave's tasks in claim order
	order := make([]int, 0, n)              // every task in claim order
	rank := make([]int32, n)
	left := make([]int, len(res.Waves)) // tasks of each wave not completed
	for w, pls := range res.Waves {
		for i, pl := range pls {
			wave[pl.Task], rank[pl.Task] = w, positions[w][i]
			byWave[w] = append(byWave[w], pl.Task)
			order = append(order, pl.Task)
		}
		left[w] = len(pls)
	}
	byRank := func(a, b int) int { return int(rank[a] - rank[b]) }
	for _, ts := range byWave {
		slices.SortFunc(ts, byRank)
	}
	slices.SortFunc(order, byRank)

	started := make([]int, n) // unit of each task's start; it completes one unit later
	taken := make([]bool, n)
	open, done := 0, 0
	var running []int
	for t := 0; done < n; t++ {
		if t > 2*n+1 {
			return m, fmt.Errorf("model: no progress at unit %d (%d of %d tasks done)", t, done, n)
		}
		for _, i := range running { // every task started one unit ago completes now
			done++
			left[wave[i]]--
			for _, d := range dependents[i] {
				unmet[d]--
			}
		}
		running = running[:0]
		for open < len(left) && left[open] == 0 {
			open++
		}
		if open == len(left) {
			break
		}
		for range workers {
			next := -1
			for _, i := range byWave[open] {
				if !taken[i] {
					next = i
					break
				}
			}
			if next < 0 && eager {
				for _, i := range order {
					if !taken[i] && wave[i] > open && unmet[i] == 0 {
						next = i
						break
					}
				}
			}
			if next < 0 {
				break
			}
			taken[next], started[next] = true, t
			running = append(running, next)
		}
		m.WallUnits = t + 1
	}
	var lat []int
	for i, ds := range g.deps {
		if len(ds) == 0 {
			continue
		}
		ready := 0
		for _, d := range ds {
			ready = max(ready, started[d]+1)
		}
		lat = append(lat, started[i]-ready)
	}
	m.P50Units, m.P99Units = float64(pct(lat, 50)), float64(pct(lat, 99))
	return m, nil
}

// modelRuns adds to sr the uniform model of g for each dispatch mode it ran, and to each
// converge run its time per unit and the p50 the model predicts at it.
func modelRuns(sr *shapeResult, g graph, o options) error {
	maxParallel := runMaxParallel(g, o)
	for _, mode := range modesFor(g, o) {
		m, err := modelSchedule(g, o.agents, maxParallel, mode == "eager")
		if err != nil {
			return err
		}
		sr.Model = append(sr.Model, m)
		for i := range sr.Runs {
			r := &sr.Runs[i]
			if r.Dispatch != mode || m.WallUnits == 0 {
				continue
			}
			if span := r.WallS*1000 - r.StartMs - r.EndMs; span > 0 {
				r.ModelUnitMs = span / float64(m.WallUnits)
				r.ModelP50Ms = m.P50Units * r.ModelUnitMs
			}
		}
	}
	return nil
}

// runMaxParallel is the max_parallel converge runs g with: --max-parallel, else the task count,
// at most the Scheduler's 1,024.
func runMaxParallel(g graph, o options) int {
	return min(cmp.Or(o.maxParallel, len(g.deps)), 1024)
}
