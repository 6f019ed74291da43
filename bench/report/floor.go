package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// floorReport is bench/dag --floor --mode postgres --json (dag-floor.json): per round, ninja,
// the real P1 Postgres run, the deployment's floor with processes and its transactions alone.
type floorReport struct {
	Tasks int `json:"tasks"`
	Parts []struct {
		Name      string  `json:"name"`
		Round     int     `json:"round"`
		CPUMs     float64 `json:"cpu_ms_per_task"`
		WallMs    float64 `json:"wall_ms_per_task"`
		Note      string  `json:"note"`
		Processes []struct {
			Name       string  `json:"name"`
			SelfMs     float64 `json:"self_ms_per_task"`
			ChildrenMs float64 `json:"children_ms_per_task"`
		} `json:"processes"`
	} `json:"parts"`
	Fsync []string `json:"fsync"`
}

// floorFiles are the deployments' floors bench/dag --floor writes (run.sh, BENCH_ONLY=floor):
// each file's section title and what its parts are.
var floorFiles = []struct{ file, title, intro string }{
	{"dag-floor.json", "The floor of a no-op task on Postgres + Redis (`bench/dag --floor --mode postgres`)",
		"Per round, one after the other on %d tasks of the fan-out: ninja, the real P1 Postgres run, the\n" +
			"deployment's floor (agent processes spawning `sh -c true`, one CompleteTask round trip each to a\n" +
			"bare Scheduler process, one grouped Postgres transaction with the least a completion writes) and\n" +
			"those transactions alone from goroutines (P1b Postgres's floor). Medians of the rounds; CPU per\n" +
			"task by process from /proc, the Postgres backends of the run's database included.\n\n"},
	{"dag-floor-sqlite.json", "The floor of a no-op task, embedded with agent processes (`bench/dag --floor --mode sqlite`)",
		"Per round, one after the other on %d tasks of the fan-out: ninja, the real P1 embedded run with agent\n" +
			"processes (`converge dev --in-memory` and `converge-agent` processes, eager), and the deployment's\n" +
			"floor (agent processes spawning `sh -c true`, one CompleteTask round trip each to a bare Scheduler\n" +
			"process, one grouped transaction on an in-memory SQLite database with the least a completion\n" +
			"writes). Medians of the rounds; CPU per task by process from /proc.\n\n"},
}

// floor prints the deployments' floor sections when run.sh ran them (BENCH_ONLY=floor): nothing
// at all otherwise (they are not part of the default run).
func floor(w io.Writer, dir string) {
	for _, f := range floorFiles {
		if _, err := os.Stat(filepath.Join(dir, f.file)); err != nil {
			continue
		}
		fmt.Fprintf(w, "\n## %s\n\n", f.title)
		var rep floorReport
		if err := readJSON(dir, f.file, &rep); err != nil {
			notMeasured(w, dir, f.file, err)
			continue
		}
		fmt.Fprintf(w, f.intro, rep.Tasks)
		floorTable(w, rep)
	}
}

// floorMedians answers each part's name in order of first appearance, with the index of its
// median-wall and median-CPU rounds.
func floorMedians(rep floorReport) (names []string, wall, cpu map[string]int) {
	byName := map[string][]int{}
	for i, p := range rep.Parts {
		if _, ok := byName[p.Name]; !ok {
			names = append(names, p.Name)
		}
		byName[p.Name] = append(byName[p.Name], i)
	}
	median := func(idx []int, v func(int) float64) int {
		s := slices.Clone(idx)
		slices.SortFunc(s, func(a, b int) int { return cmp.Compare(v(a), v(b)) })
		return s[len(s)/2]
	}
	wall, cpu = map[string]int{}, map[string]int{}
	for _, n := range names {
		wall[n] = median(byName[n], func(i int) float64 { return rep.Parts[i].WallMs })
		cpu[n] = median(byName[n], func(i int) float64 { return rep.Parts[i].CPUMs })
	}
	return names, wall, cpu
}

func floorTable(w io.Writer, rep floorReport) {
	fmt.Fprintf(w, "| part | wall per task | × ninja | CPU per task | by process (median round's) |\n|---|--:|--:|--:|---|\n")
	names, wallAt, cpuAt := floorMedians(rep)
	var ninja float64
	for k, n := range names {
		wall, cpu, mi := rep.Parts[wallAt[n]].WallMs, rep.Parts[cpuAt[n]].CPUMs, cpuAt[n]
		if k == 0 {
			ninja = wall
		}
		var by []string
		for _, p := range rep.Parts[mi].Processes {
			s := fmt.Sprintf("%s %.3f", p.Name, p.SelfMs)
			if p.ChildrenMs > 0 {
				s += fmt.Sprintf(" + commands %.3f", p.ChildrenMs)
			}
			by = append(by, s)
		}
		if note := rep.Parts[mi].Note; note != "" {
			by = append(by, note)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", n, ms(wall), x(div(wall, ninja)), ms(cpu), strings.Join(by, "; "))
	}
	if len(rep.Fsync) > 0 {
		fmt.Fprintf(w, "\n`pg_test_fsync` on this machine: %s.\n", strings.Join(rep.Fsync, "; "))
	}
}

// floorRatio answers, from a floor file of this run, the deployment's floor and its real run
// as ratios to ninja's wall in the floor's own rounds (medians); ok is false without the file.
func floorRatio(dir, file string) (floorX, realX float64, ok bool) {
	var rep floorReport
	if err := readJSON(dir, file, &rep); err != nil {
		return 0, 0, false
	}
	names, wallAt, _ := floorMedians(rep)
	if len(names) == 0 {
		return 0, 0, false
	}
	ninja := rep.Parts[wallAt[names[0]]].WallMs
	for _, n := range names[1:] {
		switch r := div(rep.Parts[wallAt[n]].WallMs, ninja); {
		case strings.HasPrefix(n, "floor:"):
			floorX = r
		case strings.HasPrefix(n, "converge P1"):
			realX = r
		}
	}
	return floorX, realX, floorX > 0
}

// floorNote is what P1's verdict adds for a deployment whose floor ran in this run (file): the
// floor's ratio, and whether the goal (limit) is below it.
func floorNote(dir, file string, limit float64) string {
	floorX, realX, ok := floorRatio(dir, file)
	if !ok {
		return ""
	}
	real := ""
	if realX > 0 {
		real = fmt.Sprintf(", the real run %s", x(realX))
	}
	if floorX > limit {
		return fmt.Sprintf(" (the deployment's floor, in its own rounds: %s%s; the goal is below the floor)", x(floorX), real)
	}
	return fmt.Sprintf(" (the deployment's floor, in its own rounds: %s%s)", x(floorX), real)
}

// randomFloorNote is what P2b's verdict adds for a deployment whose floor ran in this run (file):
// its floor on the random DAG (the wall's lower bound, and with a model the p50 at that speed). The floor runs a fan-out of fanTasks tasks on
// agents workers, where no task waits for another: every worker is busy from the first task to
// the last. Its wall, as a ratio to ninja's on the fan-out in its own rounds, times ninja's
// fan-out wall in bench/dag's run (fanNinjaS), is the floor's wall at this run's speed; times
// agents over fanTasks, the floor's time per task on a worker.
//
// Without a model, no graph of as many identical tasks on as many workers ends sooner than the
// fan-out: the floor's fan-out wall over ninja's wall on this graph (ninjaS) bounds the wall's
// ratio. With the uniform model of the run's dispatch mode (bench/dag's model.go: the schedule
// the Scheduler's claim order makes when every task takes one unit), the floor's time per task
// times the model's wall units is the least the graph takes at the floor's speed, and times its
// p50 units the dependency done → dependent start p50 at that speed: a latency in this schedule
// is a wait for a free worker, in whole tasks' times. Beside real runs the model's p50 at each
// run's own speed was within −3 … +9 % of the measured one (bench/PROFILE.md, 2026-12-08): a real
// start adds its claim → start delay to the queue's wait, and real tasks are not all alike.
// wallLimit and p50Limit are the goals.
func randomFloorNote(dir, file string, fanNinjaS, ninjaS float64, fanTasks, agents int, m *model, wallLimit, p50Limit float64) string {
	floorX, _, ok := floorRatio(dir, file)
	if !ok || fanNinjaS <= 0 || ninjaS <= 0 {
		return ""
	}
	if m == nil || m.WallUnits <= 0 || fanTasks <= 0 || agents <= 0 {
		bound := floorX * fanNinjaS / ninjaS
		note := fmt.Sprintf(" (the deployment's floor on this graph is at least %s: its fan-out floor %s, in its own rounds, × ninja's fan-out wall %.2f s ÷ its wall here %.2f s",
			x(bound), x(floorX), fanNinjaS, ninjaS)
		if bound > wallLimit {
			return note + "; the goal is below the floor)"
		}
		return note + ")"
	}
	unitMs := floorX * fanNinjaS * 1000 * float64(agents) / float64(fanTasks)
	wall, p50 := unitMs*float64(m.WallUnits)/(ninjaS*1000), unitMs*m.P50Units
	note := fmt.Sprintf(" (the deployment's floor on this graph, by the uniform model of its claim order: wall at least %s, dep done → start p50 %s: its fan-out floor %s, in its own rounds, × ninja's fan-out wall %.2f s is %s per task on each of %d workers; × the model's %d units of wall ÷ ninja's wall here %.2f s, × its p50 of %.0f units",
		x(wall), ms(p50), x(floorX), fanNinjaS, ms(unitMs), agents, m.WallUnits, ninjaS, m.P50Units)
	var below []string
	if wall > wallLimit {
		below = append(below, "the wall goal")
	}
	if p50 > p50Limit {
		below = append(below, "the p50 goal")
	}
	switch len(below) {
	case 1:
		return note + "; " + below[0] + " is below the floor)"
	case 2:
		return note + "; " + below[0] + " and " + below[1] + " are below the floor)"
	}
	return note + ")"
}
