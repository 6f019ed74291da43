package security

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
)

// procFDs answers how many file descriptors process pid holds.
func procFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	require.NoError(t, err)
	return len(ents)
}

// procRSS answers process pid's resident set in MiB.
func procRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			require.NoError(t, err)
			return kb / 1024
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// Finding 7, connections: 10,000 idle connections to the Knowledge server. The connection limit
// (default 1024) closes the longest-idle ones, so its file descriptors stay bounded and health
// keeps answering SERVING on a new connection.
func TestFinding7IdleConnectionsKeepHealthServing(t *testing.T) {
	t.Parallel()
	addr, p := startService(t, "knowledge")
	before := procFDs(t, p.Pid())
	const idle = 10000
	conns := make([]net.Conn, 0, idle)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range idle {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	got, err := clustertest.Health(addr, "")
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, got)
	fds := procFDs(t, p.Pid())
	t.Logf("converge-knowledge with %d idle connections open against it: %d file descriptors (%d before), RSS %d MiB, health %v",
		idle, fds, before, procRSS(t, p.Pid()), got)
	require.Less(t, fds, before+server.DefaultMaxConnections+64, "the connection limit bounds the descriptors")
}

// Finding 7, streams: WatchExecution streams on converge dev beyond the per-principal quota
// (default 256) are ResourceExhausted naming the quota; health stays SERVING; memory stays
// bounded; and the descriptors go back once the streams close.
func TestFinding7WatchStreamsBeyondTheQuota(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), clustertest.FreeAddr(t)
	p := clustertest.StartProcess(t, clustertest.ProcessSpec{Name: "converge-dev", Bin: clustertest.Binary(t, "converge"),
		Args: []string{"dev", "--listen", addr, "--data-dir", dir, "--agents", "0"}})
	clustertest.WaitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING, 0)
	token, err := os.ReadFile(filepath.Join(dir, "dev-token"))
	require.NoError(t, err)
	dial := func() *grpc.ClientConn {
		conn, err := client.Dial(addr, client.Options{Token: strings.TrimSpace(string(token))})
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	sched := schedulerv1.NewSchedulerServiceClient(dial())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := sched.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: clustertest.Layered("watch", clustertest.GitRepo(t), 2, "0")})
	require.NoError(t, err)
	e, err := sched.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: list.GetTaskList().GetId()})
	require.NoError(t, err)
	baseFDs, baseRSS := procFDs(t, p.Pid()), procRSS(t, p.Pid())

	// 2,000 watchers over 16 connections (each carries at most 256 calls at once).
	const watchers, connections = 2000, 16
	clients := make([]schedulerv1.SchedulerServiceClient, connections)
	for i := range clients {
		clients[i] = schedulerv1.NewSchedulerServiceClient(dial())
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		accepted int
		refused  []error
		other    []error
	)
	for i := range watchers {
		wg.Go(func() {
			st, err := clients[i%connections].WatchExecution(watchCtx, &schedulerv1.WatchExecutionRequest{
				ExecutionId: e.GetExecution().GetId(), IncludeSnapshots: true})
			if err == nil {
				_, err = st.Recv()
			}
			mu.Lock()
			defer mu.Unlock()
			switch status.Code(err) {
			case codes.OK:
				accepted++
			case codes.ResourceExhausted:
				refused = append(refused, err)
			default:
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	require.Empty(t, other)
	require.Equal(t, server.DefaultStreamsPerPrincipal, accepted, "the quota's worth are served")
	require.Len(t, refused, watchers-accepted)
	require.Contains(t, status.Convert(refused[0]).Message(), server.StreamsQuota)
	health, err := clustertest.Health(addr, "")
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, health)
	peakFDs, peakRSS := procFDs(t, p.Pid()), procRSS(t, p.Pid())

	stopWatching()
	// Back to the start, give or take this test's connections and the SQLite pool's idle ones
	// (three descriptors each: the database, its WAL and its shared memory).
	var afterFDs int
	bound := baseFDs + connections + 3*database.SQLiteMaxIdleConns + 16
	require.Eventually(t, func() bool {
		afterFDs = procFDs(t, p.Pid())
		return afterFDs <= bound
	}, time.Minute, 100*time.Millisecond, "descriptors back after the streams closed: %d before, %d open, now %d, want at most %d",
		baseFDs, peakFDs, afterFDs, bound)
	t.Logf("converge dev, %d WatchExecution streams asked for: %d served, %d ResourceExhausted; health %v; "+
		"RSS %d MiB before, %d MiB with the streams open, %d MiB after; file descriptors %d before, %d open, %d after",
		watchers, accepted, len(refused), health, baseRSS, peakRSS, procRSS(t, p.Pid()), baseFDs, peakFDs, afterFDs)
	require.Less(t, peakRSS, 1024, "RSS stays far below the 3.9 GB of the finding")
}
