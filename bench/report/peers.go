package main

// The sections of the peers other than the DAG runners: locks (bench/registry), knowledge
// queries (bench/knowledge), planning and Verify Done (go test -bench outputs).

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

type regResult struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
}

func registry(w io.Writer, dir string, set kvs) {
	fmt.Fprintf(w, "\n## Locks against `redis-benchmark -t set` (`bench/registry`)\n\n")
	var rep struct {
		Clients int       `json:"clients"`
		Rounds  int       `json:"rounds"`
		Locks   regResult `json:"lock_cycles"`
		Direct  regResult `json:"lock_cycles_direct"`
		Batch   regResult `json:"batch_cycles"`
		Floor   regResult `json:"grpc_floor"`
		Set     regResult `json:"redis_set"`
	}
	if err := readJSON(dir, "registry.json", &rep); err != nil {
		notMeasured(w, dir, "registry.json", err)
		return
	}
	fmt.Fprintf(w, "Lock acquire+release cycles through the Registry's gRPC server (Redis backend, loopback TCP),\n")
	fmt.Fprintf(w, "the same cycles on the Redis backend called in process, and `redis-benchmark -t set`, on one\n")
	fmt.Fprintf(w, "private Redis at the same concurrency (%d clients), in %d alternating rounds of %s (the median\n", rep.Clients, rep.Rounds, set.get("registry duration"))
	fmt.Fprintf(w, "round is reported). A lock cycle is two RPCs and two Lua scripts; SET is one command.\n\n")
	fmt.Fprintf(w, "| side | ops/s | × SET ops/s | p50 | × SET p50 | p99 | × SET p99 |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range []struct {
		name string
		v    regResult
	}{{"AcquireLock+ReleaseLock via gRPC", rep.Locks}, {"same cycles, Redis backend in process", rep.Direct},
		{fmt.Sprintf("AcquireLocks+ReleaseLocks of %d files via gRPC (ops/s: batches)", batchFiles), rep.Batch},
		{"floor: 2 no-op unary calls, plain grpc.Server, no interceptor (ops/s: pairs)", rep.Floor}, {"redis-benchmark -t set (peer)", rep.Set}} {
		if r.v.OpsPerSec == 0 {
			continue // a run without that side
		}
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s |\n", r.name, r.v.OpsPerSec, x(div(r.v.OpsPerSec, rep.Set.OpsPerSec)),
			ms(r.v.P50Ms), x(div(r.v.P50Ms, rep.Set.P50Ms)), ms(r.v.P99Ms), x(div(r.v.P99Ms, rep.Set.P99Ms)))
	}
	fmt.Fprintf(w, "\nLatency of a lock cycle is that of AcquireLock; of redis-benchmark, that of SET; of the floor, that of\n")
	fmt.Fprintf(w, "the first call of the pair.\n")
	if rep.Floor.OpsPerSec > 0 && rep.Set.OpsPerSec > 0 {
		fmt.Fprintf(w, "\nA lock is a gRPC call: the floor's pairs/s ÷ SET/s = %.3f is the ceiling of P3's ratio in this design,\n", div(rep.Floor.OpsPerSec, rep.Set.OpsPerSec))
		fmt.Fprintf(w, "and the lock cycles reach %.2f of the floor.\n", div(rep.Locks.OpsPerSec, rep.Floor.OpsPerSec))
	}
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func knowledge(w io.Writer, dir string, set kvs) {
	fmt.Fprintf(w, "\n## Knowledge queries by path (`bench/knowledge`)\n\n")
	var rep struct {
		Items    int     `json:"items"`
		Calls    int     `json:"calls_per_kind"`
		Rounds   int     `json:"rounds"`
		TargetMs float64 `json:"target_p99_ms"`
		Results  []struct {
			Call       string  `json:"call"`
			P50Ms      float64 `json:"p50_ms"`
			P90Ms      float64 `json:"p90_ms"`
			P99Ms      float64 `json:"p99_ms"`
			P999Ms     float64 `json:"p999_ms"`
			MaxMs      float64 `json:"max_ms"`
			Items      float64 `json:"items_per_call"`
			RatioPKP50 float64 `json:"ratio_to_pk_p50"`
			RatioPKP99 float64 `json:"ratio_to_pk_p99"`
		} `json:"results"`
	}
	if err := readJSON(dir, "knowledge.json", &rep); err != nil || len(rep.Results) == 0 {
		if err == nil {
			err = fmt.Errorf("no results")
		}
		notMeasured(w, dir, "knowledge.json", err)
		return
	}
	fmt.Fprintf(w, "%d items on Postgres, the Knowledge service on loopback TCP; %d calls of each kind, one at\n", rep.Items, rep.Calls)
	fmt.Fprintf(w, "a time, in %d alternating rounds. The peer is a plain primary-key `SELECT` of one item with pgx\n", rep.Rounds)
	fmt.Fprintf(w, "on the same database (\"PK\"). The issue's target is a `QueryItems` p99 of at most %.0f ms.\n\n", rep.TargetMs)
	fmt.Fprintf(w, "| call | p50 | × PK p50 | p90 | p99 | × PK p99 | p99.9 | max | items/call |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %.1f |\n", strings.TrimSpace(r.Call), ms(r.P50Ms), x(r.RatioPKP50), ms(r.P90Ms),
			ms(r.P99Ms), x(r.RatioPKP99), ms(r.P999Ms), ms(r.MaxMs), r.Items)
	}
	verdict := "meets"
	if rep.Results[0].P99Ms > rep.TargetMs {
		verdict = "misses"
	}
	fmt.Fprintf(w, "\n`QueryItems` by path p99: %s, which %s the %.0f ms target on this machine.\n", ms(rep.Results[0].P99Ms), verdict, rep.TargetMs)
}

// benchLine is one result line of `go test -bench`.
type benchLine struct {
	name    string
	n       int
	metrics map[string]float64
}

func readBench(path string) ([]benchLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []benchLine
	for _, line := range strings.Split(string(b), "\n") {
		if l, ok := parseBenchLine(line); ok {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no benchmark result line")
	}
	return out, nil
}

// parseBenchLine reads one result line of `go test -bench`: name, iterations, value-unit pairs.
func parseBenchLine(line string) (benchLine, bool) {
	f := strings.Fields(line)
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return benchLine{}, false
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return benchLine{}, false
	}
	l := benchLine{name: f[0], n: n, metrics: map[string]float64{}}
	for i := 2; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			l.metrics[f[i+1]] = v
		}
	}
	return l, true
}

func plan(w io.Writer, dir string) {
	fmt.Fprintf(w, "\n## Wave planning against a plain topological sort (`BenchmarkPlan100k`)\n\n")
	lines, err := readBench(filepath.Join(dir, "plan.txt"))
	if err != nil {
		notMeasured(w, dir, "plan.txt", err)
		return
	}
	fmt.Fprintf(w, "`services/scheduler/plan`: `Plan` (topological levels, then each level split so that no two tasks\n")
	fmt.Fprintf(w, "of a wave touch overlapping files, capped at 32 per wave) against Kahn's topological sort of the\n")
	fmt.Fprintf(w, "same random graph, timed in the same iterations. Planning is two steps: `Prepare` interns the\n")
	fmt.Fprintf(w, "list's paths (the Scheduler does it when the list is created or imported), `Prepared.Plan` plans\n")
	fmt.Fprintf(w, "from the ids (plan only: what StartExecution pays). \"before\" rows are the planner before issue 17\n")
	fmt.Fprintf(w, "(`internal/planref`), in one step.\n\n")
	fmt.Fprintf(w, "| graph | iterations | topological sort (peer) | import + plan | × topo sort | plan only | × topo sort | waves | levels |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, l := range lines {
		name := l.name
		if i := strings.Index(name, "/"); i >= 0 {
			name = name[i+1:]
		}
		if i := strings.LastIndex(name, "-"); i >= 0 {
			name = name[:i]
		}
		graph := map[string]string{"10k": "10,000 tasks, 100,000 edges", "100k": "100,000 tasks, 1,000,000 edges"}[name]
		if graph == "" {
			graph = name
		}
		both, bothX := ms(l.metrics["plan-ns/op"]/1e6), x(l.metrics["plan/kahn"])
		only, onlyX := "—", "—"
		if v, ok := l.metrics["prep+plan/kahn"]; ok {
			both, bothX = ms((l.metrics["prep-ns/op"]+l.metrics["plan-ns/op"])/1e6), x(v)
			only, onlyX = ms(l.metrics["plan-ns/op"]/1e6), x(l.metrics["plan/kahn"])
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %.0f | %.0f |\n", graph, l.n, ms(l.metrics["kahn-ns/op"]/1e6), both, bothX,
			only, onlyX, l.metrics["waves"], l.metrics["levels"])
	}
}

func verifier(w io.Writer, dir string) {
	fmt.Fprintf(w, "\n## Verification parallelism (`BenchmarkVerifyParallelCommands`)\n\n")
	lines, err := readBench(filepath.Join(dir, "verifier.txt"))
	if err != nil {
		notMeasured(w, dir, "verifier.txt", err)
		return
	}
	var peer []float64
	if b, err := os.ReadFile(filepath.Join(dir, "verifier-peer.txt")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if v, err := strconv.ParseFloat(f, 64); err == nil {
				peer = append(peer, v)
			}
		}
	}
	fmt.Fprintf(w, "One `Verify` of 100 command checks of `sleep 0.1` with `parallelism: 8` through the Verifier's\n")
	fmt.Fprintf(w, "server (bufconn, interceptors, SQLite store, report stored). Peers: the ideal 100 × 0.1 s / 8 =\n")
	fmt.Fprintf(w, "1.25 s, and `xargs -P 8` running the same 100 `sh -c 'sleep 0.1'` in this run (median of its runs).\n\n")
	fmt.Fprintf(w, "| runner | verifications | wall per verification | × ideal | × xargs -P 8 | checks/s |\n|---|--:|--:|--:|--:|--:|\n")
	var xargs float64
	if len(peer) > 0 {
		slices.Sort(peer)
		xargs = peer[len(peer)/2]
	}
	for _, l := range lines {
		s := l.metrics["s/verify"]
		vx := "—"
		if xargs > 0 {
			vx = x(s / xargs)
		}
		runner := "Verifier, parallelism 8, no sandbox (the benchmark's default)"
		switch sandboxOf(l.name) {
		case sandboxDefault:
			runner = "Verifier, parallelism 8, sandboxed (the binary's default: namespaces, a fresh /proc, a cgroup per check; converge-sandbox-init as the sandbox's init)"
		case sandboxServerInit:
			runner = "Verifier, parallelism 8, sandboxed, the server binary re-run as the sandbox's init (as before converge-sandbox-init)"
		}
		fmt.Fprintf(w, "| %s | %d | %.3f s | %s | %s | %.1f |\n", runner, l.n, s, x(s/1.25), vx, l.metrics["checks/s"])
	}
	if xargs > 0 {
		fmt.Fprintf(w, "| xargs -P 8 (peer) | %d | %.3f s | %s | 1.00× | %.1f |\n", len(peer), xargs, x(xargs/1.25), 100/xargs)
	}
	if floor, ok := spawnFloor(dir); ok {
		vx := "—"
		if xargs > 0 {
			vx = x(floor / xargs)
		}
		fmt.Fprintf(w, "| floor: 8 goroutines running the 100 `sleep 0.1` with os/exec (no Verifier, RPC, sandbox or report) | — | %.3f s | %s | %s | %.1f |\n", floor, x(floor/1.25), vx, 100/floor)
	}
	fmt.Fprintf(w, "\nWith 8 slots, 100 checks need 13 rounds of 0.1 s: 1.3 s is the least any runner can reach,\n")
	fmt.Fprintf(w, "and a runner that starts a process per check also pays each process's exec and exit (the floor row).\n")
}

// The sandboxed verifier benchmarks: BenchmarkVerifyParallelCommandsSandboxed runs the
// default, with converge-sandbox-init (sub-benchmark small-init; older outputs have no
// sub-benchmark), and, beside it, the server binary re-run as the init (server-binary).
const (
	sandboxNone = iota
	sandboxDefault
	sandboxServerInit
)

// sandboxOf says which of the verifier benchmarks name is.
func sandboxOf(name string) int {
	switch {
	case !strings.Contains(name, "Sandboxed"):
		return sandboxNone
	case strings.Contains(name, "/server-binary"):
		return sandboxServerInit
	default:
		return sandboxDefault
	}
}
