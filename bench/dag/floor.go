package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/proc"
)

// The floor of this design for a no-op task (--floor, issue 17): what each task must cost at
// least, measured on this machine beside ninja in one sitting, rounds alternated. Per task the
// design needs the command's fork+exec (proc.Run of `sh -c true` with the agent's group record
// and a pooled run cgroup), one fused CompleteTask round trip (here on a bare grpc.Server: no
// interceptors, no validation, a canned answer, client and server in this process over loopback
// TCP) and one SQLite write transaction (in memory: an INSERT of a log row and an UPDATE of an
// assignment row, then COMMIT). Each part reports CPU per task (getrusage of this process and of
// its children) and wall per task, run one at a time; on 2 cores the CPU sum over 2 is the wall a
// CPU-bound run cannot go below.

// floorPart is one part's figures per task.
type floorPart struct {
	Name   string  `json:"name"`
	Round  int     `json:"round"`
	CPUMs  float64 `json:"cpu_ms_per_task"` // this process + children, user + system
	SelfMs float64 `json:"self_ms_per_task"`
	WallMs float64 `json:"wall_ms_per_task"`
	// Tasks is the part's tasks when they are not the report's (the Postgres parts count those
	// that ran); Processes its CPU per task by process (the Postgres parts); Note what else it
	// counted (transactions per commit).
	Tasks     int          `json:"tasks,omitempty"`
	Processes []processCPU `json:"processes,omitempty"`
	Note      string       `json:"note,omitempty"`
}

// floorReport is --floor's answer.
type floorReport struct {
	Tasks int         `json:"tasks"`
	Cores int         `json:"cores"`
	Time  time.Time   `json:"time"`
	Parts []floorPart `json:"parts"`
	// Mode is "embedded" (the parts sum to a task's floor) or "postgres" (each floor part is a
	// whole run of the deployment's floor, beside ninja and the real P1 Postgres run).
	Mode string `json:"mode,omitempty"`
	// Fsync is pg_test_fsync's figures on this machine's disk (postgres mode, when found).
	Fsync []string `json:"fsync,omitempty"`
}

// usage is this process's and its waited-for children's CPU so far.
func usage() (self, children time.Duration) {
	var s, c syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c)
	t := func(r syscall.Rusage) time.Duration { return time.Duration(r.Utime.Nano() + r.Stime.Nano()) }
	return t(s), t(c)
}

// measure runs fn (n tasks' worth) and answers its CPU and wall per task.
func measure(name string, round, n int, fn func() error) (floorPart, error) {
	s0, c0 := usage()
	start := time.Now()
	if err := fn(); err != nil {
		return floorPart{}, fmt.Errorf("%s: %w", name, err)
	}
	wall := time.Since(start)
	s1, c1 := usage()
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	return floorPart{Name: name, Round: round, CPUMs: per(s1 - s0 + c1 - c0), SelfMs: per(s1 - s0), WallMs: per(wall)}, nil
}

func runFloor(tasks, rounds, jobs int) (floorReport, error) {
	rep := floorReport{Tasks: tasks, Cores: numCPU(), Time: time.Now().UTC()}
	g := graph{shape: "fanout", deps: make([][]int, tasks), levels: 1}
	spawn, closeSpawn, err := floorSpawn()
	if err != nil {
		return rep, err
	}
	defer closeSpawn()
	rpc, closeRPC, err := floorRPC()
	if err != nil {
		return rep, err
	}
	defer closeRPC()
	commit, closeCommit, err := floorCommit()
	if err != nil {
		return rep, err
	}
	defer closeCommit()
	parts := []struct {
		name string
		fn   func() error
	}{
		{fmt.Sprintf("ninja -j %d", jobs), func() error { _, err := peer("ninja", g, jobs, 1); return err }},
		{"spawn: proc.Run sh -c true, pooled cgroup", func() error { return repeat(tasks, spawn) }},
		{"CompleteTask round trip, bare gRPC", func() error { return repeat(tasks, rpc) }},
		{"SQLite write transaction, in memory", func() error { return repeat(tasks, commit) }},
	}
	for r := 1; r <= rounds; r++ {
		for _, p := range parts {
			fp, err := measure(p.name, r, tasks, p.fn)
			if err != nil {
				return rep, err
			}
			rep.Parts = append(rep.Parts, fp)
		}
	}
	return rep, nil
}

func repeat(n int, fn func() error) error {
	for range n {
		if err := fn(); err != nil {
			return err
		}
	}
	return nil
}

// floorSpawn runs `sh -c true` as the agent runs a no-op task's command (sandbox none): its own
// process group with a record, in a run cgroup from the pool under a parent.
func floorSpawn() (func() error, func(), error) {
	dir, err := os.MkdirTemp("", "converge-floor-")
	if err != nil {
		return nil, nil, err
	}
	groups, err := proc.NewGroupDir(filepath.Join(dir, "groups"))
	if err != nil {
		return nil, nil, err
	}
	sb := &proc.Sandbox{UID: -1, GID: -1}
	parent, err := proc.CgroupDir(fmt.Sprintf("converge-floor-%d", os.Getpid()))
	if err == nil {
		sb.CgroupParent = parent
	} else {
		fmt.Fprintf(os.Stderr, "dag-bench: floor: no cgroup here (%v): the spawn runs without one\n", err)
	}
	env := proc.Env(nil, nil)
	run := func() error {
		res := proc.Run(context.Background(), proc.Spec{Shell: "true", Dir: dir, Env: env, Timeout: time.Minute, Groups: groups, Sandbox: sb})
		if res.Err != nil {
			return res.Err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit %d", res.ExitCode)
		}
		return nil
	}
	return run, func() {
		if sb.CgroupParent != "" {
			_ = proc.KillCgroups(sb.CgroupParent)
		}
		_ = groups.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// bareScheduler answers CompleteTask with a canned next assignment.
type bareScheduler struct {
	schedulerv1.UnimplementedSchedulerServiceServer
	res *schedulerv1.CompleteTaskResponse
}

func (b *bareScheduler) CompleteTask(context.Context, *schedulerv1.CompleteTaskRequest) (*schedulerv1.CompleteTaskResponse, error) {
	return b.res, nil
}

// floorRPC is one CompleteTask round trip, fused with the next claim, with messages shaped as a
// no-op task's: the completion with its TASK_STARTED and CHECKPOINT_CREATED events, the answer
// with the next task's claimed assignment.
func floorRPC() (func() error, func(), error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := grpc.NewServer()
	now := timestamppb.Now()
	a := &schedulerv1.Assignment{Id: "asg-0123456789abcdef", Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, ExecutionId: "exe-0123456789abcdef",
		WaveId: "wave-0123456789abcdef", WaveNumber: 1, TaskId: "t0001", Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED,
		InstanceId: "agent-01", Attempt: 1, FencingToken: 1001, LeaseExpireTime: now, AssignTime: now}
	res := &schedulerv1.CompleteTaskResponse{Assignment: proto.Clone(a).(*schedulerv1.Assignment), Next: &schedulerv1.ClaimedAssignment{
		Assignment: a, Task: &commonv1.Task{Id: "t0001", Title: "true", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "out/0001"},
		TaskListId: "tl-0123456789abcdef", TaskListName: "dag fanout",
		Options:           &schedulerv1.ExecutionOptions{MaxParallel: 1000, AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(10 * time.Second)}},
		HeartbeatInterval: durationpb.New(10 * time.Second), LeaseDuration: durationpb.New(30 * time.Second)}}
	schedulerv1.RegisterSchedulerServiceServer(srv, &bareScheduler{res: res})
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	c := schedulerv1.NewSchedulerServiceClient(conn)
	checkpoint, _ := structpb.NewStruct(map[string]any{"commit": "", "files": 1.0})
	rpc := func() error {
		req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: "agent-01", FencingToken: 1000,
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1,
			Events: []*schedulerv1.AgentEvent{
				{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "Task t0001: true started by agent-01 (attempt 1)", Time: timestamppb.Now()},
				{EventType: commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, Message: "checkpoint at ", Time: timestamppb.Now(), Context: checkpoint}},
			ClaimNext: &schedulerv1.ClaimTaskRequest{InstanceId: "agent-01", Capabilities: []string{"command"}, SessionId: "session-0123456789abcdef"}}
		_, err := c.CompleteTask(context.Background(), req)
		return err
	}
	return rpc, func() { _ = conn.Close(); srv.Stop() }, nil
}

// floorCommit is one write transaction on an in-memory SQLite database (the embedded
// Scheduler's store, without its statements): a log row inserted, an assignment row updated.
func floorCommit() (func() error, func(), error) {
	db, err := database.OpenSQLite(":memory:")
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE log (execution_id TEXT NOT NULL, seq INTEGER NOT NULL, event_type INTEGER NOT NULL, time TEXT NOT NULL, body BLOB, PRIMARY KEY (execution_id, seq))",
		"CREATE TABLE assignments (id TEXT PRIMARY KEY, status INTEGER NOT NULL, complete_time TEXT, detail BLOB)",
		"INSERT INTO assignments (id, status) VALUES ('asg-1', 1)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			_ = db.Close()
			return nil, nil, err
		}
	}
	body := []byte(strings.Repeat("x", 200))
	seq := 0
	commit := func() error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		seq++
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if _, err := tx.ExecContext(ctx, "INSERT INTO log (execution_id, seq, event_type, time, body) VALUES (?, ?, ?, ?, ?)", "exe-1", seq, 7, now, body); err != nil {
			_ = tx.Rollback()
			return err
		}
		if _, err := tx.ExecContext(ctx, "UPDATE assignments SET status = ?, complete_time = ?, detail = ? WHERE id = ?", seq%5, now, body, "asg-1"); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	return commit, func() { _ = db.Close() }, nil
}

// printFloor words --floor's figures, a table per round and the medians' sum.
func printFloor(rep floorReport) {
	fmt.Printf("\nfloor of a no-op task: %d tasks per part, %d cores, %s\n\n", rep.Tasks, rep.Cores, rep.Time.Format(time.RFC3339))
	fmt.Println("| round | part | CPU ms/task (self + children) | self | wall ms/task |\n|---|---|--:|--:|--:|")
	for _, p := range rep.Parts {
		fmt.Printf("| %d | %s | %.3f | %.3f | %.3f |\n", p.Round, p.Name, p.CPUMs, p.SelfMs, p.WallMs)
	}
	med := map[string][]time.Duration{}
	var names []string
	for _, p := range rep.Parts {
		if _, ok := med[p.Name]; !ok {
			names = append(names, p.Name)
		}
		med[p.Name] = append(med[p.Name], time.Duration(p.CPUMs*1e6))
	}
	var sum float64
	var ninja float64
	for i, n := range names {
		m := msf(pct(med[n], 50))
		if i == 0 {
			ninja = m
			continue
		}
		sum += m
	}
	fmt.Printf("\nmedian CPU per task: ninja %.3f ms (its `sh -c true` children included); the design's parts %.3f ms", ninja, sum)
	if rep.Cores > 0 {
		fmt.Printf(", i.e. ≥ %.3f ms of wall per task on %d cores", sum/float64(rep.Cores), rep.Cores)
	}
	fmt.Println()
}
