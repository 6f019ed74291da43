package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The floor's processes (--floor --mode postgres, --floor --mode sqlite): bench/dag runs itself
// as a floor Scheduler (--floor-serve: a bare grpc.Server answering ClaimTask and CompleteTask
// with the floor's transaction, grouped, on Postgres or on an in-memory SQLite database) and as
// --agents floor agents (--floor-work: per task proc.Run of `sh -c true` as the agent spawns it,
// then one CompleteTask fused with the next claim), each its own process as in P1 Postgres and P1
// embedded with agent processes. The parent starts them, reads their CPU (and the Postgres
// backends') from /proc around the run, and tells them when to go and end over their stdin.

// floorStore is the floor Scheduler's transactions: floorTx (Postgres) or floorSQLite.
type floorStore interface {
	// do answers one request once its transaction committed.
	do(ctx context.Context, r *floorReq) floorAns
	// run commits the queued requests, one transaction at a time, until ctx ends.
	run(ctx context.Context)
	// ids answers the execution and its task list.
	ids() (execution, taskList string)
	// counts answers the transactions committed and the requests in them.
	counts() (txs, reqs int64)
	close()
}

// floorScheduler answers the floor agents' claims and completions.
type floorScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	f floorStore
}

// claimed shapes a floor answer as the Scheduler's claimed assignment (nil when none).
func (s *floorScheduler) claimed(a floorAns, instance string) *schedulerv1.ClaimedAssignment {
	if a.next == "" {
		return nil
	}
	now := timestamppb.Now()
	execution, taskList := s.f.ids()
	return &schedulerv1.ClaimedAssignment{
		Assignment: &schedulerv1.Assignment{Id: a.next, Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, ExecutionId: execution,
			WaveNumber: 1, TaskId: a.task, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED,
			InstanceId: instance, Attempt: 1, FencingToken: a.token, LeaseExpireTime: now, AssignTime: now},
		Task:         &commonv1.Task{Id: a.task, Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN},
		TaskListId:   taskList,
		TaskListName: "dag fanout",
		Options: &schedulerv1.ExecutionOptions{MaxParallel: 1000,
			AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10 * time.Second)}},
		HeartbeatInterval: durationpb.New(10 * time.Second), LeaseDuration: durationpb.New(30 * time.Second)}
}

func (s *floorScheduler) ClaimTask(ctx context.Context, req *schedulerv1.ClaimTaskRequest) (*schedulerv1.ClaimTaskResponse, error) {
	a := s.f.do(ctx, &floorReq{instance: req.GetInstanceId(), done: make(chan floorAns, 1)})
	if a.err != nil {
		return nil, a.err
	}
	return &schedulerv1.ClaimTaskResponse{Assignment: s.claimed(a, req.GetInstanceId())}, nil
}

func (s *floorScheduler) CompleteTask(ctx context.Context, req *schedulerv1.CompleteTaskRequest) (*schedulerv1.CompleteTaskResponse, error) {
	a := s.f.do(ctx, &floorReq{complete: req.GetAssignmentId(), token: req.GetFencingToken(), instance: req.GetInstanceId(), done: make(chan floorAns, 1)})
	if a.err != nil {
		return nil, a.err
	}
	execution, _ := s.f.ids()
	return &schedulerv1.CompleteTaskResponse{
		Assignment: &schedulerv1.Assignment{Id: req.GetAssignmentId(), ExecutionId: execution, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED,
			InstanceId: req.GetInstanceId(), FencingToken: req.GetFencingToken(), CompleteTime: timestamppb.Now()},
		Next: s.claimed(a, req.GetInstanceId())}, nil
}

// floorServeMain is --floor-serve: the floor Scheduler of one execution on Postgres at url, or
// with execution "sqlite" of a fan-out of tasks on an in-memory SQLite database it makes. It
// prints its address, serves until its stdin closes, then prints the transactions and requests
// it committed.
func floorServeMain(url, execution string, tasks int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		f   floorStore
		err error
	)
	if execution == floorServeSQLite {
		f, err = newFloorSQLite(ctx, tasks)
	} else {
		f, err = newFloorTx(ctx, url, execution, true)
	}
	if err != nil {
		return err
	}
	defer f.close()
	go f.run(ctx)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	schedulerv1.RegisterSchedulerServiceServer(srv, &floorScheduler{f: f})
	go func() { _ = srv.Serve(lis) }()
	fmt.Println(lis.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Stop()
	txs, reqs := f.counts()
	fmt.Println(txs, reqs)
	return nil
}

// floorServeSQLite is --floor-serve's execution for the SQLite floor store.
const floorServeSQLite = "sqlite"

// floorWorkMain is --floor-work: a floor agent. Connected, it prints "ready", waits for a line on
// its stdin, runs tasks until none is left, prints "done <tasks>" and exits when stdin closes.
func floorWorkMain(addr, instance string) error {
	spawn, closeSpawn, err := floorSpawn()
	if err != nil {
		return err
	}
	defer closeSpawn()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return fmt.Errorf("connect %s: %s", addr, s)
		}
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return err
	}
	c := schedulerv1.NewSchedulerServiceClient(conn)
	bg := context.Background()
	res, err := c.ClaimTask(bg, &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: []string{"command"}, SessionId: "session-" + instance})
	if err != nil {
		return err
	}
	next := res.GetAssignment()
	checkpoint, _ := structpb.NewStruct(map[string]any{"commit": "", "files": 1.0})
	n := 0
	for next != nil {
		if err := spawn(); err != nil {
			return err
		}
		a := next.GetAssignment()
		req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: instance, FencingToken: a.GetFencingToken(),
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1,
			Events: []*schedulerv1.AgentEvent{
				{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "Task " + a.GetTaskId() + ": true started by " + instance + " (attempt 1)", Time: timestamppb.Now()},
				{EventType: commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, Message: "checkpoint at ", Time: timestamppb.Now(), Context: checkpoint}},
			ClaimNext: &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: []string{"command"}, SessionId: "session-" + instance}}
		out, err := c.CompleteTask(bg, req)
		if err != nil {
			return err
		}
		n++
		next = out.GetNext()
	}
	fmt.Println("done", n)
	_, _ = io.Copy(io.Discard, in)
	return nil
}

// floorChild is a started floor process with its stdin and stdout.
type floorChild struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startFloorChild(args ...string) (*floorChild, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &floorChild{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

func (c *floorChild) line() (string, error) {
	s, err := c.out.ReadString('\n')
	return strings.TrimSpace(s), err
}

// end closes its stdin and waits for it.
func (c *floorChild) end() error {
	_ = c.in.Close()
	return c.cmd.Wait()
}

// backends is a monitor of the Postgres backends of one database (not its own).
type backends struct{ conn *pgx.Conn }

// cpu answers each backend's CPU so far (user + system, from /proc), by pid.
func (b backends) cpu(ctx context.Context) (map[int]time.Duration, error) {
	rows, err := b.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		if self, _, _, err := statCPU(int(pid)); err == nil {
			out[int(pid)] = self
		}
	}
	return out, nil
}

// since answers the backends' CPU between two samples: a backend not in before counts from 0
// (it connected since); one gone by after is not counted.
func since(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// floorProcesses runs one execution's tasks with a floor Scheduler process (started with
// serve, its --floor-serve arguments) and agents floor agents, and answers the part with each
// kind of process's CPU per task; mon reads the Postgres backends' (nil: SQLite, none).
func floorProcesses(ctx context.Context, name string, serve []string, agents int, mon *backends) (floorPart, error) {
	part := floorPart{Name: name}
	srv, err := startFloorChild(append([]string{"--floor-serve"}, serve...)...)
	if err != nil {
		return part, err
	}
	defer func() { _ = srv.cmd.Process.Kill() }()
	addr, err := srv.line()
	if err != nil {
		return part, fmt.Errorf("floor Scheduler: %w", err)
	}
	var workers []*floorChild
	defer func() {
		for _, w := range workers {
			_ = w.cmd.Process.Kill()
		}
	}()
	for i := range agents {
		w, err := startFloorChild("--floor-work", addr, "--floor-instance", fmt.Sprintf("agent-%02d", i+1))
		if err != nil {
			return part, err
		}
		workers = append(workers, w)
		if s, err := w.line(); err != nil || s != "ready" {
			return part, fmt.Errorf("floor agent: %q %v", s, err)
		}
	}
	sample := func() (srvCPU cpuSample, agentCPU cpuSample, pg map[int]time.Duration, err error) {
		srvCPU.self, srvCPU.sys, _, _ = statCPU(srv.cmd.Process.Pid)
		for _, w := range workers {
			self, sys, children, _ := statCPU(w.cmd.Process.Pid)
			agentCPU.self, agentCPU.sys, agentCPU.children = agentCPU.self+self, agentCPU.sys+sys, agentCPU.children+children
		}
		if mon != nil {
			pg, err = mon.cpu(ctx)
		}
		return srvCPU, agentCPU, pg, err
	}
	s0, a0, pg0, err := sample()
	if err != nil {
		return part, err
	}
	start := time.Now()
	for _, w := range workers {
		if _, err := io.WriteString(w.in, "go\n"); err != nil {
			return part, err
		}
	}
	tasks := 0
	for _, w := range workers {
		s, err := w.line()
		var n int
		if _, perr := fmt.Sscanf(s, "done %d", &n); err != nil || perr != nil {
			return part, fmt.Errorf("floor agent: %q %v", s, err)
		}
		tasks += n
	}
	wall := time.Since(start)
	s1, a1, pg1, err := sample()
	if err != nil {
		return part, err
	}
	for _, w := range workers {
		if err := w.end(); err != nil {
			return part, fmt.Errorf("floor agent: %w", err)
		}
	}
	workers = nil
	_ = srv.in.Close()
	stats, _ := srv.line()
	if err := srv.end(); err != nil {
		return part, fmt.Errorf("floor Scheduler: %w", err)
	}
	if tasks == 0 {
		return part, fmt.Errorf("floor: no task ran")
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(tasks) }
	part.Processes = []processCPU{
		{Name: "floor Scheduler", SelfMs: per(s1.self - s0.self), SelfSysMs: per(s1.sys - s0.sys)},
		{Name: "floor agents", SelfMs: per(a1.self - a0.self), SelfSysMs: per(a1.sys - a0.sys), ChildrenMs: per(a1.children - a0.children)},
	}
	if mon != nil {
		part.Processes = append(part.Processes, processCPU{Name: "postgres backends", SelfMs: per(since(pg0, pg1))})
	}
	for _, p := range part.Processes {
		part.CPUMs += p.SelfMs + p.ChildrenMs
	}
	part.WallMs, part.Tasks = per(wall), tasks
	var txs, reqs int64
	if _, err := fmt.Sscanf(stats, "%d %d", &txs, &reqs); err == nil && txs > 0 {
		part.Note = fmt.Sprintf("%d transactions for %d requests (%.2f per commit)", txs, reqs, float64(reqs)/float64(txs))
	}
	return part, nil
}

// floorPureParts runs an execution's tasks from callers goroutines of this process with no
// command and no gRPC (P1b Postgres's floor: its in-process agents' store transactions), and
// answers the part with this process's and the backends' CPU per task.
func floorPurePart(ctx context.Context, url, execution string, callers int, group bool, mon backends) (floorPart, error) {
	how := "each on its own connection, a transaction per request"
	if group {
		how = "grouped on one connection"
	}
	part := floorPart{Name: fmt.Sprintf("Postgres transactions alone, %d callers in one process, %s", callers, how)}
	fs, err := floorConns(ctx, url, execution, callers, group)
	if err != nil {
		return part, err
	}
	defer closeFloorConns(fs)
	pg0, err := mon.cpu(ctx)
	if err != nil {
		return part, err
	}
	s0, _ := usage()
	start := time.Now()
	txs, err := floorPure(ctx, fs, callers)
	if err != nil {
		return part, err
	}
	wall := time.Since(start)
	s1, _ := usage()
	pg1, err := mon.cpu(ctx)
	if err != nil {
		return part, err
	}
	var tasks int
	if err := mon.conn.QueryRow(ctx, `SELECT count(*) FROM wave_task_assignments WHERE execution_id = $1 AND status = 'completed'`, execution).Scan(&tasks); err != nil {
		return part, err
	}
	if tasks == 0 {
		return part, fmt.Errorf("floor: no task completed")
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(tasks) }
	part.Processes = []processCPU{{Name: "bench/dag (callers)", SelfMs: per(s1 - s0)}, {Name: "postgres backends", SelfMs: per(since(pg0, pg1))}}
	for _, p := range part.Processes {
		part.CPUMs += p.SelfMs
	}
	part.SelfMs, part.WallMs, part.Tasks = per(s1-s0), per(wall), tasks
	part.Note = fmt.Sprintf("%d transactions (%.2f requests per commit)", txs, float64(tasks+callers)/float64(max(txs, 1)))
	return part, nil
}
