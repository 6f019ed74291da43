package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// lockedBuffer is a bytes.Buffer the server's goroutines may log into while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// `converge dev --agents 2` runs a fan-out to completion, and its local agents call the services
// in-process: every ClaimTask and CompleteTask the server logs came from the "inprocess" peer (over
// the server's own address before, a 127.0.0.1 peer), authenticated by the dev token through the
// server's whole chain (the call is logged, so it went through it), while the test's own calls
// still arrive over TCP.
func TestDevLocalAgentsCallInProcess(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	opts := devOptions{InMemory: true, Agents: 2, AgentDrainTimeout: 5 * time.Second, DevToken: "tok-local-agents"}
	opts.LogFormat, opts.LogLevel = "text", "info"
	conn := serveDev(t, opts, logs)
	sched := schedulerv1.NewSchedulerServiceClient(conn)
	cctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer tok-local-agents")
	const tasks = 8
	spec := &schedulerv1.TaskListSpec{Name: "local agents fan-out"}
	for i := range tasks {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprint(i + 1), Title: "true", Command: "true",
			Action: commonv1.TaskAction_TASK_ACTION_RUN, File: fmt.Sprintf("out/%d", i)})
	}
	tl, err := sched.CreateTaskList(cctx, &schedulerv1.CreateTaskListRequest{Spec: spec})
	require.NoError(t, err)
	ex, err := sched.StartExecution(cctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId()})
	require.NoError(t, err)
	var last *schedulerv1.Execution
	require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
		res, err := sched.GetExecution(cctx, &schedulerv1.GetExecutionRequest{ExecutionId: ex.GetExecution().GetId()})
		last = res.GetExecution()
		return err == nil && last.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED
	}), "the fan-out did not complete: %v", last)
	require.EqualValues(t, tasks, last.GetCompletedTasks(), "%v", last)

	var claims, completes int
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "msg=\"finished call\"") {
			continue
		}
		method := ""
		switch {
		case strings.Contains(line, "grpc.method=ClaimTask "):
			method, claims = "ClaimTask", claims+1
		case strings.Contains(line, "grpc.method=CompleteTask "):
			method, completes = "CompleteTask", completes+1
		case strings.Contains(line, "grpc.method=CreateTaskList "):
			require.Contains(t, line, "peer.address=127.0.0.1:", "the test's own call came over TCP")
		}
		if method != "" {
			require.Contains(t, line, "peer.address=inprocess", "a local agent's %s came over the wire:\n%s", method, line)
			require.Contains(t, line, "grpc.code=OK", line)
		}
	}
	require.GreaterOrEqual(t, claims, 1)
	require.Equal(t, tasks, completes)
}

// serveDev runs `converge dev` with opts on a free loopback port until the test ends (its stop
// must be clean) and answers a connection to it, once it is ready.
func serveDev(t *testing.T, opts devOptions, logs io.Writer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	opts.Ready = func(string) { close(ready) }
	go func() { done <- runDev(ctx, opts, lis, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("converge dev did not stop within 60s of its context ending")
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("converge dev stopped before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("converge dev was never ready")
	}

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
