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

// floor prints the Postgres deployment's floor rows when run.sh ran them (BENCH_ONLY=floor):
// nothing at all otherwise (it is not part of the default run).
func floor(w io.Writer, dir string) {
	if _, err := os.Stat(filepath.Join(dir, "dag-floor.json")); err != nil {
		return
	}
	fmt.Fprintf(w, "\n## The floor of a no-op task on Postgres + Redis (`bench/dag --floor --mode postgres`)\n\n")
	var rep floorReport
	if err := readJSON(dir, "dag-floor.json", &rep); err != nil {
		notMeasured(w, dir, "dag-floor.json", err)
		return
	}
	fmt.Fprintf(w, "Per round, one after the other on %d tasks of the fan-out: ninja, the real P1 Postgres run, the\n", rep.Tasks)
	fmt.Fprintf(w, "deployment's floor (agent processes spawning `sh -c true`, one CompleteTask round trip each to a\n")
	fmt.Fprintf(w, "bare Scheduler process, one grouped Postgres transaction with the least a completion writes) and\n")
	fmt.Fprintf(w, "those transactions alone from goroutines (P1b Postgres's floor). Medians of the rounds; CPU per\n")
	fmt.Fprintf(w, "task by process from /proc, the Postgres backends of the run's database included.\n\n")
	fmt.Fprintf(w, "| part | wall per task | × ninja | CPU per task | by process (median round's) |\n|---|--:|--:|--:|---|\n")
	var names []string
	byName := map[string][]int{}
	for i, p := range rep.Parts {
		if _, ok := byName[p.Name]; !ok {
			names = append(names, p.Name)
		}
		byName[p.Name] = append(byName[p.Name], i)
	}
	median := func(idx []int, v func(int) float64) (float64, int) {
		s := slices.Clone(idx)
		slices.SortFunc(s, func(a, b int) int { return cmp.Compare(v(a), v(b)) })
		m := s[len(s)/2]
		return v(m), m
	}
	var ninja float64
	for k, n := range names {
		wall, _ := median(byName[n], func(i int) float64 { return rep.Parts[i].WallMs })
		cpu, mi := median(byName[n], func(i int) float64 { return rep.Parts[i].CPUMs })
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
