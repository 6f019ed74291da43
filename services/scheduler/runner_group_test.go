package scheduler

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// gatedStore counts the transactions of one execution and, while armed, holds each of them
// before it starts until released.
type gatedStore struct {
	store.Store
	mu        sync.Mutex
	execution string
	calls     int
	gate      chan struct{} // nil: not armed
}

func (s *gatedStore) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	s.mu.Lock()
	gate := s.gate
	if id == s.execution {
		s.calls++
	}
	s.mu.Unlock()
	if gate != nil && id == s.execution {
		<-gate
	}
	return s.Store.UpdateExecution(ctx, id, fn)
}

func (s *gatedStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// queued is how many requests of execution id wait for its next transaction on s.
func (s *Server) queued(id string) int {
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	if q := s.groups.m[id]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// Completions of one execution that arrive while a transaction of it waits for the execution's
// lock are applied in that transaction: six completions make one transaction, not six. One of them carries a
// fencing token never granted: it alone is refused (Aborted), the others commit, and the run's counts
// and log are those of the five.
func TestCompletionsOfOneExecutionCommitTogether(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		testGroupCommit(t, st, true)
	})
}

// testGroupCommit runs TestCompletionsOfOneExecutionCommitTogether with group commit on or off
// (off, the test must fail: each completion is its own transaction).
func testGroupCommit(t *testing.T, st store.Store, on bool) {
	const n = 6
	s, b, gs, e, claims, gate := gatedRun(t, st, on, "group", n, n)

	const stale = 3
	errs := make([]error, n)
	var (
		wg       sync.WaitGroup
		finished atomic.Int32
	)
	complete := func(i int) {
		defer wg.Done()
		defer finished.Add(1)
		a := claims[i].GetAssignment()
		token := a.GetFencingToken()
		if i == stale {
			token++ // a token the Scheduler never granted (the fencing check's other side)
		}
		_, errs[i] = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(),
			InstanceId: a.GetInstanceId(), FencingToken: token, Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1})
	}
	// The first completion's transaction is held before it takes the lock; the others arrive
	// meanwhile.
	wg.Add(1)
	go complete(0)
	require.Eventually(t, func() bool { return gs.count() >= 1 }, 30*time.Second, time.Millisecond)
	wg.Add(n - 1)
	for i := 1; i < n; i++ {
		go complete(i)
	}
	// Until they all wait in the queue (grouped), or each has started its own transaction (not).
	require.Eventually(t, func() bool { return s.queued(e.GetId()) >= n || gs.count() >= n || finished.Load() > 0 },
		30*time.Second, time.Millisecond)
	close(gate)
	wg.Wait()

	for i, err := range errs {
		if i == stale {
			require.Equal(t, codes.Aborted, status.Code(err), "%v", err)
			continue
		}
		require.NoError(t, err, "completion %d", i)
	}
	require.Equal(t, 1, gs.count(), "transactions for %d completions that arrived while the first waited for the lock", n)

	got, _ := b.execution(t, e.GetId())
	require.EqualValues(t, n-1, got.GetCompletedTasks())
	require.EqualValues(t, 1, got.GetRunningTasks())
	entries, _, _, err := gs.ReadLog(t.Context(), store.LogQuery{ExecutionID: e.GetId(), Limit: 1000})
	require.NoError(t, err)
	completed := 0
	for i, en := range entries {
		require.EqualValues(t, i+1, en.GetSeq(), "the log is dense")
		if en.GetEventType() == commonv1.EventType_EVENT_TYPE_TASK_COMPLETED {
			completed++
			require.NotEqual(t, claims[stale].GetAssignment().GetTaskId(), en.GetTaskId())
		}
	}
	require.Equal(t, n-1, completed)
	// The refused one completes with its token.
	res, err := b.complete(t.Context(), claims[stale], schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
	require.NoError(t, err)
	require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, res.GetAssignment().GetStatus())
}

// A request whose function panics (its handler's recovery answers it) does not wedge the
// execution's queue: the next request of the execution runs.
func TestGroupedRequestThatPanicsDoesNotWedgeTheQueue(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		s := New(st, WithWorkDir(t.TempDir()), WithGroupCommit(true))
		conn := servertest.Serve(t, server.Config{Name: "scheduler-test",
			Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}}})
		b := &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}
		e := b.start(t, b.createList(t, diamond("panic")), nil)
		func() {
			defer func() { require.NotNil(t, recover()) }()
			_ = s.updateGrouped(t.Context(), e.GetId(), func(*runner) error { panic("boom") })
		}()
		require.Equal(t, 0, s.queued(e.GetId()))
		ran := false
		require.NoError(t, s.updateGrouped(t.Context(), e.GetId(), func(*runner) error { ran = true; return nil }))
		require.True(t, ran)
	})
}

// On Postgres, the requests of a grouped transaction after its leader read their assignment,
// its wave and the wave's next pending assignment as the writes of the requests before them left
// them, from the lock's batch (which reads the execution's held assignments and a pending task
// per holder): six fused completions make the lock's batch and the commit (7 round trips before,
// one read ahead per request after the leader), and each leases a different next task. The
// transaction's log entries (each completion's and its next lease's) are one INSERT.
func TestGroupedRequestsReadAheadInOneRoundTrip(t *testing.T) {
	t.Parallel()
	const n = 6
	sqls := newSQLDetail()
	st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate(), database.WithTracer(sqls))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	s, b, gs, e, claims, gate := gatedRun(t, st, true, "readahead", 2*n, n)

	res := make([]*schedulerv1.CompleteTaskResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	complete := func(i int) {
		defer wg.Done()
		a := claims[i].GetAssignment()
		res[i], errs[i] = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(),
			InstanceId: a.GetInstanceId(), FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED,
			Tries: 1, ClaimNext: &schedulerv1.ClaimTaskRequest{InstanceId: a.GetInstanceId(), Capabilities: agentCaps, ExecutionId: e.GetId()}})
	}
	wg.Add(1)
	go complete(0)
	require.Eventually(t, func() bool { return gs.count() >= 1 }, 30*time.Second, time.Millisecond)
	wg.Add(n - 1)
	for i := 1; i < n; i++ {
		go complete(i)
	}
	require.Eventually(t, func() bool { return s.queued(e.GetId()) >= n }, 30*time.Second, time.Millisecond)
	sqls.reset()
	close(gate)
	wg.Wait()
	trips, _ := sqls.totals()
	logInserts := 0
	sqls.mu.Lock()
	for text, st := range sqls.byText {
		if strings.HasPrefix(text, "INSERT INTO task_execution_log") {
			logInserts += int(st.n)
		}
	}
	sqls.mu.Unlock()

	next := map[string]bool{}
	for i, err := range errs {
		require.NoError(t, err, "completion %d", i)
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, res[i].GetAssignment().GetStatus())
		a := res[i].GetNext().GetAssignment()
		require.NotNil(t, a, "completion %d leased no next task", i)
		require.Equal(t, claims[i].GetAssignment().GetInstanceId(), a.GetInstanceId())
		next[a.GetTaskId()] = true
	}
	require.Len(t, next, n, "every completion leased a different next task")
	require.Equal(t, 1, gs.count(), "one transaction")
	// The lock's batch read every held assignment and a pending task per holder: the requests
	// after the leader read from it (store/postgres ReadAhead), no round trip of their own.
	require.EqualValues(t, 2, trips, "the lock's batch, the commit")
	require.Equal(t, 1, logInserts, "the transaction's log entries in one INSERT")
	got, _ := b.execution(t, e.GetId())
	require.EqualValues(t, n, got.GetCompletedTasks())
	require.EqualValues(t, n, got.GetRunningTasks())
	// Each request read the wave after the writes of those before it: none lost a count.
	require.NoError(t, st.UpdateExecution(t.Context(), e.GetId(), func(tx store.ExecTx) error {
		w, err := tx.Wave(1)
		require.NoError(t, err)
		require.EqualValues(t, n, w.GetCompletedCount())
		return nil
	}))
}

// gatedRun serves a Scheduler (group commit on or off, no driver: only the requests write) over
// a gated store, starts a run of tasks independent tasks (max_parallel tasks), claims the first n
// for agent-0 … agent-(n-1), and gates the run: its next transaction waits before the
// execution's lock until gate is closed.
func gatedRun(t *testing.T, st store.Store, groupCommit bool, name string, tasks, n int) (*Server, *testBundle, *gatedStore,
	*schedulerv1.Execution, []*schedulerv1.ClaimedAssignment, chan struct{}) {
	t.Helper()
	gs := &gatedStore{Store: st}
	s := New(gs, WithWorkDir(t.TempDir()), WithGroupCommit(groupCommit))
	conn := servertest.Serve(t, server.Config{Name: "scheduler-test",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}}})
	b := &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: gs}
	spec := &schedulerv1.TaskListSpec{Name: name}
	for i := range tasks {
		spec.Tasks = append(spec.Tasks, &commonv1.Task{Id: fmt.Sprintf("T%02d", i), Title: "task", Action: commonv1.TaskAction_TASK_ACTION_RUN,
			Command: "true", File: fmt.Sprintf("out/%d.txt", i)})
	}
	e := b.start(t, b.createList(t, spec), &schedulerv1.ExecutionOptions{MaxParallel: int32(tasks)})
	var claims []*schedulerv1.ClaimedAssignment
	for i := range n {
		c := b.claim(t, fmt.Sprintf("agent-%d", i), time.Second)
		require.NotNil(t, c)
		claims = append(claims, c)
	}
	gs.mu.Lock()
	gs.execution, gs.calls, gs.gate = e.GetId(), 0, make(chan struct{})
	gate := gs.gate
	gs.mu.Unlock()
	return s, b, gs, e, claims, gate
}
