// Command report formats bench/RESULTS.md from the machine-readable outputs that bench/run.sh
// collects in one directory:
//
//	env.txt            "key: value" lines describing the machine (cores, memory, versions, date)
//	dag.json           bench/dag --json
//	dag-floor.json     bench/dag --floor --mode postgres --json (only when BENCH_ONLY names floor)
//	dag-floor-sqlite.json  bench/dag --floor --mode sqlite --json (the same)
//	registry.json      bench/registry --json
//	knowledge.json     bench/knowledge --json
//	plan.txt           go test -bench BenchmarkPlan100k output (services/scheduler/plan)
//	verifier.txt       go test -bench BenchmarkVerifyParallelCommands output (services/verifier)
//	verifier-peer.txt  wall seconds of `xargs -P 8` running the same 100 `sleep 0.1`, one a line
//	settings.txt       "key: value" lines: the sizes and durations run.sh used, and its command
//	fanout.txt         go test -bench BenchmarkFanout output (services/scheduler): the growth benchmark
//	fanout-meta.txt    "key: value" lines: when, at which commit and by which command fanout.txt was made
//	load-0.json        bench/load --json without streams; load-streams.json: with them, batched;
//	                   load-streams-full.json: batched, the client decoding every field;
//	                   load-streams-single.json: with them, one entry per message (R8)
//	load.txt           the load average every 30 s during the run ("HH:MM:SS 1min 5min 15min")
//
// A missing or unreadable output becomes a "not measured" line naming the file with the error
// (the tail of <name>.err when run.sh kept one), so one failed benchmark does not hide the others.
//
//	go run ./bench/report --dir /tmp/bench-out > bench/RESULTS.md
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "directory holding the benchmarks' outputs")
	profile := flag.String("profile", "../PROFILE.md", "hand-written profile notes appended as they are (bench/PROFILE.md)")
	only := flag.String("only", "", "print only this section: fanout (the growth benchmark, for make bench-growth)")
	flag.Parse()
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	switch *only {
	case "":
	case "fanout":
		fanout(w, *dir)
		return
	default:
		fmt.Fprintf(os.Stderr, "report: --only %q: only fanout\n", *only)
		os.Exit(2)
	}
	write(w, *dir)
	previous(w, filepath.Join(*dir, "previous-RESULTS.md"), *profile)
	// The profile (where a task's time goes, before/after figures of the in-process benchmarks)
	// is written by hand from pprof; it follows the generated tables.
	if b, err := os.ReadFile(*profile); err == nil {
		fmt.Fprintf(w, "\n%s", b)
	}
}

func write(w io.Writer, dir string) {
	env := keyValues(filepath.Join(dir, "env.txt"))
	set := keyValues(filepath.Join(dir, "settings.txt"))
	fmt.Fprintf(w, "# Benchmark results\n\n")
	fmt.Fprintf(w, "Written by `make bench` (`sh bench/run.sh`, tables by `bench/report`) on %s. Every benchmark\n", env.get("date"))
	fmt.Fprintf(w, "runs next to its peer in the same run, and every ratio is to that peer's figure from this run.\n")
	fmt.Fprintf(w, "Do not edit by hand: run `make bench` again.\n\n")
	fmt.Fprintf(w, "## Machine\n\n| | |\n|---|---|\n")
	for _, kv := range env {
		fmt.Fprintf(w, "| %s | %s |\n", kv[0], kv[1])
	}
	if l := loadAverage(dir); l != "" {
		fmt.Fprintf(w, "| load average (1 min) during the run | %s |\n", l)
	}
	if c := set.get("command"); c != "?" {
		fmt.Fprintf(w, "| command | `%s` |\n", c)
	}
	fmt.Fprintf(w, "\nThe machine is shared (other jobs ran at the same time): absolute numbers are noisy, the ratios\n")
	fmt.Fprintf(w, "are the point. Spawning a process costs several milliseconds here, which sets the floor for\n")
	fmt.Fprintf(w, "ninja and make as much as for converge.\n")
	goals(w, dir, set)
	dag(w, dir, set)
	floor(w, dir)
	fanout(w, dir)
	registry(w, dir, set)
	knowledge(w, dir, set)
	plan(w, dir)
	verifier(w, dir)
	watchers(w, dir)
}

// fanout is P1b, the growth benchmark: BenchmarkFanout's cost and memory per task at each size,
// per backend.
func fanout(w io.Writer, dir string) {
	fmt.Fprintf(w, "\n## Growth: the Scheduler's cost and memory per task as the fan-out grows (`BenchmarkFanout`, P1b)\n\n")
	runs, err := readGrowth(dir)
	if err != nil {
		notMeasured(w, dir, "fanout.txt", err)
		return
	}
	fmt.Fprintf(w, "A fan-out of n no-op tasks through the Scheduler's gRPC server (bufconn, every interceptor) on a\n")
	fmt.Fprintf(w, "fresh SQLite or Postgres database, with 2 in-process agents doing what converge-agent does per\n")
	fmt.Fprintf(w, "task: ClaimTask, then CompleteTask with claim_next (fused complete-and-claim) carrying the\n")
	fmt.Fprintf(w, "TASK_STARTED event, as converge-agent sends a short task's; a run whose command sets\n")
	fmt.Fprintf(w, "FANOUT_STARTED_REPORT first sends TASK_STARTED in a ReportProgress of its own, as for a task\n")
	fmt.Fprintf(w, "longer than the agent's started grace (one more Scheduler transaction per task).\n")
	fmt.Fprintf(w, "No process spawn, git or Registry: the Scheduler's own cost, which\n")
	fmt.Fprintf(w, "`bench/dag`'s fan-out (P1) adds the agents' processes to. Wall and CPU (user + system of the\n")
	fmt.Fprintf(w, "whole test process: Scheduler and agents) per task; flat = no O(tasks) step per claim or\n")
	fmt.Fprintf(w, "completion. Memory: the Go heap live at mid-run (the runtime's figure from the first collection\n")
	fmt.Fprintf(w, "after half the tasks are done; none is forced inside the timed run)\n")
	fmt.Fprintf(w, "and the process's peak RSS (which also holds SQLite's pages, outside the Go heap; a high-water\n")
	fmt.Fprintf(w, "mark across the sizes, which run in one process, smallest first); per task = its growth from the\n")
	fmt.Fprintf(w, "smallest size, divided by the added tasks: what one more task in the run costs the Scheduler.\n")
	fmt.Fprintf(w, "A task list holds at most 10,000 tasks (the contract's limit), so a larger size runs as several\n")
	fmt.Fprintf(w, "lists' executions started together, claimed from without an execution filter: n tasks in the\n")
	fmt.Fprintf(w, "Scheduler at once, but no single execution above 10,000. On Postgres also the CPU of the run\n")
	fmt.Fprintf(w, "database's backends (from /proc) per task: the server's side of the same transactions.\n")
	metas := metaBlocks(filepath.Join(dir, "fanout-meta.txt"))
	if len(metas) > 0 {
		fmt.Fprintf(w, "\n")
	}
	for _, meta := range metas {
		fmt.Fprintf(w, "- Measured %s at commit %s by `%s` (load average %s at the start, %s at the end).\n", meta.get("date"), meta.get("commit"),
			meta.get("command"), meta.get("load average at start"), meta.get("load average at end"))
	}
	several := len(metas) > 1
	runCol, runSep := "", ""
	if several {
		runCol, runSep = " run |", "---|"
	}
	fmt.Fprintf(w, "\n|%s store | claims | tasks | waves of | wall per task | CPU per task | Postgres backends' CPU per task | allocated per task | live heap mid-run | peak RSS | memory per added task (heap / RSS) |\n", runCol)
	fmt.Fprintf(w, "|%s---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n", runSep)
	for i, r := range runs {
		if several {
			fmt.Fprintf(w, "| %s ", r.run)
		}
		claims := "ClaimTask"
		if r.fused {
			claims = "fused"
		}
		per := "(baseline)"
		for _, f := range runs[:i] {
			if f.backend == r.backend && f.fused == r.fused && r.tasks > f.tasks {
				added := float64(r.tasks - f.tasks)
				per = fmt.Sprintf("%.0f B / %.0f B", (r.liveMidMB-f.liveMidMB)*(1<<20)/added, (r.rssPeakMB-f.rssPeakMB)*(1<<20)/added)
				break
			}
		}
		store := map[string]string{"sqlite": "embedded (SQLite)", "postgres": "Postgres"}[r.backend]
		if store == "" {
			store = r.backend
		}
		wide := "—"
		if r.wide > 0 {
			wide = strconv.Itoa(int(r.wide))
		}
		tasks := thousands(r.tasks)
		if r.executions > 1 {
			tasks += fmt.Sprintf(" (%d executions)", r.executions)
		}
		pg := "—"
		if r.pgCPUMs > 0 {
			pg = ms(r.pgCPUMs)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.0f KB | %.1f MiB | %.1f MiB | %s |\n", store, claims, tasks, wide, ms(r.wallMs),
			ms(r.cpuMs), pg, r.allocKB, r.liveMidMB, r.rssPeakMB, per)
	}
}

// previousHeading opens the earlier run's figures in RESULTS.md.
const previousHeading = "## The previous run's figures"

// previous appends the figures of the RESULTS.md this run replaces (run.sh keeps a copy), its
// headings one level down, without its own previous run or the hand-written profile: each run's
// figures stand next to the one before.
func previous(w io.Writer, path, profile string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	stop := []string{previousHeading}
	if p, err := os.ReadFile(profile); err == nil {
		if first, _, _ := strings.Cut(string(p), "\n"); strings.TrimSpace(first) != "" {
			stop = append(stop, strings.TrimSpace(first))
		}
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if slices.ContainsFunc(stop, func(s string) bool { return strings.HasPrefix(line, s) }) {
			break
		}
		switch {
		case strings.HasPrefix(line, "# "):
			continue // the title
		case strings.HasPrefix(line, "#"):
			line = "#" + line
		}
		kept = append(kept, line)
	}
	body := strings.TrimSpace(strings.Join(kept, "\n"))
	if body == "" {
		return
	}
	fmt.Fprintf(w, "\n%s\n\nAs RESULTS.md held them before this run (the same generator, possibly older sizes and code):\n\n%s\n", previousHeading, body)
}

// metaBlocks reads "key: value" blocks separated by blank lines (one per run).
func metaBlocks(path string) []kvs {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []kvs
	for _, block := range strings.Split(string(b), "\n\n") {
		var k kvs
		for _, line := range strings.Split(block, "\n") {
			if key, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(key) != "" {
				k = append(k, [2]string{strings.TrimSpace(key), strings.TrimSpace(v)})
			}
		}
		if len(k) > 0 {
			out = append(out, k)
		}
	}
	return out
}

// kvs keeps "key: value" lines in file order.
type kvs [][2]string

func (k kvs) get(key string) string {
	for _, kv := range k {
		if kv[0] == key {
			return kv[1]
		}
	}
	return "?"
}

func keyValues(path string) kvs {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out kvs
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) != "" {
			out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
		}
	}
	return out
}

// notMeasured says why a section has no figures.
func notMeasured(w io.Writer, dir, name string, err error) {
	fmt.Fprintf(w, "\n_Not measured in this run: %s: %v._\n", name, err)
	if b, e := os.ReadFile(filepath.Join(dir, name+".err")); e == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fmt.Fprintf(w, "\n```\n%s\n```\n", strings.Join(lines[max(len(lines)-10, 0):], "\n"))
	}
}

func readJSON(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	// Some benches print progress lines before the object: it starts at the first line that
	// opens one.
	if i := strings.Index(string(b), "\n{"); i >= 0 && !strings.HasPrefix(string(b), "{") {
		b = b[i+1:]
	}
	return json.Unmarshal(b, v)
}

func ms(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

func x(v float64) string {
	if v >= 10 {
		return fmt.Sprintf("%.0f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

type dagReport struct {
	Agents int `json:"agents"`
	Shapes []struct {
		Shape  string  `json:"shape"`
		Tasks  int     `json:"tasks"`
		Edges  int     `json:"edges"`
		Levels int     `json:"levels"`
		Model  []model `json:"model"`
		Runs   []struct {
			Name              string    `json:"name"`
			Dispatch          string    `json:"dispatch"`
			Outcome           string    `json:"outcome"`
			WallS             float64   `json:"wall_s"`
			OverheadMsPerTask float64   `json:"overhead_ms_per_task"`
			RatioToNinja      float64   `json:"ratio_to_ninja"`
			Latency           string    `json:"latency"`
			LatP50Ms          float64   `json:"latency_p50_ms"`
			LatP99Ms          float64   `json:"latency_p99_ms"`
			TasksPerS         float64   `json:"tasks_per_s"`
			Completed         int       `json:"completed"`
			Requeued          int       `json:"requeued"`
			Waves             int       `json:"waves"`
			PeerRounds        int       `json:"peer_rounds"`
			RoundWallsS       []float64 `json:"round_walls_s"`
			EarlyLeases       int       `json:"early_leases"`
			CPUMsPerTask      float64   `json:"cpu_ms_per_task"`
			ProcessCPU        []struct {
				Name       string  `json:"name"`
				SelfMs     float64 `json:"self_ms_per_task"`
				SelfSysMs  float64 `json:"self_sys_ms_per_task"`
				ChildrenMs float64 `json:"children_ms_per_task"`
			} `json:"process_cpu"`
			RPCsPerTask map[string]float64 `json:"rpcs_per_task"`
		} `json:"runs"`
	} `json:"shapes"`
}

// model is one dispatch mode's uniform model of the random DAG (bench/dag's model.go).
type model struct {
	Dispatch  string  `json:"dispatch"`
	WallUnits int     `json:"wall_units"`
	P50Units  float64 `json:"latency_p50_units"`
	P99Units  float64 `json:"latency_p99_units"`
}

func dag(w io.Writer, dir string, set kvs) {
	fmt.Fprintf(w, "\n## DAG overhead against ninja and make (`bench/dag`)\n\n")
	fmt.Fprintf(w, "The same graph for all three runners, every task running `true`: ninja gets a `build.ninja`,\n")
	fmt.Fprintf(w, "make a `Makefile` of phony targets, converge a task list (one `file` per task, no repository, so\n")
	fmt.Fprintf(w, "tasks run in scratch directories) created with `CreateTaskList` and run with `StartExecution`,\n")
	fmt.Fprintf(w, "as `converge run --server` does. converge runs on the embedded default (`converge dev --in-memory`,\n")
	fmt.Fprintf(w, "SQLite and in-process locks) and on the production deployment (separate Scheduler and Registry\n")
	fmt.Fprintf(w, "processes on Postgres and Redis), each with N agent processes; ninja and make run with `-j N`.\n")
	fmt.Fprintf(w, "The embedded default also runs with converge dev's own N local agents (`converge dev --agents N`,\n")
	fmt.Fprintf(w, "the design's embedded default: the agents in its process, calling the services in-process through\n")
	fmt.Fprintf(w, "the server's interceptor chain, without the gRPC transport): \"local agents\" beside \"agent processes\";\n")
	fmt.Fprintf(w, "converge dev's CPU there includes the agents' and, as its children's, the task commands'.\n")
	if n := set.get("dag rounds"); n != "?" && n != "1" {
		fmt.Fprintf(w, "Each graph runs in %s rounds: in each, ninja and make run %s times each (their median is the round's)\n", n, set.get("peer rounds"))
		fmt.Fprintf(w, "and then every converge configuration once; each row is that side's median-wall round (all of\n")
		fmt.Fprintf(w, "its figures from that round), every round's wall follows its table. converge's wall time runs from\n")
	} else {
		fmt.Fprintf(w, "ninja and make: median wall time of %s runs each. converge: one run, wall time from\n", set.get("peer rounds"))
	}
	fmt.Fprintf(w, "`CreateTaskList` to the end of the execution. Overhead per task = (wall − ninja wall) / tasks.\n")
	fmt.Fprintf(w, "Latency = dependency done → dependent start from the execution log's store times (the last\n")
	fmt.Fprintf(w, "dependency's TASK_COMPLETED → the dependent's TASK_STARTED; it spans the wave barrier: a task\n")
	fmt.Fprintf(w, "waits for its whole wave, not only its dependencies); on the fan-out, which has no dependencies, claim → start\n")
	fmt.Fprintf(w, "(LEASE_GRANTED → TASK_STARTED). A start is the TASK_STARTED entry's source time (when the agent\n")
	fmt.Fprintf(w, "started the task: a short task's started event reaches the Scheduler with its completion).\n")
	fmt.Fprintf(w, "SQLite stores event times to the millisecond. ninja's latency is the same measure from its\n")
	fmt.Fprintf(w, "`.ninja_log` (each step's start and end, in milliseconds), pooled over its rounds; make keeps no\n")
	fmt.Fprintf(w, "such log, and neither has a claim: on the fan-out no peer latency is reported. The task lists carry no done-criteria, so the\n")
	fmt.Fprintf(w, "executions end CONVERGED_PENDING_HUMAN (every task done, nothing for Verify Done to check) and\n")
	fmt.Fprintf(w, "no verification is part of the measured time. Without a repository a wave has no commits to\n")
	fmt.Fprintf(w, "integrate, so no git merge or codebase validation runs between waves here: these figures are the\n")
	fmt.Fprintf(w, "scheduling overhead (planning, leases, agents' claim/start/complete, the event log, wave barriers).\n")
	fmt.Fprintf(w, "converge runs each graph in both dispatch modes (`ExecutionOptions.dispatch`), side by side: *strict*\n")
	fmt.Fprintf(w, "(every wave a barrier) and *eager*, the default (a task of a later wave is leased as soon as every\n")
	fmt.Fprintf(w, "task it depends on completed without a commit or is integrated, and nothing running touches its\n")
	fmt.Fprintf(w, "files; waves stay the unit of\n")
	fmt.Fprintf(w, "integration). \"early\" counts the leases granted before the task's wave opened. The fan-out is one\n")
	fmt.Fprintf(w, "wave, where the modes do the same: it runs eager only.\n")
	var rep dagReport
	if err := readJSON(dir, "dag.json", &rep); err != nil {
		notMeasured(w, dir, "dag.json", err)
		return
	}
	for _, s := range rep.Shapes {
		desc := map[string]string{
			"chain":  "chain: task i depends on task i−1",
			"fanout": "fan-out: independent tasks, one wave",
			"random": fmt.Sprintf("random DAG (seed %s): edges between uniformly random pairs of tasks, from the lower index to the higher", set.get("seed")),
		}[s.Shape]
		fmt.Fprintf(w, "\n### %s — %d tasks, %d edges, depth %d, N = %d\n\n", desc, s.Tasks, s.Edges, s.Levels, rep.Agents)
		lat := "dep done→start"
		if s.Shape == "fanout" {
			lat = "claim→start"
		}
		fmt.Fprintf(w, "| runner | outcome | wall | × ninja | overhead/task vs ninja | %s p50 | %s p99 | tasks/s | waves | early |\n", lat, lat)
		fmt.Fprintf(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range s.Runs {
			p50, p99, tps, waves := "—", "—", "—", "—"
			if r.Latency != "" {
				p50, p99 = ms(r.LatP50Ms), ms(r.LatP99Ms)
			}
			if r.TasksPerS > 0 {
				tps = fmt.Sprintf("%.1f", r.TasksPerS)
			}
			if r.Waves > 0 {
				waves = strconv.Itoa(r.Waves)
			}
			over := ms(r.OverheadMsPerTask)
			if strings.HasPrefix(r.Name, "ninja") {
				over = "(baseline)"
			}
			outcome := r.Outcome
			if r.Requeued > 0 {
				outcome += fmt.Sprintf(", %d requeued", r.Requeued)
			}
			early := "—"
			if r.Dispatch != "" {
				early = strconv.Itoa(r.EarlyLeases)
			}
			fmt.Fprintf(w, "| %s | %s | %.3f s | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, outcome, r.WallS, x(r.RatioToNinja), over, p50, p99, tps, waves, early)
		}
		for _, r := range s.Runs {
			if len(r.RoundWallsS) > 1 {
				fmt.Fprintf(w, "\n%s: the median of %d rounds; walls %s.\n", r.Name, len(r.RoundWallsS), walls(r.RoundWallsS))
			}
		}
		// CPU per task by process, and the RPCs served per task (bench/dag reads them as the
		// execution ends).
		for _, r := range s.Runs {
			if len(r.ProcessCPU) == 0 {
				continue
			}
			var parts []string
			for _, p := range r.ProcessCPU {
				part := fmt.Sprintf("%s %.3f (system %.3f)", p.Name, p.SelfMs, p.SelfSysMs)
				if p.ChildrenMs > 0 {
					part += fmt.Sprintf(" + its commands %.3f", p.ChildrenMs)
				}
				parts = append(parts, part)
			}
			fmt.Fprintf(w, "\n%s: CPU ms per task %.3f: %s.", r.Name, r.CPUMsPerTask, strings.Join(parts, ", "))
			if n := r.RPCsPerTask["SchedulerService/CompleteTask"]; n > 0 {
				var total float64
				for _, v := range r.RPCsPerTask {
					total += v
				}
				fmt.Fprintf(w, " RPCs served per task %.2f (CompleteTask %.2f).", total, n)
			}
			fmt.Fprintln(w)
		}
		// Eager against strict, deployment by deployment.
		for _, st := range s.Runs {
			if st.Dispatch != "strict" || st.WallS <= 0 {
				continue
			}
			dep := strings.TrimSuffix(st.Name, ", strict")
			for _, ea := range s.Runs {
				if ea.Dispatch != "eager" || strings.TrimSuffix(ea.Name, ", eager") != dep {
					continue
				}
				fmt.Fprintf(w, "\n%s: eager / strict wall = %.3f s / %.3f s = **%s**", dep, ea.WallS, st.WallS, x(ea.WallS/st.WallS))
				if st.LatP50Ms > 0 {
					fmt.Fprintf(w, "; %s p50 = %s / %s = **%s**", lat, ms(ea.LatP50Ms), ms(st.LatP50Ms), x(ea.LatP50Ms/st.LatP50Ms))
				}
				fmt.Fprintf(w, ".\n")
			}
		}
	}
	if n := set.get("chain tasks"); n != "?" && n != "1000" {
		fmt.Fprintf(w, "\nThe chain has %s tasks, not 1,000. %s\n", n, set.get("chain note"))
	}
}
