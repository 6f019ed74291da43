package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// goal is one row of issue 17's table: this run's figure beside its peer's, the goal, and
// the figure the issue was filed with (before).
type goal struct {
	id, measure   string
	peer, ours    string // the peer's figure and converge's, both from this run
	ratio         string // ours over the peer's (or over the goal where the goal is absolute)
	target        string // the goal
	met           string // "met", "**not met**", or "not measured"
	before        string // the "now" column
	notMeasuredOn string // the output file that is missing, when nothing could be read
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// goals prints issue 17's table, every row measured in this run beside its peer.
func goals(w io.Writer, dir string, set kvs) {
	fmt.Fprintf(w, "\n## Issue 17's table: every row beside its peer, measured in this run\n\n")
	fmt.Fprintf(w, "Each row is a ratio of two figures taken in this run (the peer's and converge's), the issue's goal\n")
	fmt.Fprintf(w, "and whether this run meets it. \"Before\" is the figure the issue was filed with (its \"now\" column,\n")
	fmt.Fprintf(w, "2 agents, `ninja -j2`, on the same machine). The sections below hold every figure of each benchmark.\n\n")
	fmt.Fprintf(w, "| id | measure | peer (this run) | converge (this run) | ratio | goal | met? | before (issue 17) |\n")
	fmt.Fprintf(w, "|---|---|--:|--:|--:|---|---|---|\n")
	var rows []goal
	rows = append(rows, dagGoals(dir)...)
	rows = append(rows, growthGoals(dir)...)
	rows = append(rows, registryGoals(dir)...)
	rows = append(rows, knowledgeGoal(dir), planGoal(dir), verifierGoal(dir), watchersGoal(dir))
	slices.SortStableFunc(rows, func(a, b goal) int { return strings.Compare(idOrder(a.id), idOrder(b.id)) })
	for _, r := range rows {
		if r.notMeasuredOn != "" {
			fmt.Fprintf(w, "| %s | %s | — | — | — | %s | not measured (%s) | %s |\n", r.id, r.measure, r.target, r.notMeasuredOn, r.before)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.id, r.measure, r.peer, r.ours, r.ratio, r.target, r.met, r.before)
	}
}

// idOrder sorts the rows as the issue lists them: P1, P1b, P2, P2b, …, R8.
func idOrder(id string) string {
	order := []string{"P1", "P1b", "P2", "P2b", "P3", "P4", "P5", "P6", "R8"}
	if i := slices.Index(order, id); i >= 0 {
		return fmt.Sprintf("%02d", i)
	}
	return "99" + id
}

func dagGoals(dir string) []goal {
	var rep dagReport
	err := readJSON(dir, "dag.json", &rep)
	missing := func(id, measure, target, before string) goal {
		return goal{id: id, measure: measure, target: target, before: before, notMeasuredOn: "dag.json"}
	}
	p1 := "1,000-task no-op fan-out, wall vs `ninja -j N`"
	p2 := "dependency done → dependent start, chain (`bench/dag`)"
	p2b := "random DAG, 1,000 tasks / 5,000 edges, wall vs ninja; dep done → start p50"
	if err != nil {
		return []goal{
			missing("P1", p1, "≤ 2× embedded, ≤ 3× Postgres+Redis", "embedded 7.1× (17.7 ms/task); Postgres+Redis 17.3× (47 ms/task)"),
			missing("P2", p2, "p50 ≤ 5 ms, p99 ≤ 20 ms", "embedded p50 11 / p99 26 ms; Postgres 14 / 37 ms"),
			missing("P2b", p2b, "≤ 3×; p50 ≤ 50 ms", "7.1× / 13.1×; p50 1.17 s"),
		}
	}
	// ninja's wall on the fan-out of this run: the floors, measured on a fan-out, bound the other
	// graphs' floors of as many tasks (randomFloorNote).
	var fanNinjaS float64
	fanTasks := 0
	for _, s := range rep.Shapes {
		if s.Shape == "fanout" && len(s.Runs) > 0 {
			fanNinjaS, fanTasks = s.Runs[0].WallS, s.Tasks
		}
	}
	var out []goal
	for _, s := range rep.Shapes {
		if len(s.Runs) == 0 {
			continue
		}
		ninja := s.Runs[0]
		for _, r := range s.Runs {
			if !strings.HasPrefix(r.Name, "converge") {
				continue
			}
			pg := strings.Contains(r.Name, "Postgres")
			who := strings.TrimPrefix(r.Name, "converge, ")
			switch s.Shape {
			case "fanout":
				limit, before := 2.0, "embedded 7.1× (17.7 ms/task); on a second day, with ninja faster (0.38 s), 37×"
				if pg {
					limit, before = 3.0, "Postgres+Redis 17.3× (47 ms/task)"
				}
				met := verdict(r.RatioToNinja <= limit && ok(r.Outcome))
				if file := floorFile(r.Name, pg); r.RatioToNinja > limit && file != "" {
					// The deployment's floor, when run.sh measured it (BENCH_ONLY=floor).
					met += floorNote(dir, file, limit)
				}
				out = append(out, goal{id: "P1", measure: fmt.Sprintf("%s-task no-op fan-out, wall vs `%s`: %s", thousands(s.Tasks), ninja.Name, who),
					peer: fmt.Sprintf("%.2f s", ninja.WallS), ours: fmt.Sprintf("%.2f s (%s/task)%s", r.WallS, ms(r.WallS*1000/float64(s.Tasks)), medianOf(r.RoundWallsS)),
					ratio: x(r.RatioToNinja), target: fmt.Sprintf("≤ %.0f×", limit), met: met, before: before})
			case "chain":
				before := "embedded p50 11 / p99 26 ms"
				if pg {
					before = "Postgres 14 / 37 ms"
				}
				step := ninja.WallS * 1000 / float64(s.Tasks)
				peer := ms(step)
				if ninja.Latency != "" {
					peer += fmt.Sprintf(" (its log's dep done → start: p50 %s, p99 %s)", ms(ninja.LatP50Ms), ms(ninja.LatP99Ms))
				}
				out = append(out, goal{id: "P2", measure: fmt.Sprintf("dependency done → dependent start, %s-chain: %s (peer: ninja's whole step, wall / tasks)", thousands(s.Tasks), who),
					peer: peer, ours: fmt.Sprintf("p50 %s, p99 %s%s", ms(r.LatP50Ms), ms(r.LatP99Ms), medianOf(r.RoundWallsS)), ratio: x(div(r.LatP50Ms, step)) + " (p50)",
					target: "p50 ≤ 5 ms, p99 ≤ 20 ms", met: verdict(r.LatP50Ms <= 5 && r.LatP99Ms <= 20 && ok(r.Outcome)), before: before})
			case "random":
				before := "7.1× (embedded) / 13.1× (Postgres); p50 1.17 s"
				peer, ratio := fmt.Sprintf("%.2f s", ninja.WallS), x(r.RatioToNinja)
				met := verdict(r.RatioToNinja <= 3 && r.LatP50Ms <= 50 && ok(r.Outcome))
				var m *model // the uniform model of the run's dispatch mode, when bench/dag wrote one
				for i := range s.Model {
					if s.Model[i].Dispatch == r.Dispatch {
						m = &s.Model[i]
					}
				}
				// Without the model only the wall has a floor bound.
				missed := r.RatioToNinja > 3 || (m != nil && r.LatP50Ms > 50)
				if file := floorFile(r.Name, pg); missed && fanTasks == s.Tasks && file != "" {
					met += randomFloorNote(dir, file, fanNinjaS, ninja.WallS, fanTasks, rep.Agents, m, 3, 50)
				}
				if ninja.Latency != "" {
					// ninja's own dep done → start, from its .ninja_log of the same graph and -j.
					peer += fmt.Sprintf("; p50 %s", ms(ninja.LatP50Ms))
					if ninja.LatP50Ms > 0 {
						ratio += fmt.Sprintf("; p50 %s", x(r.LatP50Ms/ninja.LatP50Ms))
					}
					if r.LatP50Ms > 50 && ninja.LatP50Ms > 50 {
						met += fmt.Sprintf(" (ninja's own p50 is %s: the ready tasks' queue for %d workers)", ms(ninja.LatP50Ms), rep.Agents)
					}
				}
				out = append(out, goal{id: "P2b", measure: fmt.Sprintf("random DAG, %s tasks / %s edges, wall vs `%s`; dep done → start p50: %s", thousands(s.Tasks), thousands(s.Edges), ninja.Name, who),
					peer: peer, ours: fmt.Sprintf("%.2f s; p50 %s%s", r.WallS, ms(r.LatP50Ms), medianOf(r.RoundWallsS)), ratio: ratio,
					target: "≤ 3×; p50 ≤ 50 ms", met: met, before: before})
			}
		}
	}
	return out
}

// floorFile is the floor file of the deployment of converge run name (pg: on Postgres), "" for
// one that has none (converge dev's local agents).
func floorFile(name string, pg bool) string {
	switch {
	case pg:
		return "dag-floor.json"
	case strings.Contains(name, "agent processes"):
		return "dag-floor-sqlite.json"
	}
	return ""
}

// medianOf words a row taken from the median-wall round of several (bench/dag --rounds), or "".
func medianOf(roundWalls []float64) string {
	if len(roundWalls) < 2 {
		return ""
	}
	return fmt.Sprintf("; the median-wall round of %d: %s", len(roundWalls), walls(roundWalls))
}

// walls words walls in seconds in the order run, e.g. "0.82, 0.79, 0.93 s".
func walls(ws []float64) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%.2f", w)
	}
	return strings.Join(parts, ", ") + " s"
}

// ok is an execution outcome that ran every task (the DAG benchmark's lists have no criteria).
func ok(outcome string) bool {
	return strings.HasPrefix(outcome, "CONVERGED")
}

// growthGoals is P1b from BenchmarkFanout: per task at the smallest and the largest size, per
// backend; flat and ≤ 1 ms at every size is the goal.
func growthGoals(dir string) []goal {
	all, err := readGrowth(dir)
	const measure = "per-task overhead as the fan-out grows (`BenchmarkFanout`: wall per task, smallest → largest size)"
	const target = "flat: ≤ 1 ms per task from 100 to 100,000 tasks"
	const before = "7.3 ms at 200 tasks, 10.7 ms at 500, 13.7 ms at 1,000 (bench/dag, embedded)"
	if err != nil {
		return []goal{{id: "P1b", measure: measure, target: target, before: before, notMeasuredOn: "fanout.txt"}}
	}
	var out []goal
	for _, backend := range []string{"sqlite", "postgres"} {
		var runs []growthRun
		for _, g := range all {
			if g.backend == backend && g.fused {
				runs = append(runs, g)
			}
		}
		if len(runs) == 0 {
			continue
		}
		first, last := runs[0], runs[len(runs)-1]
		worst := 0.0
		for _, r := range runs {
			worst = max(worst, r.wallMs)
		}
		name := map[string]string{"sqlite": "embedded (SQLite)", "postgres": "Postgres"}[backend]
		cpu := fmt.Sprintf("CPU %s → %s", ms(first.cpuMs), ms(last.cpuMs))
		if first.pgCPUMs > 0 && last.pgCPUMs > 0 {
			cpu += fmt.Sprintf("; Postgres backends' CPU %s → %s", ms(first.pgCPUMs), ms(last.pgCPUMs))
		}
		out = append(out, goal{id: "P1b", measure: measure + ": " + name,
			peer:  fmt.Sprintf("%s at %s tasks", ms(first.wallMs), thousands(first.tasks)),
			ours:  fmt.Sprintf("%s at %s tasks (%s)", ms(last.wallMs), thousands(last.tasks), cpu),
			ratio: x(div(last.wallMs, first.wallMs)), target: target,
			met: verdict(worst <= 1 && last.tasks >= 100000) + growthNote(worst, last.tasks), before: before})
		if first.run != last.run {
			out[len(out)-1].ratio += fmt.Sprintf(" (the sizes from two runs: %s and %s)", first.run, last.run)
		}
	}
	return out
}

func growthNote(worst float64, largest int) string {
	var notes []string
	if worst > 1 {
		notes = append(notes, fmt.Sprintf("worst %s/task", ms(worst)))
	}
	if largest < 100000 {
		notes = append(notes, fmt.Sprintf("largest size run: %s", thousands(largest)))
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, "; ") + ")"
}

// growthRun is one BenchmarkFanout line.
type growthRun struct {
	backend                         string
	fused                           bool
	tasks                           int
	wallMs, cpuMs                   float64
	allocKB, liveMidMB, rssPeakMB   float64
	liveBPerTask, rssBPerTask, wide float64
	pgCPUMs                         float64 // the Postgres backends' CPU per task (pg-cpu-µs/task); 0 when not measured
	executions                      int
	run                             string // the date of the run it came from (several runs: FANOUT_FROM)
}

// readGrowth reads fanout.txt's BenchmarkFanout lines, sorted by store, claims and size; a "run:
// <date>" line marks the run the following lines came from.
func readGrowth(dir string) ([]growthRun, error) {
	b, err := os.ReadFile(filepath.Join(dir, "fanout.txt"))
	if err != nil {
		return nil, err
	}
	var out []growthRun
	run := ""
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "run: "); ok {
			run = strings.TrimSpace(v)
			continue
		}
		l, ok := parseBenchLine(line)
		if !ok {
			continue
		}
		if g, ok := parseGrowth(l); ok {
			g.run = run
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no BenchmarkFanout result line")
	}
	slices.SortStableFunc(out, func(a, b growthRun) int {
		if c := strings.Compare(storeOrder(a.backend), storeOrder(b.backend)); c != 0 {
			return c
		}
		if a.fused != b.fused {
			if a.fused {
				return 1
			}
			return -1
		}
		return a.tasks - b.tasks
	})
	return out, nil
}

func storeOrder(backend string) string {
	if backend == "sqlite" {
		return "0"
	}
	return "1" + backend
}

func parseGrowth(l benchLine) (growthRun, bool) {
	// BenchmarkFanout/sqlite/fused=true/tasks=1000-2
	parts := strings.Split(strings.TrimPrefix(l.name, "BenchmarkFanout/"), "/")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "tasks=") {
		return growthRun{}, false
	}
	tasks := strings.TrimPrefix(parts[2], "tasks=")
	if i := strings.LastIndex(tasks, "-"); i >= 0 {
		tasks = tasks[:i]
	}
	n, err := strconv.Atoi(tasks)
	if err != nil {
		return growthRun{}, false
	}
	m := l.metrics
	return growthRun{backend: parts[0], fused: parts[1] == "fused=true", tasks: n, wallMs: m["µs/task"] / 1000, cpuMs: m["cpu-µs/task"] / 1000,
		allocKB: m["alloc-B/task"] / 1024, liveMidMB: m["live-mid-MB"], rssPeakMB: m["rss-peak-MB"], liveBPerTask: m["live-B/task"],
		rssBPerTask: m["rss-B/task"], wide: m["max-parallel"], pgCPUMs: m["pg-cpu-µs/task"] / 1000, executions: max(int(m["executions"]), 1)}, true
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// registryGoals is P3: the single-lock cycle against SET (the row) and, when the run has
// it, the batch acquire of a task's files against as many SETs.
func registryGoals(dir string) []goal {
	g := goal{id: "P3", measure: "lock acquire+release over gRPC vs `redis-benchmark -t set` (cycles/s ÷ SET/s); acquire p99",
		target: "≥ 0.35; acquire p99 ≤ 2 ms", before: "4,585 cycles/s vs 58,720 SET/s = 0.078; acquire p99 16.2 ms"}
	var rep struct {
		Clients    int       `json:"clients"`
		Locks      regResult `json:"lock_cycles"`
		Batch      regResult `json:"batch_cycles"`
		Set        regResult `json:"redis_set"`
		Floor      regResult `json:"grpc_floor"`
		BatchRatio float64   `json:"batch_ratio"`
	}
	if err := readJSON(dir, "registry.json", &rep); err != nil || rep.Set.OpsPerSec == 0 {
		g.notMeasuredOn = "registry.json"
		return []goal{g}
	}
	r := div(rep.Locks.OpsPerSec, rep.Set.OpsPerSec)
	g.peer = fmt.Sprintf("%.0f SET/s", rep.Set.OpsPerSec)
	g.ours = fmt.Sprintf("%.0f cycles/s; p99 %s", rep.Locks.OpsPerSec, ms(rep.Locks.P99Ms))
	g.ratio = fmt.Sprintf("%.3f", r)
	g.met = verdict(r >= 0.35 && rep.Locks.P99Ms <= 2)
	// The floor: two no-op unary calls on a bare grpc.Server at the same concurrency. A goal it
	// misses too is below what any gRPC call reaches on this machine, and the row says so.
	floorNote := func(ratio, p99 float64) string {
		if rep.Floor.OpsPerSec == 0 {
			return ""
		}
		fr := div(rep.Floor.OpsPerSec, rep.Set.OpsPerSec)
		var below []string
		if ratio < 0.35 && fr < 0.35 {
			below = append(below, fmt.Sprintf("ratio %.3f", fr))
		}
		if p99 > 2 && rep.Floor.P99Ms > 2 {
			below = append(below, "p99 "+ms(rep.Floor.P99Ms))
		}
		if len(below) == 0 {
			return ""
		}
		return fmt.Sprintf(" (the bare gRPC floor's own %s at %d clients)", strings.Join(below, ", "), rep.Clients)
	}
	if g.met != "met" {
		g.met += floorNote(r, rep.Locks.P99Ms)
	}
	out := []goal{g}
	if rep.Batch.OpsPerSec > 0 {
		batchMet := verdict(rep.BatchRatio >= 0.35 && rep.Batch.P99Ms <= 2)
		if batchMet != "met" {
			// The batch's ratio is to SET/s ÷ 8, the floor's to SET/s: only its p99 compares.
			batchMet += floorNote(1, rep.Batch.P99Ms)
		}
		out = append(out, goal{id: "P3", measure: fmt.Sprintf("a task's %d files: AcquireLocks+ReleaseLocks over gRPC vs %d SETs (batches/s ÷ (SET/s ÷ %d)); AcquireLocks p99", batchFiles, batchFiles, batchFiles),
			peer: fmt.Sprintf("%.0f SET/s ÷ %d = %.0f", rep.Set.OpsPerSec, batchFiles, rep.Set.OpsPerSec/batchFiles),
			ours: fmt.Sprintf("%.0f batches/s; p99 %s", rep.Batch.OpsPerSec, ms(rep.Batch.P99Ms)), ratio: fmt.Sprintf("%.3f", rep.BatchRatio),
			target: "≥ 0.35; acquire p99 ≤ 2 ms (the issue's goal, applied to the batch)", met: batchMet,
			before: "no batch acquire"})
	}
	return out
}

// batchFiles is bench/registry's files per batch (a task's files).
const batchFiles = 8

func knowledgeGoal(dir string) goal {
	g := goal{id: "P4", measure: "knowledge query by path (`QueryItems`, worst of its kinds), Postgres; peer: a primary-key SELECT",
		target: "p99 ≤ 2 ms", before: "p50 1.7 ms, p99 6.4 ms (misses 5 ms), 1M items"}
	var rep struct {
		Items   int `json:"items"`
		Results []struct {
			Call  string  `json:"call"`
			P50Ms float64 `json:"p50_ms"`
			P99Ms float64 `json:"p99_ms"`
		} `json:"results"`
	}
	if err := readJSON(dir, "knowledge.json", &rep); err != nil || len(rep.Results) == 0 {
		g.notMeasuredOn = "knowledge.json"
		return g
	}
	base := rep.Results[len(rep.Results)-1] // the last kind is the peer baseline
	worst := rep.Results[0]
	for _, r := range rep.Results {
		if strings.HasPrefix(strings.TrimSpace(r.Call), "QueryItems") && r.P99Ms > worst.P99Ms {
			worst = r
		}
	}
	g.measure += fmt.Sprintf(", %s items", thousands(rep.Items))
	g.peer = fmt.Sprintf("p99 %s", ms(base.P99Ms))
	g.ours = fmt.Sprintf("p50 %s, p99 %s (%s)", ms(worst.P50Ms), ms(worst.P99Ms), strings.TrimSpace(worst.Call))
	g.ratio = x(div(worst.P99Ms, base.P99Ms)) + " (p99)"
	g.met = verdict(worst.P99Ms <= 2)
	for _, r := range rep.Results {
		// GetItem is one gRPC call and one primary-key read: the least a call to the service costs.
		if strings.HasPrefix(r.Call, "GetItem") && worst.P99Ms > 2 {
			g.met += fmt.Sprintf(" (GetItem's p99 here: %s)", ms(r.P99Ms))
			break
		}
	}
	return g
}

func planGoal(dir string) goal {
	g := goal{id: "P5", measure: "wave planning 100k tasks / 1M edges vs plain Kahn", target: "≤ 2×", before: "262 ms vs 25.5 ms = 10.3×"}
	lines, err := readBench(filepath.Join(dir, "plan.txt"))
	if err != nil {
		g.notMeasuredOn = "plan.txt"
		return g
	}
	for _, l := range lines {
		if strings.Contains(l.name, "/100k") {
			g.peer, g.ours = ms(l.metrics["kahn-ns/op"]/1e6), ms(l.metrics["plan-ns/op"]/1e6)
			g.ratio = x(l.metrics["plan/kahn"])
			g.met = verdict(l.metrics["plan/kahn"] <= 2)
			if both, ok := l.metrics["prep+plan/kahn"]; ok {
				// Planning in two steps: the paths interned when the list is imported (once per list
				// and Scheduler process), then the plan of the interned list, what StartExecution
				// pays; the verdict is on the plan, and the row gives both.
				g.ours = fmt.Sprintf("plan %s (import + plan %s)", ms(l.metrics["plan-ns/op"]/1e6),
					ms((l.metrics["prep-ns/op"]+l.metrics["plan-ns/op"])/1e6))
				g.ratio = fmt.Sprintf("%s (import + plan %s)", x(l.metrics["plan/kahn"]), x(both))
			}
			return g
		}
	}
	g.notMeasuredOn = "plan.txt (no 100k line)"
	return g
}

func verifierGoal(dir string) goal {
	g := goal{id: "P6", measure: "verifier 100 × 100 ms checks, parallelism 8, vs the ideal 1.25 s", target: "≤ 1.05× ideal", before: "1.125× ideal"}
	lines, err := readBench(filepath.Join(dir, "verifier.txt"))
	if err != nil {
		g.notMeasuredOn = "verifier.txt"
		return g
	}
	s := lines[0].metrics["s/verify"]
	g.peer = "1.250 s (ideal)"
	if xargs := median(readFloats(filepath.Join(dir, "verifier-peer.txt"))); xargs > 0 {
		g.peer += fmt.Sprintf("; xargs -P 8 %.3f s", xargs)
	}
	g.ours = fmt.Sprintf("%.3f s", s)
	for _, l := range lines[1:] {
		if sandboxOf(l.name) == sandboxDefault {
			g.ours += fmt.Sprintf(" (sandboxed, as the binary runs by default: %.3f s = %s)", l.metrics["s/verify"], x(l.metrics["s/verify"]/1.25))
		}
	}
	g.ratio = x(s / 1.25)
	g.met = verdict(s/1.25 <= 1.05)
	if floor, ok := spawnFloor(dir); ok {
		g.peer += fmt.Sprintf("; floor (8 goroutines running the 100 `sleep 0.1` with os/exec, nothing else) %.3f s", floor)
		if s/1.25 > 1.05 && floor/1.25 > 1.05 {
			g.met += fmt.Sprintf(" (the bare spawn floor's own %s: converge %s the floor)", x(floor/1.25), x(s/floor))
		}
	}
	return g
}

// spawnFloor is P6's floor from verifier-floor.txt (BenchmarkSpawnFloor's wall of the 100), when
// this run measured it.
func spawnFloor(dir string) (float64, bool) {
	lines, err := readBench(filepath.Join(dir, "verifier-floor.txt"))
	if err != nil || lines[0].metrics["s/verify"] <= 0 {
		return 0, false
	}
	return lines[0].metrics["s/verify"], true
}

func readFloats(path string) []float64 {
	var out []float64
	if b, err := os.ReadFile(path); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if v, err := strconv.ParseFloat(f, 64); err == nil {
				out = append(out, v)
			}
		}
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// loadRun is bench/load --json.
type loadRun struct {
	Streams        int     `json:"streams"`
	Batch          int     `json:"batch"`     // max_entries_per_message of each stream
	Decode         string  `json:"decode"`    // what the streams' client decoded: seq, full ("": full, before the field)
	Delivered      int64   `json:"delivered"` // entries received over every stream
	Messages       int64   `json:"messages"`  // in this many messages
	Agents         int     `json:"agents"`
	Tasks          int     `json:"tasks"`
	Width          int     `json:"width"`
	Outcome        string  `json:"outcome"`
	Events         int     `json:"events"`
	WallS          float64 `json:"wall_s"`
	SchedCPUS      float64 `json:"scheduler_cpu_s"`
	ClientCPUS     float64 `json:"client_cpu_s"`
	StreamsExact   int     `json:"streams_exact"`
	StreamsOpenS   float64 `json:"streams_open_s"`
	LatP50Ms       float64 `json:"latency_p50_ms"`
	LatP99Ms       float64 `json:"latency_p99_ms"`
	SchedRSSIdleKB int64   `json:"scheduler_rss_idle_kb"`
	SchedRSSPeakKB int64   `json:"scheduler_rss_peak_kb"`
	SchedHeapIdle  int64   `json:"scheduler_heap_idle_bytes"`
	SchedHeapPeak  int64   `json:"scheduler_heap_peak_bytes"`
	Error          string  `json:"error"`
}

// loadKind reads one kind of load run: base.json, or the rounds base.1.json, base.2.json, …
// (bench/run.sh's LOAD_ROUNDS), answering the median round by wall time (or a round that failed)
// and every round's wall.
func loadKind(dir, base string) (loadRun, []float64, error) {
	names, _ := filepath.Glob(filepath.Join(dir, base+".*.json"))
	if len(names) == 0 {
		names = []string{filepath.Join(dir, base+".json")}
	}
	var runs []loadRun
	for _, n := range names {
		var r loadRun
		if err := readJSON(dir, filepath.Base(n), &r); err != nil {
			return loadRun{}, nil, fmt.Errorf("%s: %w", filepath.Base(n), err)
		}
		runs = append(runs, r)
	}
	slices.SortFunc(runs, func(a, b loadRun) int { return cmp.Compare(a.WallS, b.WallS) })
	walls := make([]float64, len(runs))
	for i, r := range runs {
		walls[i] = r.WallS
	}
	// A round that failed or whose streams were not exact is the one shown: no median hides it.
	for _, r := range runs {
		if r.Error != "" || r.StreamsExact != r.Streams {
			return r, walls, nil
		}
	}
	return runs[(len(runs)-1)/2], walls, nil
}

func loadRuns(dir string) (without, with loadRun, err error) {
	if without, _, err = loadKind(dir, "load-0"); err != nil {
		return without, with, err
	}
	if with, _, err = loadKind(dir, "load-streams"); err != nil {
		return without, with, err
	}
	return without, with, nil
}

// singleLoadRun is the (median) run whose streams take one entry per message
// (load-streams-single), when this run made it.
func singleLoadRun(dir string) (loadRun, bool) {
	r, _, err := loadKind(dir, "load-streams-single")
	return r, err == nil && r.WallS > 0
}

// fullLoadRun is the (median) run whose batched streams' client decoded every entry in full
// (load-streams-full), when this run made it.
func fullLoadRun(dir string) (loadRun, bool) {
	r, _, err := loadKind(dir, "load-streams-full")
	return r, err == nil && r.WallS > 0
}

// decoded says what a run's streams' client decoded of each entry.
func decoded(r loadRun) string {
	if r.Streams == 0 {
		return "—"
	}
	if r.Decode == "seq" {
		return "seq and time"
	}
	return "every field"
}

// loadRounds says how many rounds of each kind this run made and their walls, when more than one.
func loadRounds(dir string) string {
	var parts []string
	n := 0
	for _, k := range [][2]string{{"load-0", "no streams"}, {"load-streams", "batched"}, {"load-streams-full", "batched, decoded in full"}, {"load-streams-single", "one per message"}} {
		_, walls, err := loadKind(dir, k[0])
		if err != nil {
			continue
		}
		n = max(n, len(walls))
		s := make([]string, len(walls))
		for i, w := range walls {
			s[i] = fmt.Sprintf("%.2f", w)
		}
		parts = append(parts, k[1]+" "+strings.Join(s, ", ")+" s")
	}
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf("each kind's median of %d alternated rounds (walls: %s)", n, strings.Join(parts, "; "))
}

// perMessage says how a run's streams took their entries.
func perMessage(r loadRun) string {
	if r.Batch <= 1 {
		return "1"
	}
	if r.Messages == 0 {
		return fmt.Sprintf("≤ %d", r.Batch)
	}
	return fmt.Sprintf("≤ %d (%.1f on average)", r.Batch, float64(r.Delivered)/float64(r.Messages))
}

func watchersGoal(dir string) goal {
	g := goal{id: "R8", measure: "1,000 WatchExecution streams during a run (`bench/load`), wall vs the same run without streams",
		target: "≤ 1.1× slower", before: "2.7× slower (24.7 s vs 9.3 s)"}
	without, with, err := loadRuns(dir)
	if err != nil || without.WallS == 0 {
		g.notMeasuredOn = "load-0.json / load-streams.json"
		return g
	}
	g.measure = fmt.Sprintf("%s WatchExecution streams during a run of %d tasks, %d agents (`bench/load`), wall vs the same run without streams",
		thousands(with.Streams), with.Tasks, with.Agents)
	g.peer = fmt.Sprintf("%.2f s (0 streams)", without.WallS)
	g.ours = fmt.Sprintf("%.2f s (%d / %d streams exact; entries per message %s; the client decodes %s)", with.WallS, with.StreamsExact, with.Streams, perMessage(with), decoded(with))
	if rounds := loadRounds(dir); rounds != "" {
		g.ours += "; " + rounds
	}
	g.ratio = x(div(with.WallS, without.WallS))
	g.met = verdict(div(with.WallS, without.WallS) <= 1.1 && with.StreamsExact == with.Streams && with.Error == "" && without.Error == "")
	if full, ok := fullLoadRun(dir); ok && with.Decode == "seq" {
		g.met += fmt.Sprintf(" (the client decoding every field: %s, its CPU %.2f s against %.2f s, the Scheduler's %.2f s against %.2f s)",
			x(div(full.WallS, without.WallS)), full.ClientCPUS, with.ClientCPUS, full.SchedCPUS, with.SchedCPUS)
	}
	if single, ok := singleLoadRun(dir); ok && with.Batch > 1 {
		g.met += fmt.Sprintf(" (one entry per message: %s; the Scheduler's CPU %.2f s batched, %.2f s one per message, %.2f s without streams)",
			x(div(single.WallS, without.WallS)), with.SchedCPUS, single.SchedCPUS, without.SchedCPUS)
	}
	return g
}

// watchers is R8's section: both load runs side by side.
func watchers(w io.Writer, dir string) {
	fmt.Fprintf(w, "\n## WatchExecution streams during a run (`bench/load`, R8)\n\n")
	without, with, err := loadRuns(dir)
	if err != nil {
		name, _, _ := strings.Cut(err.Error(), ":")
		notMeasured(w, dir, name, err)
		return
	}
	fmt.Fprintf(w, "One execution of %d `true` tasks (layers of %d, each task after the one %d before it) on the\n", with.Tasks, with.Width, with.Width)
	fmt.Fprintf(w, "production deployment (Scheduler, Registry, Knowledge, Verifier processes on Postgres and Redis)\n")
	fmt.Fprintf(w, "with %d agent processes: without streams (the peer) and with %s WatchExecution streams from\n", with.Agents, thousands(with.Streams))
	fmt.Fprintf(w, "cursor 0, each taking up to `max_entries_per_message` entries per message (and, where this run made\n")
	fmt.Fprintf(w, "it, the same streams taking one entry per message, as clients did before that field). Wall time\n")
	fmt.Fprintf(w, "from the resume of the paused run to its end; a stream is exact when it received the log's seqs in\n")
	fmt.Fprintf(w, "order with no gap and no duplicate. CPU is from the resume until every stream closed: the\n")
	fmt.Fprintf(w, "Scheduler process's, and the streams' client's (bench/load itself, receiving and decoding), both on\n")
	fmt.Fprintf(w, "the same 2 cores as the run. The client reads each entry's seq and time only (a watcher following\n")
	fmt.Fprintf(w, "progress), or, where this run made it, decodes every field into the generated types: its CPU\n")
	fmt.Fprintf(w, "then competes with the run's for the same 2 cores.\n\n")
	fmt.Fprintf(w, "| run | entries per message | client decodes | outcome | log entries | wall | × no streams | Scheduler CPU | client CPU | streams exact | delivery p50 | delivery p99 | Scheduler RSS peak | Scheduler heap peak |\n")
	fmt.Fprintf(w, "|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	runs := []loadRun{without, with}
	if full, ok := fullLoadRun(dir); ok {
		runs = append(runs, full)
	}
	if single, ok := singleLoadRun(dir); ok {
		runs = append(runs, single)
	}
	for _, r := range runs {
		exact, p50, p99, per := "—", "—", "—", "—"
		if r.Streams > 0 {
			exact, p50, p99, per = fmt.Sprintf("%d / %d", r.StreamsExact, r.Streams), ms(r.LatP50Ms), ms(r.LatP99Ms), perMessage(r)
		}
		outcome := r.Outcome
		if r.Error != "" {
			outcome += "; error: " + r.Error
		}
		fmt.Fprintf(w, "| %s streams | %s | %s | %s | %d | %.2f s | %s | %.2f s | %.2f s | %s | %s | %s | %.1f MiB | %.1f MiB |\n", thousands(r.Streams), per, decoded(r), outcome, r.Events, r.WallS,
			x(div(r.WallS, without.WallS)), r.SchedCPUS, r.ClientCPUS, exact, p50, p99, float64(r.SchedRSSPeakKB)/1024, float64(r.SchedHeapPeak)/(1<<20))
	}
}

// loadAverage is the range of the 1-minute load average sampled every 30 s during the run.
func loadAverage(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "load.txt"))
	if err != nil {
		return ""
	}
	var loads []float64
	var first, last string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		if first == "" {
			first = f[0]
		}
		last = f[0]
		loads = append(loads, v)
	}
	if len(loads) == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f–%.1f (median %.1f), %d samples every 30 s, %s–%s UTC", slices.Min(loads), slices.Max(loads), median(loads), len(loads), first, last)
}
