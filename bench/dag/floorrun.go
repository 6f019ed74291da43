package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// runFloorPostgres is --floor --mode postgres: per round, one after the other, ninja on the
// fan-out, the real P1 Postgres run (the Scheduler, Registry and agent processes on a fresh
// database and Redis), the floor with processes (floorProcesses), and the floor's transactions
// alone from the agents' number of goroutines, grouped and not (P1b Postgres's floor). The
// floor's executions are made by the real Scheduler on one fresh database (its migrations, its
// StartExecution), which is then stopped: the floor's transactions run on its rows.
func runFloorPostgres(o options) (floorReport, error) {
	rounds := max(o.peerRounds, 1)
	rep := floorReport{Tasks: o.tasks, Cores: numCPU(), Time: time.Now().UTC(), Mode: "postgres"}
	if o.tasks > 1024 {
		return rep, fmt.Errorf("--floor --mode postgres runs one wave: at most 1024 tasks")
	}
	g := graph{shape: "fanout", deps: make([][]int, o.tasks), levels: 1}
	err := clustertest.Run(nil, func(tb clustertest.TB) error {
		ctx := context.Background()
		c := clustertest.Start(tb, clustertest.Options{Without: []string{"knowledge", "verifier"}, LogLevel: "warn",
			Postgres: clustertest.UsePostgres(tb, o.pgURL), Redis: clustertest.UseRedis(tb, o.redisURL)})
		const kinds = 3 // processes, grouped alone, ungrouped alone
		ids := make([][kinds]string, rounds)
		for r := range ids {
			for k := range kinds {
				id, err := startFanout(ctx, c.SchedulerClient(0), o.tasks)
				if err != nil {
					return err
				}
				ids[r][k] = id
			}
		}
		// The floor alone on the database: nothing else writes it.
		if err := c.Scheduler(0).Stop(); err != nil {
			tb.Logf("floor: stop the Scheduler: %v", err)
		}
		conn, err := pgx.Connect(ctx, c.PostgresURL)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.Background()) }()
		mon := backends{conn: conn}
		for r := 1; r <= rounds; r++ {
			ninja, err := measure(fmt.Sprintf("ninja -j %d", o.agents), r, o.tasks, func() error { _, err := peer("ninja", g, o.agents, 1); return err })
			if err != nil {
				return err
			}
			rep.Parts = append(rep.Parts, ninja)
			real, err := production(g, o, "strict")
			if err != nil {
				return fmt.Errorf("P1 Postgres: %w", err)
			}
			rep.Parts = append(rep.Parts, realPart(fmt.Sprintf("converge P1 Postgres (real): %d agents, Scheduler, Registry", o.agents), r, o.tasks, real))
			fp, err := floorProcesses(ctx, fmt.Sprintf("floor: %d agent processes, a Scheduler process, Postgres (spawn + 1 round trip + 1 grouped transaction)", o.agents),
				[]string{ids[r-1][0], "--postgres-url", c.PostgresURL}, o.agents, &mon)
			if err != nil {
				return err
			}
			fp.Round = r
			rep.Parts = append(rep.Parts, fp)
			for k, group := range []bool{true, false} {
				pp, err := floorPurePart(ctx, c.PostgresURL, ids[r-1][1+k], o.agents, group, mon)
				if err != nil {
					return err
				}
				pp.Round = r
				rep.Parts = append(rep.Parts, pp)
			}
		}
		rep.Fsync = pgTestFsync()
		return nil
	})
	return rep, err
}

// runFloorSQLite is --floor --mode sqlite: per round, one after the other, ninja on the fan-out,
// the real P1 embedded run with agent processes (converge dev --in-memory and --agents
// converge-agent processes, eager dispatch, as P1's row), and the embedded deployment's floor
// with processes (floorProcesses on a floor Scheduler with an in-memory SQLite database:
// floorsqlite.go). What P1 embedded with agent processes cannot go below in this design: each
// task's spawn, one round trip between two processes, one grouped SQLite transaction.
func runFloorSQLite(o options) (floorReport, error) {
	rounds := max(o.peerRounds, 1)
	rep := floorReport{Tasks: o.tasks, Cores: numCPU(), Time: time.Now().UTC(), Mode: "sqlite"}
	g := graph{shape: "fanout", deps: make([][]int, o.tasks), levels: 1}
	ctx := context.Background()
	for r := 1; r <= rounds; r++ {
		ninja, err := measure(fmt.Sprintf("ninja -j %d", o.agents), r, o.tasks, func() error { _, err := peer("ninja", g, o.agents, 1); return err })
		if err != nil {
			return rep, err
		}
		rep.Parts = append(rep.Parts, ninja)
		real, err := embedded(g, o, "eager", false)
		if err != nil {
			return rep, fmt.Errorf("P1 embedded: %w", err)
		}
		rep.Parts = append(rep.Parts, realPart(fmt.Sprintf("converge P1 embedded (real): %d agent processes, converge dev --in-memory", o.agents), r, o.tasks, real))
		fp, err := floorProcesses(ctx, fmt.Sprintf("floor: %d agent processes, a Scheduler process, SQLite in memory (spawn + 1 round trip + 1 grouped transaction)", o.agents),
			[]string{floorServeSQLite, "--tasks", strconv.Itoa(o.tasks)}, o.agents, nil)
		if err != nil {
			return rep, err
		}
		fp.Round = r
		rep.Parts = append(rep.Parts, fp)
	}
	return rep, nil
}

// realPart is a real converge run of round r (tasks tasks) as a floor report's part: its wall and
// its processes' CPU per task.
func realPart(name string, r, tasks int, real side) floorPart {
	p := floorPart{Name: name, Round: r, WallMs: real.WallS * 1000 / float64(tasks), Processes: real.ProcessCPU}
	for _, c := range real.ProcessCPU {
		p.CPUMs += c.SelfMs + c.ChildrenMs
	}
	return p
}

// startFanout creates and starts a fan-out of n no-op tasks (one wave) and answers its id.
func startFanout(ctx context.Context, c schedulerv1.SchedulerServiceClient, n int) (string, error) {
	spec := &schedulerv1.TaskListSpec{Name: "dag fanout"}
	for i := range n {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: taskID(i), Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%04d", i)})
	}
	tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		return "", err
	}
	ex, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(n), Dispatch: dispatchModes["strict"],
			AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10 * time.Second)}}})
	if err != nil {
		return "", err
	}
	return ex.GetExecution().GetId(), nil
}

// pgTestFsync runs pg_test_fsync (the newest /usr/lib/postgresql/*/bin, or PATH) for a second per
// method on a file in the temporary directory, and answers its lines of ops/s; nil when it is
// not found or fails.
func pgTestFsync() []string {
	bin, err := exec.LookPath("pg_test_fsync")
	if err != nil {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_test_fsync")
		if len(found) == 0 {
			return nil
		}
		slices.Sort(found)
		bin = found[len(found)-1]
	}
	dir, err := os.MkdirTemp("", "converge-fsync-")
	if err != nil {
		return nil
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-s", "1", "-f", filepath.Join(dir, "fsync")).Output()
	if err != nil {
		return []string{fmt.Sprintf("pg_test_fsync: %v", err)}
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	section := ""
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "Compare "):
			section = l
		case strings.Contains(l, "ops/sec") && (strings.HasPrefix(l, "fdatasync") || strings.HasPrefix(l, "fsync ") ||
			strings.HasPrefix(l, "open_datasync") || strings.HasPrefix(l, "write, fsync") || strings.HasPrefix(l, "fsync,")):
			lines = append(lines, strings.Join(strings.Fields(l), " ")+" ["+section+"]")
		}
	}
	return lines
}

// printFloorDeployment words --floor --mode postgres's and --mode sqlite's figures: a table per
// round, the processes' CPU per task, the medians beside ninja's.
func printFloorDeployment(rep floorReport) {
	deployment := "Postgres deployment"
	if rep.Mode == "sqlite" {
		deployment = "embedded deployment with agent processes"
	}
	fmt.Printf("\nfloor of a no-op task, %s: %d tasks, %d cores, %s\n\n", deployment, rep.Tasks, rep.Cores, rep.Time.Format(time.RFC3339))
	fmt.Println("| round | part | wall ms/task | CPU ms/task | by process (own + children) |\n|---|---|--:|--:|---|")
	for _, p := range rep.Parts {
		var by []string
		for _, c := range p.Processes {
			s := fmt.Sprintf("%s %.3f", c.Name, c.SelfMs)
			if c.ChildrenMs > 0 {
				s += fmt.Sprintf(" + commands %.3f", c.ChildrenMs)
			}
			by = append(by, s)
		}
		if p.Note != "" {
			by = append(by, p.Note)
		}
		fmt.Printf("| %d | %s | %.3f | %.3f | %s |\n", p.Round, p.Name, p.WallMs, p.CPUMs, strings.Join(by, "; "))
	}
	walls, cpus := map[string][]time.Duration{}, map[string][]time.Duration{}
	var names []string
	for _, p := range rep.Parts {
		if _, ok := walls[p.Name]; !ok {
			names = append(names, p.Name)
		}
		walls[p.Name] = append(walls[p.Name], time.Duration(p.WallMs*1e6))
		cpus[p.Name] = append(cpus[p.Name], time.Duration(p.CPUMs*1e6))
	}
	if len(names) == 0 {
		return
	}
	ninja := msf(pct(walls[names[0]], 50))
	fmt.Printf("\nmedians: %s wall %.3f ms per task (CPU %.3f)\n", names[0], ninja, msf(pct(cpus[names[0]], 50)))
	for _, n := range names[1:] {
		w := msf(pct(walls[n], 50))
		fmt.Printf("- %s: wall %.3f ms per task = %.2f× ninja, CPU %.3f ms per task\n", n, w, w/cmp.Or(ninja, 1), msf(pct(cpus[n], 50)))
	}
	if len(rep.Fsync) > 0 {
		fmt.Println("\npg_test_fsync (1 s per method, a file in the temporary directory):")
		for _, l := range rep.Fsync {
			fmt.Println("- " + l)
		}
	}
}

// floorMain runs the floor's modes: a floor process (--floor-serve, --floor-work) or --floor
// (embedded, or --mode postgres). It reports whether it ran one.
func floorMain(o options, floor bool, serve, work, instance string) bool {
	if !floor && serve == "" && work == "" {
		return false
	}
	var (
		rep floorReport
		err error
	)
	switch {
	case serve != "":
		err = floorServeMain(o.pgURL, serve, o.tasks)
	case work != "":
		err = floorWorkMain(work, instance)
	case o.mode == "postgres":
		rep, err = runFloorPostgres(o)
	case o.mode == "sqlite":
		rep, err = runFloorSQLite(o)
	default:
		rep, err = runFloor(o.tasks, max(o.peerRounds, 1), o.agents)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dag-bench: floor:", err)
		os.Exit(1)
	}
	switch {
	case !floor:
	case o.jsonOut:
		printJSON(rep)
	case rep.Mode == "postgres" || rep.Mode == "sqlite":
		printFloorDeployment(rep)
	default:
		printFloor(rep)
	}
	return true
}

// monitorBackends connects to the database at url to read its other backends' CPU.
func monitorBackends(url string) (backends, error) {
	conn, err := pgx.Connect(context.Background(), url)
	return backends{conn: conn}, err
}

func (b backends) close() { _ = b.conn.Close(context.Background()) }

// sample answers the backends' CPU by pid (nil when it cannot be read).
func (b backends) sample() map[int]time.Duration {
	m, err := b.cpu(context.Background())
	if err != nil {
		return nil
	}
	return m
}

// backendsPerTask is the "postgres backends" line of a run's CPU by process (none when a sample
// is missing).
func backendsPerTask(before, after map[int]time.Duration, tasks int) []processCPU {
	if before == nil || after == nil || tasks <= 0 {
		return nil
	}
	return []processCPU{{Name: "postgres backends", SelfMs: float64(since(before, after).Microseconds()) / 1000 / float64(tasks)}}
}
