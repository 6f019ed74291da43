// Command fanout measures the Scheduler and its agents on a fan-out: one wave of N independent
// tasks whose command is `true`, run by K agent processes, on the embedded default (`converge dev
// --in-memory`: SQLite and in-process locks) and on the production deployment (one process per
// service on Postgres and Redis), side by side in one run.
//
// It reports, from the execution log (store times): claim→start latency (LEASE_GRANTED → the
// agent's TASK_STARTED) p50/p99, completion→next-claim gap per agent, and tasks per second from
// the first lease to the last completion, plus the wall time of the whole run.
//
//	cd bench/fanout && go run . --tasks 1000 --agents 4
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

func main() {
	tasks := flag.Int("tasks", 1000, "tasks in the fan-out")
	agents := flag.Int("agents", 4, "agent processes")
	mode := flag.String("mode", "both", "embedded, postgres or both")
	pgURL := flag.String("postgres-url", envOr("CONVERGE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres server (a fresh database is made and dropped)")
	redisURL := flag.String("redis-url", envOr("CONVERGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis")
	flag.Parse()
	if err := run(*tasks, *agents, *mode, *pgURL, *redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// result is one deployment's figures.
type result struct {
	name                string
	wall                time.Duration
	p50, p99, max       time.Duration
	gapP50, gapP99      time.Duration
	tasksPerSecond      float64
	outcome             string
	completed, requeued int
}

func run(tasks, agents int, mode, pgURL, redisURL string) error {
	bin, err := os.MkdirTemp("", "converge-fanout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	for name, pkg := range map[string]string{
		"converge": "github.com/converge-dev/converge/cmd/converge", "converge-scheduler": "github.com/converge-dev/converge/services/scheduler/cmd/scheduler",
		"converge-registry": "github.com/converge-dev/converge/services/registry/cmd/registry", "converge-agent": "github.com/converge-dev/converge/services/agent/cmd/agent",
	} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	var results []result
	if mode == "embedded" || mode == "both" {
		r, err := embedded(bin, tasks, agents)
		if err != nil {
			return fmt.Errorf("embedded: %w", err)
		}
		results = append(results, r)
	}
	if mode == "postgres" || mode == "both" {
		r, err := production(bin, tasks, agents, pgURL, redisURL)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		results = append(results, r)
	}
	fmt.Printf("\n%d-task fan-out of `true`, %d agent processes, %d cores (%s/%s), %s\n\n", tasks, agents, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| deployment | outcome | wall | tasks/s | claim→start p50 | p99 | max | complete→next claim p50 | p99 |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %s | %s | %.2f s | %.1f | %s | %s | %s | %s | %s |\n", r.name, r.outcome, r.wall.Seconds(), r.tasksPerSecond,
			ms(r.p50), ms(r.p99), ms(r.max), ms(r.gapP50), ms(r.gapP99))
	}
	if len(results) == 2 && results[0].tasksPerSecond > 0 {
		fmt.Printf("\nratio postgres/embedded: tasks/s %.2f, claim→start p50 %.2f, p99 %.2f\n", results[1].tasksPerSecond/results[0].tasksPerSecond,
			float64(results[1].p50)/float64(max(results[0].p50, 1)), float64(results[1].p99)/float64(max(results[0].p99, 1)))
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// proc is a started process.
type proc struct{ cmd *exec.Cmd }

func startProc(bin string, env []string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.CreateTemp("", filepath.Base(bin)+"-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{cmd: cmd}, nil
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

func freeAddr() string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

func waitServing(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s never became SERVING", addr)
}

// embedded runs the fan-out on `converge dev --in-memory` with agent processes.
func embedded(bin string, tasks, agents int) (result, error) {
	addr := freeAddr()
	dev, err := startProc(filepath.Join(bin, "converge"), nil, "dev", "--in-memory", "--listen", addr, "--log-level", "warn")
	if err != nil {
		return result{}, err
	}
	defer dev.stop()
	if err := waitServing(addr); err != nil {
		return result{}, err
	}
	return fanout("embedded (converge dev, SQLite)", bin, addr, addr, nil, tasks, agents)
}

// production runs it on separate Scheduler and Registry processes on Postgres and Redis.
func production(bin string, tasks, agents int, pgURL, redisURL string) (result, error) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return result{}, err
	}
	defer admin.Close(ctx)
	var b [4]byte
	_, _ = rand.Read(b[:])
	db := "converge_fanout_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return result{}, err
	}
	defer func() { _, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") }()
	i := strings.LastIndex(pgURL, "/")
	q := ""
	if j := strings.Index(pgURL[i:], "?"); j >= 0 {
		q = pgURL[i+j:]
	}
	url := pgURL[:i+1] + db + q
	env := []string{"CONVERGE_POSTGRES_URL=" + url, "CONVERGE_REDIS_URL=" + redisURL, "CONVERGE_MIGRATE=true", "CONVERGE_LOG_LEVEL=warn"}
	sched, reg := freeAddr(), freeAddr()
	for _, s := range []struct{ bin, addr string }{{"converge-scheduler", sched}, {"converge-registry", reg}} {
		p, err := startProc(filepath.Join(bin, s.bin), env, "--listen", s.addr)
		if err != nil {
			return result{}, err
		}
		defer p.stop()
		if err := waitServing(s.addr); err != nil {
			return result{}, err
		}
	}
	return fanout("production (Postgres + Redis)", bin, sched, reg, env, tasks, agents)
}

// fanout starts the agents, runs the list and reads the figures from the log.
func fanout(name, bin, sched, reg string, env []string, tasks, agents int) (result, error) {
	ctx := context.Background()
	dataDir, err := os.MkdirTemp("", "converge-fanout-agents-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dataDir)
	for i := range agents {
		id := fmt.Sprintf("bench-agent-%d", i+1)
		p, err := startProc(filepath.Join(bin, "converge-agent"), env, "--listen", freeAddr(), "--scheduler", sched, "--registry", reg,
			"--instance-id", id, "--data-dir", filepath.Join(dataDir, id), "--log-level", "warn")
		if err != nil {
			return result{}, err
		}
		defer p.stop()
	}
	conn, err := grpc.NewClient(sched, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	c := schedulerv1.NewSchedulerServiceClient(conn)
	spec := &schedulerv1.TaskListSpec{Name: "fan-out"}
	for i := range tasks {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprintf("t%04d", i), Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN,
			File: fmt.Sprintf("out/%04d", i)})
	}
	tl, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	ex, err := c.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(min(tasks, 1024)), AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10 * time.Second)}}})
	if err != nil {
		return result{}, err
	}
	id := ex.GetExecution().GetId()
	var e *schedulerv1.Execution
	for {
		res, err := c.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		if err != nil {
			return result{}, err
		}
		e = res.GetExecution()
		if s := e.GetStatus(); s == schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED || s == schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED || s == schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED {
			break
		}
		if time.Since(start) > 30*time.Minute {
			return result{}, fmt.Errorf("execution %s did not end in 30 minutes", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wall := time.Since(start)
	var entries []*commonv1.LogEntry
	for after := int64(0); ; {
		res, err := c.GetExecutionLog(ctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: id, AfterSeq: after, Limit: 500})
		if err != nil {
			return result{}, err
		}
		entries = append(entries, res.GetEntries()...)
		if !res.GetHasMore() {
			break
		}
		after = entries[len(entries)-1].GetSeq()
	}
	granted := map[string]time.Time{}
	lastDone := map[string]time.Time{} // instance → its last completion
	var lat, gaps []time.Duration
	var first, last time.Time
	r := result{name: name, wall: wall, outcome: strings.TrimPrefix(e.GetOutcome().String(), "OUTCOME_")}
	for _, en := range entries {
		at := en.GetTime().AsTime()
		switch en.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_LEASE_GRANTED:
			if en.GetTaskId() == "" {
				continue
			}
			granted[en.GetTaskId()] = at
			if first.IsZero() {
				first = at
			}
			if d, ok := lastDone[en.GetInstanceId()]; ok {
				gaps = append(gaps, at.Sub(d))
			}
		case commonv1.EventType_EVENT_TYPE_TASK_STARTED:
			if g, ok := granted[en.GetTaskId()]; ok {
				lat = append(lat, at.Sub(g))
			}
		case commonv1.EventType_EVENT_TYPE_TASK_COMPLETED:
			last = at
			r.completed++
			lastDone[en.GetInstanceId()] = at
		case commonv1.EventType_EVENT_TYPE_TASK_REQUEUED:
			r.requeued++
		}
	}
	r.p50, r.p99, r.max = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	r.gapP50, r.gapP99 = pct(gaps, 50), pct(gaps, 99)
	if span := last.Sub(first); span > 0 {
		r.tasksPerSecond = float64(r.completed) / span.Seconds()
	}
	return r, nil
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}
