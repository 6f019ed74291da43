// Command dag measures the Scheduler and its agents on task DAGs whose every task runs `true`,
// next to ninja and make given exactly the same graph, side by side in one run.
//
// Shapes: a chain (task i depends on task i-1), a fan-out (independent tasks, one wave) and a
// random DAG (--edges distinct edges between uniformly random pairs of tasks, oriented from the
// lower index to the higher, fixed seed). converge runs each on the embedded default (`converge
// dev --in-memory`: SQLite and in-process locks) and on the production deployment (one process
// per service on Postgres and Redis), with --agents agent processes; ninja and make run with -j
// --agents. The embedded default runs twice (--embedded-agents): with agent processes, and with
// converge dev's own local agents (`converge dev --agents N`: in the process, calling the
// services in-process), which is the design's embedded default.
//
// Figures: wall time, per-task overhead against ninja ((wall − ninja wall) / tasks), the ratio to
// ninja, and from the execution log (store times; a task's start is its TASK_STARTED's source
// time, when the agent started it: a short task's started event reaches the Scheduler with its
// completion) the dependency-done → dependent-start latency (the last dependency's
// TASK_COMPLETED → the dependent's TASK_STARTED) p50/p99. For the fan-out,
// which has no dependencies, the latency is claim→start (LEASE_GRANTED → TASK_STARTED), with
// tasks per second and the completion→next-claim gap per agent.
//
//	cd bench/dag && go run . --shape chain --chain-tasks 200 --agents 4
//	cd bench/dag && go run . --shape fanout --tasks 1000 --json
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

type options struct {
	shapes             []string
	tasks, chainTasks  int
	edges              int
	seed               uint64
	agents, peerRounds int
	// rounds is how many rounds each shape runs in, each running the peers and every converge
	// configuration once; each side's row is its median-wall round (rounds.go).
	rounds          int
	mode            string
	pgURL, redisURL string
	jsonOut         bool
	timeout         time.Duration
	// dispatch are the Scheduler's dispatch modes to run each graph with, side by side.
	dispatch []string
	// maxParallel is converge's max_parallel; 0: the graph's task count (waves are the
	// dependency levels).
	maxParallel int
	// embeddedAgents are the embedded runs' agents, side by side: "processes" (converge-agent
	// processes) and/or "local" (converge dev --agents N).
	embeddedAgents []string
	// prefetch are the agents' prefetch settings to run each converge configuration with, side
	// by side (converge-agent --prefetch, converge dev --agent-prefetch); aheadOn is the one of
	// the run at hand.
	prefetch []bool
	aheadOn  bool
	// agentLatency delays each way of the Postgres deployment's agents' connections to the
	// Scheduler and the Registry (a TCP proxy, platform/clustertest): agents on other hosts.
	agentLatency time.Duration
}

func main() {
	var o options
	shape := flag.String("shape", "all", "chain, fanout, random, or a comma-separated list, or all")
	flag.IntVar(&o.tasks, "tasks", 1000, "tasks of the fan-out and of the random DAG")
	flag.IntVar(&o.chainTasks, "chain-tasks", 1000, "tasks of the chain (one wave per task in converge)")
	flag.IntVar(&o.edges, "edges", 5000, "edges of the random DAG")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the random DAG")
	flag.IntVar(&o.agents, "agents", 4, "converge agent processes, and -j of ninja and make")
	flag.IntVar(&o.peerRounds, "peer-rounds", 5, "runs of ninja and of make per shape and round (their median is the round's)")
	flag.IntVar(&o.rounds, "rounds", 1, "rounds per shape, each running ninja and make (--peer-rounds runs each) and then every converge configuration once; each row is its median-wall round, with every round's wall beside it")
	flag.StringVar(&o.mode, "mode", "both", "converge deployments: embedded, postgres, both, or none (peers only)")
	flag.StringVar(&o.pgURL, "postgres-url", envOr("CONVERGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres server (a fresh database is made and dropped per run)")
	flag.StringVar(&o.redisURL, "redis-url", envOr("CONVERGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis")
	flag.BoolVar(&o.jsonOut, "json", false, "print the result as one JSON object instead of tables")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up on one converge execution after this long")
	dispatch := flag.String("dispatch", "strict,eager", "converge's dispatch modes, each run side by side: strict (every wave a barrier), eager (a task starts once its dependencies completed without a commit or were integrated), or both comma-separated; the fan-out, one wave, runs the last only")
	floor := flag.Bool("floor", false, "measure the floor of a no-op task instead (proc.Run of sh -c true with a pooled cgroup, a bare CompleteTask round trip, an in-memory SQLite write transaction) beside ninja on --tasks tasks, --peer-rounds rounds alternated; with --mode postgres the Postgres deployment's floor (agent processes spawning the command, one round trip each to a Scheduler process, one grouped Postgres transaction), the same transactions alone from --agents goroutines, and the real P1 Postgres run, beside ninja; with --mode sqlite the embedded deployment's floor with agent processes (the same processes, the Scheduler's transaction on an in-memory SQLite database) and the real P1 embedded run with agent processes, beside ninja")
	floorServe := flag.String("floor-serve", "", "internal (--floor --mode postgres or sqlite): serve as the floor Scheduler of this execution on --postgres-url, or with \"sqlite\" of a fan-out of --tasks tasks on an in-memory SQLite database")
	floorWork := flag.String("floor-work", "", "internal (--floor --mode postgres or sqlite): run as a floor agent of the floor Scheduler at this address")
	floorInstance := flag.String("floor-instance", "agent-01", "internal: the floor agent's instance id")
	flag.IntVar(&o.maxParallel, "max-parallel", 0, "converge's max_parallel (tasks per wave, and at once); 0 = the task count, so waves are the dependency levels (eager dispatch still starts a task as soon as its dependencies completed: none commits here)")
	embeddedAgents := flag.String("embedded-agents", "processes,local", "the embedded runs' agents, each run side by side: processes (--agents converge-agent processes beside converge dev), local (converge dev --agents N: in its process, calling the services in-process), or both comma-separated")
	flag.DurationVar(&o.agentLatency, "agent-latency", 0, "with --mode postgres: delay each way of the agents' connections to the Scheduler and the Registry by this much (a TCP proxy: agents on other hosts; the round trip grows by twice it); 0 = none")
	prefetch := flag.String("prefetch", "off", "the agents' prefetch (converge-agent --prefetch: one assignment held ahead of the running one), each run side by side: off, on, or off,on")
	flag.Parse()
	for _, p := range strings.Split(*prefetch, ",") {
		switch p {
		case "off", "on":
			o.prefetch = append(o.prefetch, p == "on")
		default:
			fmt.Fprintf(os.Stderr, "dag-bench: --prefetch %q: want off, on or off,on\n", p)
			os.Exit(2)
		}
	}
	o.embeddedAgents = strings.Split(*embeddedAgents, ",")
	for _, a := range o.embeddedAgents {
		if a != "processes" && a != "local" {
			fmt.Fprintf(os.Stderr, "dag-bench: --embedded-agents %q: want processes, local or both\n", a)
			os.Exit(2)
		}
	}
	if floorMain(o, *floor, *floorServe, *floorWork, *floorInstance) {
		return
	}
	o.dispatch = strings.Split(*dispatch, ",")
	if o.rounds < 1 {
		fmt.Fprintf(os.Stderr, "dag-bench: --rounds %d: want 1 or more\n", o.rounds)
		os.Exit(2)
	}
	for _, d := range o.dispatch {
		if _, ok := dispatchModes[d]; !ok {
			fmt.Fprintf(os.Stderr, "dag-bench: --dispatch %q: want strict, eager or both\n", d)
			os.Exit(2)
		}
	}
	o.shapes = strings.Split(*shape, ",")
	if *shape == "all" {
		o.shapes = []string{"chain", "fanout", "random"}
	}
	rep, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dag-bench:", err)
		os.Exit(1)
	}
	if o.jsonOut {
		printJSON(rep)
		return
	}
	printTables(rep)
}

// printJSON writes v to stdout as indented JSON (--json: bench/run.sh feeds it to bench/report).
func printJSON(v any) {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func numCPU() int { return runtime.NumCPU() }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// report is what a run answers (also as JSON).
type report struct {
	Agents int           `json:"agents"`
	Cores  int           `json:"cores"`
	Time   time.Time     `json:"time"`
	Shapes []shapeResult `json:"shapes"`
}

// shapeResult is one graph's figures on every side.
type shapeResult struct {
	Shape  string `json:"shape"`
	Tasks  int    `json:"tasks"`
	Edges  int    `json:"edges"`
	Levels int    `json:"levels"` // longest path in tasks: converge's waves
	// Runs: ninja first (the baseline), then make, then the converge deployments.
	Runs []side `json:"runs"`
	// Model is the random DAG's uniform model (model.go) for each dispatch mode run.
	Model []uniformModel `json:"model,omitempty"`
}

// side is one runner's figures on one graph.
type side struct {
	Name string `json:"name"`
	// Dispatch is converge's dispatch mode (strict or eager); "" for ninja and make.
	Dispatch string `json:"dispatch,omitempty"`
	// Prefetch: converge's agents held one assignment ahead (--prefetch).
	Prefetch bool    `json:"prefetch,omitempty"`
	Outcome  string  `json:"outcome"`
	WallS    float64 `json:"wall_s"`
	// OverheadMsPerTask is (wall − ninja wall) / tasks; RatioToNinja is wall / ninja wall.
	OverheadMsPerTask float64 `json:"overhead_ms_per_task"`
	RatioToNinja      float64 `json:"ratio_to_ninja"`
	// Latency is dependency-done → dependent-start (claim→start on the fan-out), from the log.
	Latency    string  `json:"latency,omitempty"`
	LatP50Ms   float64 `json:"latency_p50_ms,omitempty"`
	LatP99Ms   float64 `json:"latency_p99_ms,omitempty"`
	LatMaxMs   float64 `json:"latency_max_ms,omitempty"`
	TasksPerS  float64 `json:"tasks_per_s,omitempty"` // first lease to last completion
	GapP50Ms   float64 `json:"complete_to_next_claim_p50_ms,omitempty"`
	GapP99Ms   float64 `json:"complete_to_next_claim_p99_ms,omitempty"`
	Completed  int     `json:"completed,omitempty"`
	Requeued   int     `json:"requeued,omitempty"`
	Waves      int     `json:"waves,omitempty"`
	PeerRounds int     `json:"peer_rounds,omitempty"`
	// RoundWallsS are the walls of this side's --rounds rounds in the order run (a peer's: its
	// median of each round); the row's figures are all its median-wall round's.
	RoundWallsS []float64 `json:"round_walls_s,omitempty"`
	// EarlyLeases are the leases granted before the task's wave opened (eager dispatch).
	EarlyLeases int `json:"early_leases,omitempty"`
	// StartMs is the run's start inside the wall, from before CreateTaskList to the first
	// LEASE_GRANTED entry: the list's creation, StartExecution (plan, the run stored, the first
	// wave opened) and the first claim; CreateMs and StartExecMs the two RPCs' own walls.
	// EndMs is the run's end inside the wall, from the last TASK_COMPLETED entry to the
	// execution's ending entry (the last wave's close).
	StartMs     float64 `json:"start_ms,omitempty"`
	CreateMs    float64 `json:"create_list_ms,omitempty"`
	StartExecMs float64 `json:"start_execution_ms,omitempty"`
	EndMs       float64 `json:"end_ms,omitempty"`
	// CPUMsPerTask is the converge processes' CPU time (user + system, getrusage of the exited
	// children: converge dev or the Scheduler and Registry, and the agents; not Postgres nor
	// Redis) per task.
	CPUMsPerTask float64 `json:"cpu_ms_per_task,omitempty"`
	// StartedWithCompletion counts the tasks whose TASK_STARTED entry was written by their
	// completion's transaction (the same store time as their TASK_COMPLETED): a short task's
	// agent sends no separate report (issue 17).
	StartedWithCompletion int `json:"started_with_completion,omitempty"`
	// AgentPhaseMs is the agents' mean wall time per task of each phase of a task
	// (converge_agent_task_phase_seconds, scraped from every agent's /metrics at the end).
	AgentPhaseMs map[string]float64 `json:"agent_phase_ms_per_task,omitempty"`
	// ProcessCPU is each converge process's CPU per task (/proc/<pid>/stat just before it is
	// stopped, as the execution ends): its own, and its waited-for children's (an agent's task
	// commands). Their sum is below CPUMsPerTask by what the processes spend starting and
	// stopping.
	ProcessCPU []processCPU `json:"process_cpu,omitempty"`
	// RPCsPerTask counts the RPCs the Scheduler's process served per task, by method
	// (grpc_server_handled_total of converge dev's /metrics; embedded only).
	RPCsPerTask map[string]float64 `json:"rpcs_per_task,omitempty"`
	// ModelUnitMs is the random DAG run's time per unit of the uniform model of its dispatch mode
	// (model.go): its wall between the first lease and the last completion (wall − StartMs −
	// EndMs) over the model's WallUnits; ModelP50Ms the dependency done → dependent start p50
	// the model predicts at that speed (its P50Units of it), beside LatP50Ms measured.
	ModelUnitMs float64 `json:"model_unit_ms,omitempty"`
	ModelP50Ms  float64 `json:"model_p50_ms,omitempty"`
}

// processCPU is one process's CPU time per task.
type processCPU struct {
	Name string `json:"name"`
	// SelfMs is the process's own user + system time per task; ChildrenMs its exited, waited-for
	// children's (cutime + cstime).
	SelfMs     float64 `json:"self_ms_per_task"`
	ChildrenMs float64 `json:"children_ms_per_task"`
	// SelfSysMs is the system (kernel) part of SelfMs.
	SelfSysMs float64 `json:"self_sys_ms_per_task"`
}

// graph is a DAG in topological order: deps[i] are indexes below i.
type graph struct {
	shape  string
	deps   [][]int
	levels int
}

func (g graph) edges() int {
	n := 0
	for _, d := range g.deps {
		n += len(d)
	}
	return n
}

func makeGraph(shape string, o options) (graph, error) {
	g := graph{shape: shape}
	switch shape {
	case "chain":
		g.deps = make([][]int, o.chainTasks)
		for i := 1; i < o.chainTasks; i++ {
			g.deps[i] = []int{i - 1}
		}
	case "fanout":
		g.deps = make([][]int, o.tasks)
	case "random":
		g.deps = clustertest.RandomDAG(o.tasks, o.edges, o.seed)
	default:
		return g, fmt.Errorf("unknown shape %q (chain, fanout, random)", shape)
	}
	depth := make([]int, len(g.deps))
	for i, ds := range g.deps {
		depth[i] = 1
		for _, d := range ds {
			depth[i] = max(depth[i], depth[d]+1)
		}
		g.levels = max(g.levels, depth[i])
	}
	return g, nil
}

func taskID(i int) string { return fmt.Sprintf("t%04d", i) }

// dispatchModes are the --dispatch names and what each runs with.
var dispatchModes = map[string]schedulerv1.DispatchMode{
	"strict": schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES,
	"eager":  schedulerv1.DispatchMode_DISPATCH_MODE_EAGER,
}

// modesFor are the dispatch modes graph g runs with: a fan-out is one wave, where the modes do
// the same, so it runs the last only.
func modesFor(g graph, o options) []string {
	if g.shape == "fanout" {
		return o.dispatch[len(o.dispatch)-1:]
	}
	return o.dispatch
}

func run(o options) (report, error) {
	rep := report{Agents: o.agents, Cores: runtime.NumCPU(), Time: time.Now().UTC()}
	var graphs []graph
	for _, s := range o.shapes {
		g, err := makeGraph(s, o)
		if err != nil {
			return rep, err
		}
		graphs = append(graphs, g)
	}
	defer clustertest.RemoveBinaries()
	// Built before the first run: withCPU counts every waited-for child, and the go build is one.
	if o.mode != "none" {
		if _, err := clustertest.BinDir(); err != nil {
			return rep, err
		}
	}
	for _, g := range graphs {
		sr := shapeResult{Shape: g.shape, Tasks: len(g.deps), Edges: g.edges(), Levels: g.levels}
		fmt.Fprintf(os.Stderr, "dag-bench: %s, %d tasks, %d edges, depth %d\n", g.shape, sr.Tasks, sr.Edges, sr.Levels)
		runs, err := shapeRuns(g, o)
		if err != nil {
			return rep, err
		}
		sr.Runs = runs
		if g.shape == "random" {
			if err := modelRuns(&sr, g, o); err != nil {
				return rep, err
			}
		}
		ninja := sr.Runs[0].WallS
		for i := range sr.Runs {
			sr.Runs[i].OverheadMsPerTask = (sr.Runs[i].WallS - ninja) * 1000 / float64(sr.Tasks)
			if ninja > 0 {
				sr.Runs[i].RatioToNinja = sr.Runs[i].WallS / ninja
			}
		}
		rep.Shapes = append(rep.Shapes, sr)
	}
	return rep, nil
}

func printTables(rep report) {
	for _, s := range rep.Shapes {
		fmt.Printf("\n%s: %d tasks of `true`, %d edges, depth %d; %d agents / -j %d; %d cores, %s\n\n", s.Shape, s.Tasks, s.Edges, s.Levels,
			rep.Agents, rep.Agents, rep.Cores, rep.Time.Format(time.RFC3339))
		lat := "dep-done→start"
		if s.Shape == "fanout" {
			lat = "claim→start"
		}
		fmt.Printf("| runner | outcome | wall | ×ninja | overhead/task | %s p50 | p99 | tasks/s | early leases |\n|---|---|---|---|---|---|---|---|---|\n", lat)
		for _, r := range s.Runs {
			p50, p99, tps := "—", "—", "—"
			if r.Latency != "" {
				p50, p99 = fmt.Sprintf("%.1f ms", r.LatP50Ms), fmt.Sprintf("%.1f ms", r.LatP99Ms)
			}
			if r.TasksPerS > 0 {
				tps = fmt.Sprintf("%.1f", r.TasksPerS)
			}
			fmt.Printf("| %s | %s | %.3f s | %.1f | %.2f ms | %s | %s | %s | %d |\n", r.Name, r.Outcome, r.WallS, r.RatioToNinja, r.OverheadMsPerTask, p50, p99, tps, r.EarlyLeases)
		}
		for _, r := range s.Runs {
			if len(r.RoundWallsS) > 1 {
				fmt.Printf("\n%s: the median of %d rounds, walls %s s\n", r.Name, len(r.RoundWallsS), wallList(r.RoundWallsS))
			}
		}
		for _, line := range eagerVsStrict(s.Runs) {
			fmt.Println(line)
		}
		for _, m := range s.Model {
			fmt.Printf("\nuniform model, %s (every task one unit, the Scheduler's claim order, %d workers): wall %d units, dep-done→start p50 %.0f, p99 %.0f units\n",
				m.Dispatch, rep.Agents, m.WallUnits, m.P50Units, m.P99Units)
		}
		for _, r := range s.Runs {
			if r.ModelUnitMs > 0 {
				fmt.Printf("%s: %.3f ms per unit (its wall between the first lease and the last completion); the model's p50 at that speed %.1f ms, measured %.1f ms\n",
					r.Name, r.ModelUnitMs, r.ModelP50Ms, r.LatP50Ms)
			}
		}
		for _, r := range s.Runs {
			if len(r.AgentPhaseMs) > 0 {
				fmt.Printf("\n%s: agent phases, mean ms per task: %s\n", r.Name, phaseLine(r.AgentPhaseMs))
			}
			if len(r.ProcessCPU) > 0 {
				fmt.Printf("\n%s: CPU ms per task (all children %.3f): %s\n", r.Name, r.CPUMsPerTask, cpuLine(r.ProcessCPU))
			}
			if r.StartMs > 0 {
				fmt.Printf("\n%s: wall before the first lease %.0f ms (CreateTaskList %.0f, StartExecution %.0f), after the last completion %.0f ms\n",
					r.Name, r.StartMs, r.CreateMs, r.StartExecMs, r.EndMs)
			}
			if len(r.RPCsPerTask) > 0 {
				fmt.Printf("\n%s: RPCs served per task: %s\n", r.Name, rpcLine(r.RPCsPerTask))
			}
		}
	}
}

// wallList words walls in seconds, comma-separated.
func wallList(walls []float64) string {
	parts := make([]string, len(walls))
	for i, w := range walls {
		parts[i] = fmt.Sprintf("%.3f", w)
	}
	return strings.Join(parts, ", ")
}

// phaseOrder is the order of a task's phases in the agent (services/agent/worker/phases.go).
var phaseOrder = []string{"claim_heartbeat", "prime", "workspace", "execute", "validate", "finish", "cleanup", "complete"}

// phaseLine words the phases in their order, with their total.
func phaseLine(ms map[string]float64) string {
	var parts []string
	total := 0.0
	for _, p := range phaseOrder {
		if v, ok := ms[p]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f", p, v))
			total += v
		}
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; total %.2f", total)
}

// eagerVsStrict words, for each deployment that ran both modes, eager's wall time and latency
// as a ratio to strict's.
func eagerVsStrict(runs []side) []string {
	var out []string
	for _, strict := range runs {
		if strict.Dispatch != "strict" {
			continue
		}
		deployment := strings.TrimSuffix(strict.Name, ", strict")
		for _, eager := range runs {
			if eager.Dispatch == "eager" && strings.TrimSuffix(eager.Name, ", eager") == deployment && strict.WallS > 0 && strict.LatP50Ms > 0 {
				out = append(out, fmt.Sprintf("%s: eager / strict wall %.3f s / %.3f s = %.2f×; dep-done→start p50 %.1f / %.1f ms = %.2f×",
					deployment, eager.WallS, strict.WallS, eager.WallS/strict.WallS, eager.LatP50Ms, strict.LatP50Ms, eager.LatP50Ms/strict.LatP50Ms))
			}
		}
	}
	return out
}

// embedded runs the graph on `converge dev --in-memory`, with agent processes or, local, with
// converge dev's own local agents (--agents: its CPU then includes theirs, and its children's the
// task commands').
func embedded(g graph, o options, dispatch string, local bool) (r side, err error) {
	err = clustertest.Run(nil, func(tb clustertest.TB) error {
		addr, devMetrics := clustertest.FreeAddr(tb), clustertest.FreeAddr(tb)
		args := []string{"dev", "--in-memory", "--insecure-no-auth", "--listen", addr, "--log-level", "warn", "--metrics-listen", devMetrics}
		name := fmt.Sprintf("converge, embedded (SQLite), %d agent processes%s, %s", o.agents, prefetchSuffix(o), dispatch)
		if local {
			args = append(args, "--agents", strconv.Itoa(o.agents))
			name = fmt.Sprintf("converge, embedded (SQLite), %d local agents%s, %s", o.agents, prefetchSuffix(o), dispatch)
			if o.aheadOn {
				args = append(args, "--agent-prefetch")
			}
		}
		dev := clustertest.StartProcess(tb, clustertest.ProcessSpec{Name: "converge-dev", Bin: clustertest.Binary(tb, "converge"), Args: args})
		clustertest.WaitHealth(tb, dev, addr, "", healthpb.HealthCheckResponse_SERVING, 0)
		procs, metrics := []*clustertest.Process{dev}, []string{devMetrics}
		if !local {
			agents, am := startAgents(tb, o, addr, addr)
			procs, metrics = append(procs, agents...), am
		}
		rpcsBefore, cpuBefore := handledRPCs(devMetrics), processesCPU(procs)
		var cpuAfter []cpuSample
		var rpcsAfter map[string]float64
		r, err = execute(name, schedulerv1.NewSchedulerServiceClient(clustertest.Dial(tb, addr)), g, o, dispatch, procs,
			func() { cpuAfter, rpcsAfter = processesCPU(procs), handledRPCs(devMetrics) })
		if err == nil {
			r.ProcessCPU = cpuPerTask(cpuBefore, cpuAfter, len(g.deps))
			r.RPCsPerTask = rpcsPerTask(rpcsBefore, rpcsAfter, len(g.deps))
			r.AgentPhaseMs = agentPhases(metrics)
		}
		return err
	})
	return r, err
}

// withCPU runs a converge deployment (run) and sets its CPUMsPerTask from the CPU time of the
// child processes it started and waited for.
func withCPU(tasks int, run func() (side, error)) (side, error) {
	before := childrenCPU()
	r, err := run()
	if tasks > 0 {
		r.CPUMsPerTask = float64((childrenCPU() - before).Microseconds()) / 1000 / float64(tasks)
	}
	return r, err
}

// childrenCPU is the user + system time of this process's exited, waited-for children.
func childrenCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startAgents starts n converge-agent processes on the Scheduler and Registry addresses, each
// with its own metrics address (answered, for agentPhases).
func startAgents(tb clustertest.TB, o options, scheduler, registry string) ([]*clustertest.Process, []string) {
	work := tb.TempDir()
	var metrics []string
	var procs []*clustertest.Process
	for i := range o.agents {
		id := fmt.Sprintf("agent-%02d", i+1)
		m := clustertest.FreeAddr(tb)
		metrics = append(metrics, m)
		args := []string{"--listen", clustertest.FreeAddr(tb), "--scheduler", scheduler, "--registry", registry,
			"--instance-id", id, "--data-dir", filepath.Join(work, id), "--log-level", "warn", "--metrics-listen", m}
		if o.aheadOn {
			args = append(args, "--prefetch")
		}
		procs = append(procs, clustertest.StartProcess(tb, clustertest.ProcessSpec{Name: id, Bin: clustertest.Binary(tb, "converge-agent"), LogDir: work,
			Args: args}))
	}
	return procs, metrics
}

// prefetchSuffix names a run whose agents held one assignment ahead.
func prefetchSuffix(o options) string {
	if o.aheadOn {
		return ", prefetch"
	}
	return ""
}

// production runs it on separate Scheduler and Registry processes on a fresh database of the
// Postgres server and on Redis (platform/clustertest), with the agents.
func production(g graph, o options, dispatch string) (r side, err error) {
	err = clustertest.Run(nil, func(tb clustertest.TB) error {
		c := clustertest.Start(tb, clustertest.Options{Without: []string{"knowledge", "verifier"}, LogLevel: "warn",
			Postgres: clustertest.UsePostgres(tb, o.pgURL), Redis: clustertest.UseRedis(tb, o.redisURL)})
		schedAddr, regAddr := c.SchedulerAddr(0), c.RegistryAddr
		if o.agentLatency > 0 {
			sp, rp := clustertest.StartProxy(tb, schedAddr), clustertest.StartProxy(tb, regAddr)
			sp.SetLatency(o.agentLatency)
			rp.SetLatency(o.agentLatency)
			schedAddr, regAddr = sp.Addr, rp.Addr
		}
		agents, metrics := startAgents(tb, o, schedAddr, regAddr)
		procs := append([]*clustertest.Process{c.Scheduler(0), c.Service("registry")}, agents...)
		// The Postgres backends of the cluster's database (the Scheduler's and Registry's
		// connections), read from /proc as the processes are.
		mon, err := monitorBackends(c.PostgresURL)
		if err != nil {
			return err
		}
		defer mon.close()
		pgBefore := mon.sample()
		cpuBefore := processesCPU(procs)
		var cpuAfter []cpuSample
		var pgAfter map[int]time.Duration
		name := fmt.Sprintf("converge, Postgres + Redis, %d agents%s, %s", o.agents, prefetchSuffix(o), dispatch)
		if o.agentLatency > 0 {
			name = fmt.Sprintf("converge, Postgres + Redis, %d agents %s away%s, %s", o.agents, o.agentLatency, prefetchSuffix(o), dispatch)
		}
		r, err = execute(name, c.SchedulerClient(0), g, o, dispatch, procs,
			func() { cpuAfter = processesCPU(procs); pgAfter = mon.sample() })
		if err == nil {
			r.ProcessCPU = append(cpuPerTask(cpuBefore, cpuAfter, len(g.deps)), backendsPerTask(pgBefore, pgAfter, len(g.deps))...)
			r.AgentPhaseMs = agentPhases(metrics)
		}
		return err
	})
	return r, err
}

// execute creates and runs the list on the deployment's Scheduler and reads the figures from the
// log. The wall time runs from CreateTaskList to the execution's end, as ninja's includes parsing
// its file. atEnd, when set, is called as the execution has ended, before the log is read. A
// process of procs (the deployment's servers and agents) that exits before the end ends the run
// at once with its log's tail, instead of a wait for --timeout on work nobody can do.
func execute(name string, c schedulerv1.SchedulerServiceClient, g graph, o options, dispatch string, procs []*clustertest.Process, atEnd func()) (side, error) {
	ctx := context.Background()
	spec := &schedulerv1.TaskListSpec{Name: "dag " + g.shape}
	for i, ds := range g.deps {
		t := &commonv1.Task{Id: taskID(i), Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%04d", i)}
		for _, d := range ds {
			t.DependsOn = append(t.DependsOn, taskID(d))
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	start := time.Now()
	tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		return side{}, err
	}
	created := time.Now()
	ex, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(runMaxParallel(g, o)), Dispatch: dispatchModes[dispatch],
			AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10 * time.Second)}}})
	if err != nil {
		return side{}, err
	}
	startedExec := time.Now()
	id := ex.GetExecution().GetId()
	// The end is seen in the log, by a read of only the ending entry since the last poll; the
	// figures' entries are read after it and after atEnd's samples (waitEnd).
	wall, err := waitEnd(ctx, c, id, start, o.timeout, procs)
	if err != nil {
		_, _ = c.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: id})
		return side{}, err
	}
	if atEnd != nil {
		atEnd()
	}
	entries, err := clustertest.ExecutionLog(ctx, c, id)
	if err != nil {
		return side{}, err
	}
	res, err := c.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return side{}, err
	}
	e := res.GetExecution()
	r := side{Name: name, Dispatch: dispatch, Prefetch: o.aheadOn, WallS: wall.Seconds(), Outcome: strings.TrimPrefix(e.GetOutcome().String(), "OUTCOME_")}
	figures(&r, g, entries)
	r.CreateMs, r.StartExecMs = msf(created.Sub(start)), msf(startedExec.Sub(created))
	if first, last := edgeEntries(entries); !first.IsZero() {
		r.StartMs, r.EndMs = msf(first.Sub(start)), msf(start.Add(wall).Sub(last))
	}
	return r, nil
}
