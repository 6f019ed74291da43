package main

// The load run: a production-shaped deployment (one process per service on a private Postgres
// database and Redis, N agent processes), one execution of short `true` tasks, and S
// WatchExecution streams from cursor 0 held over C client connections for the whole run.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// config is one load run.
type config struct {
	Streams int    // WatchExecution streams
	Batch   int    // max_entries_per_message of each stream (0 or 1: one entry per message)
	Conns   int    // client connections the streams are spread over
	Decode  string // decodeSeq: each entry's seq and time only; decodeFull: every entry
	Agents  int    // converge-agent processes
	Tasks   int    // tasks of the execution, each `true`
	Width   int    // tasks per layer: task i depends on task i-Width (Tasks/Width waves)

	PostgresURL string // server; a private database is made and dropped
	RedisURL    string
	BinDir      string // prebuilt binaries; "" builds them into a temporary directory
	Timeout     time.Duration
	Logf        func(format string, args ...any)
}

// result is what a run measured.
type result struct {
	Config  config
	Outcome string
	Events  int           // entries in the execution's log
	Wall    time.Duration // ResumeExecution (after the streams were open) → the execution's end_time

	// Streams that saw exactly the log's seqs 1..Events in order, no gap, no duplicate.
	StreamsExact int
	StreamErrors []string // the others, one line each (the first few)
	Delivered    int64    // entries received over every stream
	Messages     int64    // messages with entries received over every stream

	// Delivery latency: the entry's store time → received by a stream, over every stream, for the
	// entries written after the streams were open.
	LatP50, LatP99, LatMax time.Duration
	LatSamples             int

	// The Scheduler process: VmRSS before the streams opened, VmHWM (peak RSS) at the end, and the
	// Go heap in use (go_memstats_heap_inuse_bytes, sampled every 250 ms) before and at its peak.
	SchedRSSIdleKB, SchedRSSPeakKB int64
	SchedHeapIdle, SchedHeapPeak   int64
	AgentRSSTotalKB                int64 // every agent's VmHWM summed
	// CPU from the resume until every stream closed: the Scheduler process's, and this process's
	// (the streams' client side: receiving and decoding).
	SchedCPU, ClientCPU time.Duration
	StreamsOpen         time.Duration
}

func (c *config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// procCPU answers the CPU (user + system) process pid has used, from /proc/<pid>/stat; 0 when it
// cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command (field 2) may hold spaces: the fields after it follow the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ is 100 on Linux
}

// procStatusKB answers a field of /proc/<pid>/status in kB (VmRSS, VmHWM).
func procStatusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// heapInuse scrapes go_memstats_heap_inuse_bytes from a Prometheus endpoint.
func heapInuse(metricsAddr string) int64 {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int64(f)
		}
	}
	return 0
}

// openWatch opens a WatchExecution stream and answers its receive: the entries of the next
// message (none for a keep-alive or an execution snapshot), io.EOF at its end. decode "seq" reads
// each entry's seq and time only (lite.go), "full" every entry into the generated types.
func openWatch(ctx context.Context, cc *grpc.ClientConn, req *schedulerv1.WatchExecutionRequest, decode string) (func() ([]liteEntry, error), error) {
	if decode == decodeFull {
		stream, err := schedulerv1.NewSchedulerServiceClient(cc).WatchExecution(ctx, req)
		if err != nil {
			return nil, err
		}
		var out []liteEntry
		return func() ([]liteEntry, error) {
			msg, err := stream.Recv()
			if err != nil {
				return nil, err
			}
			out = out[:0]
			for _, en := range msg.GetEntries() {
				out = append(out, liteEntry{seq: en.GetSeq(), at: en.GetTime().AsTime()})
			}
			if en := msg.GetEntry(); en != nil {
				out = append(out, liteEntry{seq: en.GetSeq(), at: en.GetTime().AsTime()})
			}
			return out, nil
		}, nil
	}
	stream, err := liteWatch(ctx, cc, req)
	if err != nil {
		return nil, err
	}
	var msg liteMessage
	return func() ([]liteEntry, error) {
		if err := stream.RecvMsg(&msg); err != nil {
			return nil, err
		}
		return msg.entries, nil
	}, nil
}

// The streams' decodes (config.Decode).
const (
	decodeSeq  = "seq"
	decodeFull = "full"
)

// streamResult is what one WatchExecution stream saw.
type streamResult struct {
	seqs []int64
	lat  []time.Duration // entries written after liveFrom
	err  error
}

func taskID(i int) string { return fmt.Sprintf("t%04d", i) }

// run deploys, runs the execution under the streams and measures.
func run(ctx context.Context, cfg config) (res result, err error) {
	res.Config = cfg
	if cfg.Conns <= 0 {
		cfg.Conns = 1
	}
	if cfg.Width <= 0 {
		cfg.Width = cfg.Tasks
	}
	logs, err := os.MkdirTemp("", "converge-load-logs-")
	if err != nil {
		return res, err
	}
	defer func() {
		if err != nil {
			cfg.logf("process logs kept in %s", logs)
			return
		}
		_ = os.RemoveAll(logs)
	}()
	if cfg.BinDir != "" {
		if err := os.Setenv(clustertest.EnvBinDir, cfg.BinDir); err != nil {
			return res, err
		}
	}
	defer clustertest.RemoveBinaries()
	err = clustertest.Run(cfg.Logf, func(tb clustertest.TB) error {
		var err error
		res, err = measure(ctx, tb, cfg, logs)
		return err
	})
	return res, err
}

// measure starts the deployment (platform/clustertest) and runs the execution under the streams.
func measure(ctx context.Context, tb clustertest.TB, cfg config, logs string) (res result, err error) {
	res.Config = cfg
	cfg.logf("starting registry, knowledge, verifier, scheduler and %d agents", cfg.Agents)
	metrics := clustertest.FreeAddr(tb)
	c := clustertest.Start(tb, clustertest.Options{Agents: cfg.Agents, LogLevel: "warn", LogDir: logs, Grace: 30 * time.Second,
		Postgres: clustertest.UsePostgres(tb, cfg.PostgresURL), Redis: clustertest.UseRedis(tb, cfg.RedisURL),
		// The streams all come from this one client (one principal): the per-principal quota on
		// open streams (256 by default) is raised above them, as for an operator's dashboard.
		SchedulerArgs: []string{"--metrics-listen", metrics, "--max-streams-per-principal", fmt.Sprint(cfg.Streams + 256)}})
	cfg.logf("deployed on database %s", c.Database)
	schedAddr, sched := c.SchedulerAddr(0), c.Scheduler(0)

	conns := make([]*grpc.ClientConn, cfg.Conns)
	for i := range conns {
		if conns[i], err = grpc.NewClient(schedAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return res, err
		}
		defer conns[i].Close()
	}
	client := schedulerv1.NewSchedulerServiceClient(conns[0])

	// The Scheduler's memory and heap, sampled from now on.
	res.SchedRSSIdleKB = procStatusKB(sched.Pid(), "VmRSS")
	res.SchedHeapIdle = heapInuse(metrics)
	var heapPeak atomic.Int64
	heapPeak.Store(res.SchedHeapIdle)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
				if h := heapInuse(metrics); h > heapPeak.Load() {
					heapPeak.Store(h)
				}
			}
		}
	}()
	defer func() { stopSampling(); <-sampled }()

	spec := &schedulerv1.TaskListSpec{Name: fmt.Sprintf("load: %d tasks", cfg.Tasks)}
	for i := range cfg.Tasks {
		t := &commonv1.Task{Id: taskID(i), Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%04d", i)}
		if i >= cfg.Width {
			t.DependsOn = []string{taskID(i - cfg.Width)}
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	tl, err := client.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	if err != nil {
		return res, fmt.Errorf("CreateTaskList: %w", err)
	}
	// Started and paused at once: the streams open (and replay the first entries) while nothing
	// runs, so that the latency is measured on live entries with every stream listening.
	ex, err := client.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{MaxParallel: int32(min(cfg.Tasks, 1024)), AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10 * time.Second)}}})
	if err != nil {
		return res, fmt.Errorf("StartExecution: %w", err)
	}
	id := ex.GetExecution().GetId()
	if _, err := client.PauseExecution(ctx, &schedulerv1.PauseExecutionRequest{ExecutionId: id, Reason: "load: opening the streams"}); err != nil {
		return res, fmt.Errorf("PauseExecution: %w", err)
	}

	cfg.logf("opening %d WatchExecution streams over %d connections on %s", cfg.Streams, cfg.Conns, id)
	var liveFrom atomic.Int64 // unix nanos; 0 until resumed
	results := make([]streamResult, cfg.Streams)
	var opened, delivered, messages atomic.Int64
	allOpen := make(chan struct{})
	var wg sync.WaitGroup
	watchCtx, cancelWatch := context.WithTimeout(ctx, cfg.Timeout)
	defer cancelWatch()
	openStart := time.Now()
	if cfg.Streams == 0 {
		close(allOpen) // a baseline run without streams
	}
	for i := range cfg.Streams {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := &results[i]
			recv, err := openWatch(watchCtx, conns[i%len(conns)], &schedulerv1.WatchExecutionRequest{ExecutionId: id, MaxEntriesPerMessage: int32(cfg.Batch)}, cfg.Decode)
			if err != nil {
				r.err = err
				if opened.Add(1) == int64(cfg.Streams) {
					close(allOpen)
				}
				return
			}
			first := true
			for {
				entries, err := recv()
				now := time.Now()
				if first {
					first = false
					if opened.Add(1) == int64(cfg.Streams) {
						close(allOpen)
					}
				}
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					r.err = err
					return
				}
				if len(entries) == 0 {
					continue // keep-alive
				}
				messages.Add(1)
				for _, en := range entries {
					delivered.Add(1)
					r.seqs = append(r.seqs, en.seq)
					if lf := liveFrom.Load(); lf != 0 && en.at.UnixNano() >= lf {
						r.lat = append(r.lat, now.Sub(en.at))
					}
				}
			}
		}(i)
	}
	select {
	case <-allOpen:
	case <-watchCtx.Done():
		return res, fmt.Errorf("the streams did not open: %w", watchCtx.Err())
	}
	res.StreamsOpen = time.Since(openStart)
	cfg.logf("streams open in %s; resuming", res.StreamsOpen.Round(time.Millisecond))

	start := time.Now()
	schedCPU0, clientCPU0 := procCPU(sched.Pid()), procCPU(os.Getpid())
	liveFrom.Store(start.UnixNano())
	if _, err := client.ResumeExecution(ctx, &schedulerv1.ResumeExecutionRequest{ExecutionId: id, Reason: "load: streams open"}); err != nil {
		return res, fmt.Errorf("ResumeExecution: %w", err)
	}
	var e *schedulerv1.Execution
	lastReport := time.Now()
	for {
		g, err := client.GetExecution(watchCtx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		if err != nil {
			return res, fmt.Errorf("GetExecution: %w", err)
		}
		e = g.GetExecution()
		if clustertest.Ended(e) {
			break
		}
		if time.Since(lastReport) > 10*time.Second {
			cfg.logf("  %s: %d/%d tasks completed, %d entries delivered", time.Since(start).Round(time.Second), e.GetCompletedTasks(), cfg.Tasks, delivered.Load())
			lastReport = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.Wall = time.Since(start)
	// The wall ends when the execution did (its end_time, the store's clock on this host), not
	// at the poll that saw it: polling every 100 ms put every wall on a 100 ms grid, a tenth of
	// a 300-task run.
	if end := e.GetEndTime(); end != nil && end.AsTime().After(start) && end.AsTime().Before(time.Now()) {
		res.Wall = end.AsTime().Sub(start)
	}
	res.Outcome = strings.TrimPrefix(e.GetOutcome().String(), "OUTCOME_")
	cfg.logf("execution ended %s (%s) in %s; waiting for the streams to close", res.Outcome, e.GetStatusMessage(), res.Wall.Round(time.Millisecond))
	wg.Wait() // each stream closes with OK after the last entry
	res.SchedCPU, res.ClientCPU = procCPU(sched.Pid())-schedCPU0, procCPU(os.Getpid())-clientCPU0
	res.Delivered, res.Messages = delivered.Load(), messages.Load()

	entries, err := clustertest.ExecutionLog(ctx, client, id)
	if err != nil {
		return res, fmt.Errorf("GetExecutionLog: %w", err)
	}
	seqs := make([]int64, 0, len(entries))
	for _, en := range entries {
		seqs = append(seqs, en.GetSeq())
	}
	res.Events = len(seqs)
	var lat []time.Duration
	for i, r := range results {
		lat = append(lat, r.lat...)
		switch {
		case r.err != nil:
			res.StreamErrors = append(res.StreamErrors, fmt.Sprintf("stream %d: %v (after %d entries)", i, r.err, len(r.seqs)))
		case !slices.Equal(r.seqs, seqs):
			res.StreamErrors = append(res.StreamErrors, fmt.Sprintf("stream %d: %s", i, diffSeqs(r.seqs, seqs)))
		default:
			res.StreamsExact++
		}
	}
	if len(res.StreamErrors) > 10 {
		res.StreamErrors = append(res.StreamErrors[:10], fmt.Sprintf("… and %d more", len(res.StreamErrors)-10))
	}
	slices.Sort(lat)
	res.LatSamples = len(lat)
	if len(lat) > 0 {
		res.LatP50, res.LatP99, res.LatMax = lat[len(lat)*50/100], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	res.SchedRSSPeakKB = procStatusKB(sched.Pid(), "VmHWM")
	res.SchedHeapPeak = max(heapPeak.Load(), heapInuse(metrics))
	for _, id := range c.Agents() {
		res.AgentRSSTotalKB += procStatusKB(c.Agent(id).Pid(), "VmHWM")
	}
	// A command DAG without a repository has nothing for Verify Done to check: CONVERGED_PENDING_HUMAN.
	if !strings.HasPrefix(res.Outcome, "CONVERGED") {
		err = fmt.Errorf("execution %s ended %s: %s", id, res.Outcome, e.GetStatusMessage())
	}
	return res, err
}

// diffSeqs says how a stream's seqs differ from the log's.
func diffSeqs(got, want []int64) string {
	seen := map[int64]int{}
	for _, s := range got {
		seen[s]++
	}
	var missing, dup int
	for _, s := range want {
		if seen[s] == 0 {
			missing++
		}
	}
	for _, n := range seen {
		if n > 1 {
			dup += n - 1
		}
	}
	out := fmt.Sprintf("%d entries, want %d: %d missing, %d duplicated", len(got), len(want), missing, dup)
	if !slices.IsSorted(got) {
		out += ", out of order"
	}
	return out
}
