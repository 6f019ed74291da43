package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryIssueRowIsPrinted writes RESULTS.md from testdata/ (the outputs of a small run.sh run)
// and checks that issue 17's table has every row, each with a ratio and a verdict.
func TestEveryIssueRowIsPrinted(t *testing.T) {
	var b bytes.Buffer
	write(&b, "testdata")
	out := b.String()
	for _, id := range []string{"P1", "P1b", "P2", "P2b", "P3", "P4", "P5", "P6", "R8"} {
		row := rowOf(out, id)
		if row == "" {
			t.Fatalf("no row %s in issue 17's table:\n%s", id, out)
		}
		if strings.Contains(row, "not measured") || !(strings.Contains(row, "| met |") || strings.Contains(row, "**not met**")) {
			t.Errorf("row %s has no verdict: %s", id, row)
		}
		if !strings.Contains(row, "×") && !strings.Contains(row, "| 0.") {
			t.Errorf("row %s has no ratio: %s", id, row)
		}
	}
	for _, section := range []string{"## Growth", "## WatchExecution streams", "load average (1 min) during the run",
		"| floor: 2 no-op unary calls, plain grpc.Server, no interceptor (ops/s: pairs) | 9120 |", "is the ceiling of P3's ratio in this design"} {
		if !strings.Contains(out, section) {
			t.Errorf("no %q in the output", section)
		}
	}
}

// TestMissingOutputIsNotMeasured: a benchmark whose output is missing leaves its rows, marked
// "not measured" with the file's name, and the others still print.
func TestMissingOutputIsNotMeasured(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"plan.txt", "env.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	write(&b, dir)
	out := b.String()
	if row := rowOf(out, "P5"); strings.Contains(row, "not measured") {
		t.Errorf("P5 has its output but says: %s", row)
	}
	if row := rowOf(out, "R8"); !strings.Contains(row, "not measured (load-0.json") {
		t.Errorf("R8 without load outputs: %s", row)
	}
	if row := rowOf(out, "P1b"); !strings.Contains(row, "not measured (fanout.txt)") {
		t.Errorf("P1b without fanout.txt: %s", row)
	}
}

// TestPreviousRunKeptWithoutProfile: the previous RESULTS.md's figures follow the new ones, one
// heading level down, without its own previous run or the profile.
func TestPreviousRunKeptWithoutProfile(t *testing.T) {
	dir := t.TempDir()
	prev := "# Benchmark results\n\nold intro\n\n## Machine\n\n| date | then |\n\n" + previousHeading + "\n\nthe run before that\n"
	if err := os.WriteFile(filepath.Join(dir, "previous-RESULTS.md"), []byte(prev), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "PROFILE.md")
	if err := os.WriteFile(profile, []byte("## Where the time goes\n\nprofile\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	previous(&b, filepath.Join(dir, "previous-RESULTS.md"), profile)
	out := b.String()
	if !strings.Contains(out, "### Machine") || !strings.Contains(out, "| date | then |") {
		t.Errorf("the previous figures are missing:\n%s", out)
	}
	if strings.Contains(out, "the run before that") || strings.Contains(out, "# Benchmark results") {
		t.Errorf("the previous run's own previous run or title kept:\n%s", out)
	}
}

func rowOf(out, id string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| "+id+" |") {
			return line
		}
	}
	return ""
}

// TestPlanRowSaysWhatItIncludes: with the two steps of planning timed apart, P5 gives the plan of
// an interned list (what StartExecution pays) and import + plan, its verdict on the plan.
func TestPlanRowSaysWhatItIncludes(t *testing.T) {
	dir := t.TempDir()
	line := "BenchmarkPlan100k/100k-2 5 1 ns/op 10000000 kahn-ns/op 15000000 plan-ns/op 1.5 plan/kahn 30000000 prep-ns/op 4.5 prep+plan/kahn 3767 waves 1293 levels\n"
	if err := os.WriteFile(filepath.Join(dir, "plan.txt"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	write(&b, dir)
	row := rowOf(b.String(), "P5")
	for _, want := range []string{"plan 15.0 ms (import + plan 45.0 ms)", "1.50× (import + plan 4.50×)", "| met |"} {
		if !strings.Contains(row, want) {
			t.Errorf("P5 row without %q: %s", want, row)
		}
	}
}

// TestSandboxedVerifierRows: the P6 row names the sandboxed default (converge-sandbox-init)
// once, and the verifier's table tells the two sandboxed inits apart.
func TestSandboxedVerifierRows(t *testing.T) {
	dir := t.TempDir()
	out := "BenchmarkVerifyParallelCommands-2   \t       5\t1350057728 ns/op\t        74.07 checks/s\t         1.350 s/verify\n" +
		"BenchmarkVerifyParallelCommandsSandboxed/small-init-2   \t       5\t1457619923 ns/op\t        68.61 checks/s\t         1.458 s/verify\n" +
		"BenchmarkVerifyParallelCommandsSandboxed/server-binary-2\t       5\t1514962755 ns/op\t        66.01 checks/s\t         1.515 s/verify\n"
	if err := os.WriteFile(filepath.Join(dir, "verifier.txt"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	write(&b, dir)
	got := b.String()
	row := rowOf(got, "P6")
	if strings.Count(row, "sandboxed") != 1 || !strings.Contains(row, "1.458 s = 1.17×") {
		t.Errorf("P6 should name the default sandboxed run once (1.458 s): %s", row)
	}
	for _, want := range []string{"converge-sandbox-init as the sandbox's init) | 5 | 1.458 s", "re-run as the sandbox's init (as before converge-sandbox-init) | 5 | 1.515 s"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in the verifier's table:\n%s", want, got)
		}
	}
}

// TestVerifierFloor: where this run measured BenchmarkSpawnFloor, the P6 row names it beside its
// peers and, when neither meets the goal, says the floor misses it too; the verifier's table has
// its row. Without verifier-floor.txt, neither.
func TestVerifierFloor(t *testing.T) {
	dir := t.TempDir()
	write1 := func(name, out string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write1("verifier.txt", "BenchmarkVerifyParallelCommands-2   \t       5\t1335006245 ns/op\t        74.91 checks/s\t         1.335 s/verify\t         1.068 x-ideal\n")
	var b bytes.Buffer
	write(&b, dir)
	if row := rowOf(b.String(), "P6"); strings.Contains(row, "floor") {
		t.Errorf("P6 names a floor this run did not measure: %s", row)
	}
	write1("verifier-floor.txt", "BenchmarkSpawnFloor-2               \t       5\t1324978081 ns/op\t         1.325 s/verify\t         1.060 x-ideal\n")
	b.Reset()
	write(&b, dir)
	got := b.String()
	row := rowOf(got, "P6")
	for _, want := range []string{"floor (8 goroutines running the 100 `sleep 0.1` with os/exec, nothing else) 1.325 s",
		"**not met** (the bare spawn floor's own 1.06×: converge 1.01× the floor)"} {
		if !strings.Contains(row, want) {
			t.Errorf("P6 row without %q: %s", want, row)
		}
	}
	if want := "| floor: 8 goroutines running the 100 `sleep 0.1` with os/exec (no Verifier, RPC, sandbox or report) | — | 1.325 s | 1.06× |"; !strings.Contains(got, want) {
		t.Errorf("no %q in the verifier's table:\n%s", want, got)
	}
}

// TestLocalAgentsLine: bench/dag's embedded run with converge dev's own local agents is printed
// as its own line beside the agent processes' one, in the DAG table, with its CPU per process,
// and in issue 17's table as a P1 row of its own.
func TestLocalAgentsLine(t *testing.T) {
	dir := t.TempDir()
	dag := `{"agents": 2, "shapes": [{"shape": "fanout", "tasks": 1000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.34, "ratio_to_ninja": 1},
  {"name": "converge, embedded (SQLite), 2 agent processes, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.08, "ratio_to_ninja": 3.18,
   "process_cpu": [{"name": "converge-dev", "self_ms_per_task": 0.71}, {"name": "agent-01", "self_ms_per_task": 0.22, "children_ms_per_task": 0.3}]},
  {"name": "converge, embedded (SQLite), 2 local agents, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 0.85, "ratio_to_ninja": 2.5,
   "cpu_ms_per_task": 1.5, "process_cpu": [{"name": "converge-dev", "self_ms_per_task": 0.9, "children_ms_per_task": 0.6}]}]}]}`
	if err := os.WriteFile(filepath.Join(dir, "dag.json"), []byte(dag), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	write(&b, dir)
	got := b.String()
	for _, want := range []string{
		"| converge, embedded (SQLite), 2 agent processes, eager | CONVERGED_PENDING_HUMAN | 1.080 s |",
		"| converge, embedded (SQLite), 2 local agents, eager | CONVERGED_PENDING_HUMAN | 0.850 s |",
		"converge, embedded (SQLite), 2 local agents, eager: CPU ms per task 1.500: converge-dev 0.900 (system 0.000) + its commands 0.600.",
		"\"local agents\" beside \"agent processes\"",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in the output:\n%s", want, got)
		}
	}
	var p1 []string
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "| P1 |") {
			p1 = append(p1, line)
		}
	}
	if len(p1) != 2 || !strings.Contains(p1[1], "2 local agents, eager") || !strings.Contains(p1[1], "2.50×") {
		t.Errorf("want a P1 row for each embedded line, the local agents' second at 2.50×: %q", p1)
	}
}

// TestDagRoundsNamed: a configuration run in several rounds (bench/dag --rounds) shows its
// median-wall round in the tables, says so in the text, lists every round's wall below its table
// and in issue 17's row.
func TestDagRoundsNamed(t *testing.T) {
	dir := t.TempDir()
	dag := `{"agents": 2, "shapes": [{"shape": "fanout", "tasks": 1000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.40, "ratio_to_ninja": 1},
  {"name": "converge, embedded (SQLite), 2 local agents, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 0.82, "ratio_to_ninja": 2.05,
   "round_walls_s": [0.824, 0.788, 0.929]}]}]}`
	if err := os.WriteFile(filepath.Join(dir, "dag.json"), []byte(dag), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "settings.txt"), []byte("peer rounds: 3\ndag rounds: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	write(&b, dir)
	got := b.String()
	for _, want := range []string{
		"Each graph runs in 3 rounds: in each, ninja and make run 3 times each",
		"converge, embedded (SQLite), 2 local agents, eager: the median of 3 rounds; walls 0.82, 0.79, 0.93 s.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in the output:\n%s", want, got)
		}
	}
	if row := rowOf(got, "P1"); !strings.Contains(row, "the median-wall round of 3: 0.82, 0.79, 0.93 s") {
		t.Errorf("P1's row does not name its rounds: %s", row)
	}
}

// TestFloorRowsOnlyWhenRun: the Postgres floor's section is printed from dag-floor.json, with
// each part's median and its ratio to ninja, and not at all without that file.
func TestFloorRowsOnlyWhenRun(t *testing.T) {
	dir := t.TempDir()
	var b bytes.Buffer
	floor(&b, dir)
	if b.Len() != 0 {
		t.Fatalf("floor without dag-floor.json printed:\n%s", b.String())
	}
	js := `{"tasks": 1000, "parts": [
	 {"name": "ninja -j 2", "round": 1, "cpu_ms_per_task": 0.7, "wall_ms_per_task": 0.4},
	 {"name": "floor", "round": 1, "cpu_ms_per_task": 1.5, "wall_ms_per_task": 0.8, "note": "1.9 per commit",
	  "processes": [{"name": "floor agents", "self_ms_per_task": 0.3, "children_ms_per_task": 0.6}]},
	 {"name": "ninja -j 2", "round": 2, "cpu_ms_per_task": 0.7, "wall_ms_per_task": 0.5},
	 {"name": "floor", "round": 2, "cpu_ms_per_task": 1.6, "wall_ms_per_task": 1.2}],
	 "fsync": ["fdatasync 9000 ops/sec"]}`
	if err := os.WriteFile(filepath.Join(dir, "dag-floor.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	floor(&b, dir)
	out := b.String()
	for _, want := range []string{"| floor | 1.20 ms | 2.40× | 1.60 ms |", "| ninja -j 2 | 0.50 ms | 1.00× |", "fdatasync 9000 ops/sec"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

// TestNinjaLatencyBesideP2: ninja's own dependency done → start (from its .ninja_log) is printed
// as P2's and P2b's peer figure, P2b's ratio carries the p50s' ratio, and a p50 goal that ninja's
// own queue misses too says so.
func TestNinjaLatencyBesideP2(t *testing.T) {
	dir := t.TempDir()
	dag := `{"agents": 2, "shapes": [
 {"shape": "chain", "tasks": 300, "edges": 299, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.3, "ratio_to_ninja": 1, "latency": "dependency done→dependent start (.ninja_log)", "latency_p50_ms": 0.5, "latency_p99_ms": 1},
  {"name": "converge, embedded (SQLite), 2 local agents, strict", "dispatch": "strict", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 0.9, "ratio_to_ninja": 3, "latency": "dependency done→dependent start", "latency_p50_ms": 1, "latency_p99_ms": 2}]},
 {"shape": "random", "tasks": 1000, "edges": 5000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.4, "ratio_to_ninja": 1, "latency": "dependency done→dependent start (.ninja_log)", "latency_p50_ms": 120, "latency_p99_ms": 300},
  {"name": "converge, embedded (SQLite), 2 local agents, strict", "dispatch": "strict", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 0.8, "ratio_to_ninja": 2, "latency": "dependency done→dependent start", "latency_p50_ms": 150, "latency_p99_ms": 400}]}]}`
	if err := os.WriteFile(filepath.Join(dir, "dag.json"), []byte(dag), 0o644); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	write(&b, dir)
	got := b.String()
	if row := rowOf(got, "P2"); !strings.Contains(row, "its log's dep done → start: p50 0.50 ms, p99 1.00 ms") {
		t.Errorf("P2 should give ninja's logged latency: %s", row)
	}
	row := rowOf(got, "P2b")
	for _, want := range []string{"0.40 s; p50 120 ms", "2.00×; p50 1.25×", "**not met** (ninja's own p50 is 120 ms"} {
		if !strings.Contains(row, want) {
			t.Errorf("no %q in P2b's row: %s", want, row)
		}
	}
	if !strings.Contains(got, "| ninja -j 2 | ok | 0.400 s |") {
		t.Errorf("the DAG table should have ninja's row:\n%s", got)
	}
}

// TestFloorNotesOnP3AndP4: a P3 goal that the bare gRPC floor of the same run misses too, and a
// P4 p99 beside GetItem's, are said in the row's verdict.
func TestFloorNotesOnP3AndP4(t *testing.T) {
	dir := t.TempDir()
	reg := `{"clients": 50, "lock_cycles": {"ops_per_sec": 4000, "p50_ms": 5, "p99_ms": 15},
 "batch_cycles": {"ops_per_sec": 3000, "p50_ms": 7, "p99_ms": 20}, "redis_set": {"ops_per_sec": 50000, "p50_ms": 0.5, "p99_ms": 1},
 "grpc_floor": {"ops_per_sec": 11000, "p50_ms": 2.4, "p99_ms": 9.5}, "batch_ratio": 0.48}`
	know := `{"items": 1000000, "results": [
 {"call": "QueryItems by path (gotchas, min 0.6)", "p50_ms": 0.9, "p99_ms": 3.4},
 {"call": "GetItem (gRPC, primary key)", "p50_ms": 0.4, "p99_ms": 1.3},
 {"call": "baseline: SELECT by primary key (pgx)", "p50_ms": 0.07, "p99_ms": 0.3}]}`
	for name, body := range map[string]string{"registry.json": reg, "knowledge.json": know} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	write(&b, dir)
	var p3 []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| P3 |") {
			p3 = append(p3, line)
		}
	}
	if len(p3) != 2 || !strings.Contains(p3[0], "**not met** (the bare gRPC floor's own ratio 0.220, p99 9.50 ms at 50 clients)") ||
		!strings.Contains(p3[1], "**not met** (the bare gRPC floor's own p99 9.50 ms at 50 clients)") {
		t.Errorf("P3 rows should name the floor's figures that miss the goal too: %q", p3)
	}
	if row := rowOf(b.String(), "P4"); !strings.Contains(row, "**not met** (GetItem's p99 here: 1.30 ms)") {
		t.Errorf("P4 should give GetItem's p99: %s", row)
	}
}

// TestPostgresBackendsCPUInGrowth: P1b's Postgres row and the growth table carry the backends'
// CPU per task (BenchmarkFanout's pg-cpu-µs/task), the server's side of the transactions whose
// wall the row reports.
func TestPostgresBackendsCPUInGrowth(t *testing.T) {
	var b bytes.Buffer
	write(&b, "testdata")
	out := b.String()
	var pgRow string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| P1b |") && strings.Contains(line, "Postgres") {
			pgRow = line
		}
	}
	if !strings.Contains(pgRow, "Postgres backends' CPU 1.40 ms → 1.24 ms") {
		t.Errorf("P1b's Postgres row without the backends' CPU: %s", pgRow)
	}
	if !strings.Contains(out, "| Postgres backends' CPU per task |") || !strings.Contains(out, "| 1.24 ms |") {
		t.Errorf("the growth table has no Postgres backends' CPU column:\n%s", out)
	}
}

// TestWatchersBatchedAndSingle: R8's row is the batched streams' run, names how many entries a
// message carried, what its client decoded, and the full-decode and one-entry-per-message runs
// beside it; the section lists all four runs.
func TestWatchersBatchedAndSingle(t *testing.T) {
	dir := t.TempDir()
	run := func(streams, batch int, decode string, wall float64, messages int64, cpu float64) string {
		return fmt.Sprintf(`{"streams": %d, "batch": %d, "decode": %q, "delivered": %d, "messages": %d, "agents": 50, "tasks": 300, "width": 50,
 "outcome": "CONVERGED_PENDING_HUMAN", "events": 1200, "wall_s": %g, "scheduler_cpu_s": %g, "client_cpu_s": 3.5, "streams_exact": %d}`,
			streams, batch, decode, 1200*streams, messages, wall, cpu, streams)
	}
	for name, body := range map[string]string{
		"load-0.json":              run(0, 0, "seq", 2.0, 0, 0.5),
		"load-streams.json":        run(1000, 100, "seq", 2.1, 300000, 0.9),
		"load-streams-full.json":   run(1000, 100, "full", 2.4, 300000, 0.95),
		"load-streams-single.json": run(1000, 1, "", 5.0, 1200000, 4.2),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	write(&b, dir)
	row := rowOf(b.String(), "R8")
	for _, want := range []string{"2.10 s (1000 / 1000 streams exact; entries per message ≤ 100 (4.0 on average); the client decodes seq and time)", "| 1.05× |",
		"met (the client decoding every field: 1.20×, its CPU 3.50 s against 3.50 s, the Scheduler's 0.95 s against 0.90 s)",
		"(one entry per message: 2.50×; the Scheduler's CPU 0.90 s batched, 4.20 s one per message, 0.50 s without streams)"} {
		if !strings.Contains(row, want) {
			t.Errorf("R8 row lacks %q: %s", want, row)
		}
	}
	for _, want := range []string{"| 1,000 streams | ≤ 100 (4.0 on average) | seq and time |", "| 1,000 streams | ≤ 100 (4.0 on average) | every field | CONVERGED_PENDING_HUMAN | 1200 | 2.40 s | 1.20× |",
		"| 1,000 streams | 1 | every field | CONVERGED_PENDING_HUMAN | 1200 | 5.00 s | 2.50× | 4.20 s | 3.50 s |", "| 0 streams | — | — |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("R8 section lacks %q", want)
		}
	}
}

// TestWatchersMedianOfRounds: with LOAD_ROUNDS, each kind of load run is its median round by
// wall (every round's wall named in the row), and a round whose streams were not exact is shown
// instead of the median, so no median hides it.
func TestWatchersMedianOfRounds(t *testing.T) {
	dir := t.TempDir()
	run := func(streams, batch int, wall float64, exact int) string {
		return fmt.Sprintf(`{"streams": %d, "batch": %d, "delivered": 1, "messages": 1, "agents": 50, "tasks": 300, "width": 50,
 "outcome": "CONVERGED_PENDING_HUMAN", "events": 1200, "wall_s": %g, "streams_exact": %d}`, streams, batch, wall, exact)
	}
	files := map[string]string{
		"load-0.1.json": run(0, 0, 3.0, 0), "load-0.2.json": run(0, 0, 2.0, 0), "load-0.3.json": run(0, 0, 2.2, 0),
		"load-streams.1.json": run(1000, 100, 2.1, 1000), "load-streams.2.json": run(1000, 100, 9.0, 1000), "load-streams.3.json": run(1000, 100, 2.3, 1000),
		"load-streams-single.1.json": run(1000, 1, 3.0, 1000), "load-streams-single.2.json": run(1000, 1, 3.1, 999), "load-streams-single.3.json": run(1000, 1, 3.2, 1000),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	write(&b, dir)
	row := rowOf(b.String(), "R8")
	for _, want := range []string{"2.30 s (1000 / 1000 streams exact", "| 1.05× |",
		"each kind's median of 3 alternated rounds (walls: no streams 2.00, 2.20, 3.00 s; batched 2.10, 2.30, 9.00 s; one per message 3.00, 3.10, 3.20 s)"} {
		if !strings.Contains(row, want) {
			t.Errorf("R8 row lacks %q: %s", want, row)
		}
	}
	if !strings.Contains(b.String(), "| 999 / 1000 |") {
		t.Errorf("the one-per-message round that was not exact should be the one shown")
	}
}

// TestEmbeddedProcessesFloor: the embedded deployment's floor with agent processes
// (dag-floor-sqlite.json) gets its own section, and the P1 row of the agent processes names it in
// its verdict (the floor's ratio and the real run's in the floor's rounds); the local agents' row
// does not, and a floor above the goal says the goal is below it.
func TestEmbeddedProcessesFloor(t *testing.T) {
	dir := t.TempDir()
	dag := `{"agents": 2, "shapes": [{"shape": "fanout", "tasks": 1000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.4, "ratio_to_ninja": 1},
  {"name": "converge, embedded (SQLite), 2 agent processes, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.4, "ratio_to_ninja": 3.5},
  {"name": "converge, embedded (SQLite), 2 local agents, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 0.9, "ratio_to_ninja": 2.25}]}]}`
	floorJS := func(floorWall float64) string {
		return fmt.Sprintf(`{"tasks": 1000, "parts": [
	 {"name": "ninja -j 2", "round": 1, "cpu_ms_per_task": 0.9, "wall_ms_per_task": 0.5},
	 {"name": "converge P1 embedded (real): 2 agent processes, converge dev --in-memory", "round": 1, "cpu_ms_per_task": 2.6, "wall_ms_per_task": 1.5},
	 {"name": "floor: 2 agent processes, a Scheduler process, SQLite in memory (spawn + 1 round trip + 1 grouped transaction)", "round": 1,
	  "cpu_ms_per_task": 1.7, "wall_ms_per_task": %g, "note": "980 transactions for 1002 requests (1.02 per commit)",
	  "processes": [{"name": "floor Scheduler", "self_ms_per_task": 0.3}, {"name": "floor agents", "self_ms_per_task": 0.5, "children_ms_per_task": 0.9}]}]}`, floorWall)
	}
	for name, js := range map[string]string{"dag.json": dag, "dag-floor-sqlite.json": floorJS(0.7)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	write(&b, dir)
	got := b.String()
	for _, want := range []string{
		"## The floor of a no-op task, embedded with agent processes (`bench/dag --floor --mode sqlite`)",
		"| floor: 2 agent processes, a Scheduler process, SQLite in memory (spawn + 1 round trip + 1 grouped transaction) | 0.70 ms | 1.40× | 1.70 ms | floor Scheduler 0.300; floor agents 0.500 + commands 0.900; 980 transactions",
		"| converge P1 embedded (real): 2 agent processes, converge dev --in-memory | 1.50 ms | 3.00× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in the output:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Postgres + Redis (`bench/dag --floor --mode postgres`)") {
		t.Errorf("the Postgres floor's section without dag-floor.json:\n%s", got)
	}
	var processes, local string
	for _, line := range strings.Split(got, "\n") {
		if strings.HasPrefix(line, "| P1 |") && strings.Contains(line, "agent processes") {
			processes = line
		}
		if strings.HasPrefix(line, "| P1 |") && strings.Contains(line, "local agents") {
			local = line
		}
	}
	if want := "**not met** (the deployment's floor, in its own rounds: 1.40×, the real run 3.00×)"; !strings.Contains(processes, want) {
		t.Errorf("no %q in the agent processes' P1 row: %s", want, processes)
	}
	if strings.Contains(local, "floor") {
		t.Errorf("the local agents' P1 row names the agent processes' floor: %s", local)
	}
	if err := os.WriteFile(filepath.Join(dir, "dag-floor-sqlite.json"), []byte(floorJS(1.1)), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	write(&b, dir)
	if want := "(the deployment's floor, in its own rounds: 2.20×, the real run 3.00×; the goal is below the floor)"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in:\n%s", want, b.String())
	}
}

// writeRandomFloorFixtures writes dag as dir's dag.json beside the two deployments' floor files:
// the embedded floor at 2.00× ninja's fan-out (1.0 against 0.5 ms per task), the Postgres floor at
// 4.00×.
func writeRandomFloorFixtures(t *testing.T, dir, dag string) {
	t.Helper()
	floorJS := func(real string, floorWall float64) string {
		return fmt.Sprintf(`{"tasks": 1000, "parts": [
	 {"name": "ninja -j 2", "round": 1, "cpu_ms_per_task": 0.9, "wall_ms_per_task": 0.5},
	 {"name": "converge P1 %s", "round": 1, "cpu_ms_per_task": 2.6, "wall_ms_per_task": 1.5},
	 {"name": "floor: the floor", "round": 1, "cpu_ms_per_task": 1.7, "wall_ms_per_task": %g}]}`, real, floorWall)
	}
	files := map[string]string{
		"dag.json":              dag,
		"dag-floor-sqlite.json": floorJS("embedded (real): 2 agent processes", 1.0),
		"dag-floor.json":        floorJS("Postgres (real): 2 agents", 2.0),
	}
	for name, js := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRandomFloorNote: a P2b row whose wall misses its goal names a lower bound of its
// deployment's floor on the random DAG, from the fan-out's floor and ninja's walls on both
// graphs, and says the goal is below it when it is; the local agents' row, a row that meets the
// wall goal and a run without the floor's file name none.
func TestRandomFloorNote(t *testing.T) {
	dir := t.TempDir()
	dag := `{"agents": 2, "shapes": [
 {"shape": "fanout", "tasks": 1000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.4, "ratio_to_ninja": 1}]},
 {"shape": "random", "tasks": 1000, "edges": 5000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.5, "ratio_to_ninja": 1, "latency": "dep", "latency_p50_ms": 20},
  {"name": "converge, embedded (SQLite), 2 agent processes, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.6, "ratio_to_ninja": 3.2, "latency_p50_ms": 40},
  {"name": "converge, embedded (SQLite), 2 local agents, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.75, "ratio_to_ninja": 3.5, "latency_p50_ms": 40},
  {"name": "converge, Postgres + Redis, 2 agents, strict", "dispatch": "strict", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 2.5, "ratio_to_ninja": 5, "latency_p50_ms": 90},
  {"name": "converge, Postgres + Redis, 2 agents, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.4, "ratio_to_ninja": 2.8, "latency_p50_ms": 90}]}]}`
	writeRandomFloorFixtures(t, dir, dag)
	rows := func() map[string]string {
		var b bytes.Buffer
		write(&b, dir)
		out := map[string]string{}
		for _, line := range strings.Split(b.String(), "\n") {
			if !strings.HasPrefix(line, "| P2b |") {
				continue
			}
			for _, who := range []string{"agent processes", "local agents", "2 agents, strict", "2 agents, eager"} {
				if strings.Contains(line, who) {
					out[who] = line
				}
			}
		}
		return out
	}
	got := rows()
	// Embedded: floor 2.00× ninja on the fan-out (1.0 / 0.5 ms), × 0.4 s ÷ 0.5 s = 1.60×.
	if want := "(the deployment's floor on this graph is at least 1.60×: its fan-out floor 2.00×, in its own rounds, × ninja's fan-out wall 0.40 s ÷ its wall here 0.50 s)"; !strings.Contains(got["agent processes"], want) {
		t.Errorf("no %q in the agent processes' row: %s", want, got["agent processes"])
	}
	// Postgres: 4.00× × 0.8 = 3.20×, above the 3× goal.
	if want := "is at least 3.20×: its fan-out floor 4.00×, in its own rounds, × ninja's fan-out wall 0.40 s ÷ its wall here 0.50 s; the goal is below the floor)"; !strings.Contains(got["2 agents, strict"], want) {
		t.Errorf("no %q in the Postgres row: %s", want, got["2 agents, strict"])
	}
	if strings.Contains(got["local agents"], "floor") {
		t.Errorf("the local agents' row names a floor: %s", got["local agents"])
	}
	if strings.Contains(got["2 agents, eager"], "floor") {
		t.Errorf("a row within the wall goal names a floor: %s", got["2 agents, eager"])
	}
	if err := os.Remove(filepath.Join(dir, "dag-floor.json")); err != nil {
		t.Fatal(err)
	}
	if got := rows(); strings.Contains(got["2 agents, strict"], "floor") {
		t.Errorf("a row names a floor that did not run: %s", got["2 agents, strict"])
	}
}

// TestRandomFloorNoteWithModel: with bench/dag's uniform model of the random DAG, a P2b row that
// misses its wall or its p50 goal names its floor's wall and p50 on the graph: the fan-out
// floor's time per task on a worker times the model's units of its dispatch mode; and which
// goals are below them. A row that meets both names none.
func TestRandomFloorNoteWithModel(t *testing.T) {
	dir := t.TempDir()
	dag := `{"agents": 2, "shapes": [
 {"shape": "fanout", "tasks": 1000, "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.4, "ratio_to_ninja": 1}]},
 {"shape": "random", "tasks": 1000, "edges": 5000,
  "model": [{"dispatch": "strict", "wall_units": 504, "latency_p50_units": 27}, {"dispatch": "eager", "wall_units": 500, "latency_p50_units": 20}],
  "runs": [
  {"name": "ninja -j 2", "outcome": "ok", "wall_s": 0.5, "ratio_to_ninja": 1, "latency": "dep", "latency_p50_ms": 20},
  {"name": "converge, embedded (SQLite), 2 agent processes, strict", "dispatch": "strict", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.45, "ratio_to_ninja": 2.9, "latency_p50_ms": 55},
  {"name": "converge, embedded (SQLite), 2 agent processes, eager", "dispatch": "eager", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 1.4, "ratio_to_ninja": 2.8, "latency_p50_ms": 45},
  {"name": "converge, Postgres + Redis, 2 agents, strict", "dispatch": "strict", "outcome": "CONVERGED_PENDING_HUMAN", "wall_s": 2.5, "ratio_to_ninja": 5, "latency_p50_ms": 90}]}]}`
	writeRandomFloorFixtures(t, dir, dag)
	var b bytes.Buffer
	write(&b, dir)
	got := map[string]string{}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| P2b |") {
			for _, who := range []string{"agent processes, strict", "agent processes, eager", "2 agents, strict"} {
				if strings.Contains(line, who) {
					got[who] = line
				}
			}
		}
	}
	// Embedded: the floor 2.00× ninja's fan-out (1.0 / 0.5 ms per task) × 0.4 s = 0.8 s for
	// 1,000 tasks on 2 workers: 1.6 ms per task on a worker. Strict: 504 units = 806 ms ÷ 0.5 s =
	// 1.61×; p50 27 units = 43.2 ms. Neither goal is below it.
	if want := "(the deployment's floor on this graph, by the uniform model of its claim order: wall at least 1.61×, dep done → start p50 43.2 ms: its fan-out floor 2.00×, in its own rounds, × ninja's fan-out wall 0.40 s is 1.60 ms per task on each of 2 workers; × the model's 504 units of wall ÷ ninja's wall here 0.50 s, × its p50 of 27 units)"; !strings.Contains(got["agent processes, strict"], want) {
		t.Errorf("no %q in the strict row: %s", want, got["agent processes, strict"])
	}
	if strings.Contains(got["agent processes, eager"], "floor") {
		t.Errorf("a row that meets both goals names a floor: %s", got["agent processes, eager"])
	}
	// Postgres: 4.00× → 3.2 ms per task on a worker; 504 units = 1,613 ms ÷ 0.5 s = 3.23×, p50
	// 27 units = 86.4 ms: both goals below the floor.
	if want := "wall at least 3.23×, dep done → start p50 86.4 ms"; !strings.Contains(got["2 agents, strict"], want) {
		t.Errorf("no %q in the Postgres row: %s", want, got["2 agents, strict"])
	}
	if want := "; the wall goal and the p50 goal are below the floor)"; !strings.Contains(got["2 agents, strict"], want) {
		t.Errorf("no %q in the Postgres row: %s", want, got["2 agents, strict"])
	}
}
