package scheduler

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/knowledge"
	kstore "github.com/converge-dev/converge/services/knowledge/store"
	ksqlite "github.com/converge-dev/converge/services/knowledge/store/sqlite"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A passing task confirms the provisional knowledge items it was given, off CompleteTask's path
// (an outbox row written by the completion, drained by the worker Start runs), against the real
// Knowledge service on a real TCP port that can go down and come back.

// knowledgeService is the real Knowledge service (SQLite store) served on a loopback port that
// stop and restart take down and bring back on the same address.
type knowledgeService struct {
	t     *testing.T
	store kstore.Store
	addr  string
	stop  func()
}

func startKnowledge(t *testing.T) *knowledgeService {
	t.Helper()
	st, err := ksqlite.New(t.Context(), filepath.Join(t.TempDir(), "knowledge.db"), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	k := &knowledgeService{t: t, store: st, addr: "127.0.0.1:0"}
	k.restart()
	t.Cleanup(func() { k.stop() })
	return k
}

// restart serves the service (again) on its address.
func (k *knowledgeService) restart() {
	k.t.Helper()
	lis, err := net.Listen("tcp", k.addr)
	require.NoError(k.t, err)
	k.addr = lis.Addr().String()
	srv, err := server.Config{Name: "knowledge-test", DrainDelay: -1, DisableTracing: true,
		Services: []server.Service{{Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: knowledge.New(k.store)}}}.Complete()
	require.NoError(k.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	k.stop = func() {
		cancel()
		if err := <-served; err != nil {
			k.t.Errorf("knowledge: serve: %v", err)
		}
		k.stop = func() {}
	}
}

// client dials the service, reconnecting quickly after an outage.
func (k *knowledgeService) client() knowledgev1.KnowledgeServiceClient {
	k.t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+k.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.5, MaxDelay: 100 * time.Millisecond}}))
	require.NoError(k.t, err)
	k.t.Cleanup(func() { _ = conn.Close() })
	return knowledgev1.NewKnowledgeServiceClient(conn)
}

// provisional records a provisional item by another principal and answers its public id.
func (k *knowledgeService) provisional(file string) string {
	k.t.Helper()
	it, _, err := k.store.Record(k.t.Context(), kstore.NewItem{Type: kstore.TypeGotcha, Content: "mind " + file, FilePattern: file,
		Confidence: 0.9, RecordedBy: "someone-else", Provisional: true}, time.Now())
	require.NoError(k.t, err)
	return fmt.Sprintf("kn_%d", it.ID)
}

func (k *knowledgeService) isProvisional(id string) bool {
	k.t.Helper()
	n := 0
	_, err := fmt.Sscanf(id, "kn_%d", &n)
	require.NoError(k.t, err)
	it, err := k.store.Get(k.t.Context(), int64(n))
	require.NoError(k.t, err)
	return it.Provisional && it.ConfirmedBy == ""
}

// promptOptions are the options of a run whose executor reads the agent's prompt (an agent
// CLI): only such a task is given knowledge, and so only its passing confirms any.
func promptOptions() *schedulerv1.ExecutionOptions {
	return &schedulerv1.ExecutionOptions{Executor: &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{
		AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"agent"}}}}}
}

// claimPrompted claims the next task as an agent that runs agent CLIs.
func claimPrompted(t *testing.T, b *testBundle) *schedulerv1.ClaimedAssignment {
	t.Helper()
	res, err := b.client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "agent-1",
		Capabilities: []string{"executor:agent-cli", "integration"}, Wait: durationpb.New(5 * time.Second)})
	require.NoError(t, err)
	return res.GetAssignment()
}

// passWith claims the run's one task and completes it SUCCEEDED, logging that it was given items.
func passWith(t *testing.T, b *testBundle, items ...string) {
	t.Helper()
	c := claimPrompted(t, b)
	require.NotNil(t, c)
	passNaming(t, b, c, items...)
}

// passNaming completes the claimed task SUCCEEDED with an INFO event naming items as given to it.
func passNaming(t *testing.T, b *testBundle, c *schedulerv1.ClaimedAssignment, items ...string) {
	t.Helper()
	ids := make([]any, len(items))
	for i, id := range items {
		ids[i] = id
	}
	ctx, err := structpb.NewStruct(map[string]any{"knowledge_item_ids": ids})
	require.NoError(t, err)
	a := c.GetAssignment()
	_, err = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: a.GetInstanceId(),
		FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1,
		Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_INFO, Message: "knowledge: items for the prompt", Context: ctx}}})
	require.NoError(t, err)
}

func TestAPassingTaskConfirmsItsKnowledgeOffTheCompletionPath(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		k := startKnowledge(t)
		b := bundleWith(t, st, WithKnowledge(k.client()), WithConfirmRetry(20*time.Millisecond, 100*time.Millisecond))
		item := k.provisional("a.txt")
		b.start(t, b.createList(t, oneTask("confirm")), promptOptions())
		passWith(t, b, item)
		require.Eventually(t, func() bool { return !k.isProvisional(item) }, 20*time.Second, 10*time.Millisecond,
			"the passing task's item is confirmed")
		require.Eventually(t, func() bool { return outboxEmpty(t, st) }, 20*time.Second, 10*time.Millisecond, "the outbox row is deleted")
	})
}

// A Knowledge outage neither fails nor holds up CompleteTask: the completion is answered while
// Knowledge is down, its confirmation waits in the outbox, and arrives once Knowledge is back.
func TestAKnowledgeOutageDoesNotFailTheCompletionAndTheConfirmationArrivesAfter(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		k := startKnowledge(t)
		b := bundleWith(t, st, WithKnowledge(k.client()), WithConfirmRetry(20*time.Millisecond, 100*time.Millisecond))
		item := k.provisional("a.txt")
		b.start(t, b.createList(t, oneTask("outage")), promptOptions())
		k.stop()
		passWith(t, b, item) // succeeds while Knowledge is down
		// The worker tries, fails and puts the row back (attempts count up) while Knowledge is down.
		require.Eventually(t, func() bool { return outboxAttempts(t, st) >= 2 }, 20*time.Second, 10*time.Millisecond,
			"the worker retries while Knowledge is down")
		require.True(t, k.isProvisional(item))

		k.restart()
		require.Eventually(t, func() bool { return !k.isProvisional(item) }, 20*time.Second, 10*time.Millisecond,
			"the confirmation arrives once Knowledge is back")
		require.Eventually(t, func() bool { return outboxEmpty(t, st) }, 20*time.Second, 10*time.Millisecond)
	})
}

// A confirmation left in the outbox by a Scheduler that died is done by the next Scheduler on
// the same store once the row is due (its lease or its retry delay passed).
func TestAConfirmationLeftByADeadSchedulerIsDoneAfterARestart(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		k := startKnowledge(t)
		item := k.provisional("a.txt")
		k.stop() // down for the first Scheduler's whole life
		first := New(st, WithDriverInterval(20*time.Millisecond), WithWorkDir(t.TempDir()), WithKnowledge(k.client()),
			WithConfirmRetry(time.Hour, time.Hour))
		ctx, kill := context.WithCancel(context.Background())
		t.Cleanup(kill)
		first.Start(ctx)
		b := &testBundle{client: schedulerv1.NewSchedulerServiceClient(servertest.Serve(t, server.Config{Name: "scheduler-test",
			Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: first, Ready: st.Ping}}})), store: st}
		b.start(t, b.createList(t, oneTask("restart")), promptOptions())
		passWith(t, b, item)
		require.Eventually(t, func() bool { return outboxAttempts(t, st) >= 1 }, 20*time.Second, 10*time.Millisecond)
		kill() // the first Scheduler dies with the row put back for an hour
		// An hour later (the row due again):
		left, err := st.ListConfirmations(t.Context(), 10)
		require.NoError(t, err)
		require.Len(t, left, 1)
		require.NoError(t, st.RetryConfirmation(t.Context(), left[0].AssignmentID, -time.Second))

		k.restart()
		bundleWith(t, st, WithKnowledge(k.client()), WithConfirmRetry(20*time.Millisecond, 100*time.Millisecond))
		require.Eventually(t, func() bool { return !k.isProvisional(item) }, 20*time.Second, 10*time.Millisecond,
			"the next Scheduler confirms what the dead one left")
		require.Eventually(t, func() bool { return outboxEmpty(t, st) }, 20*time.Second, 10*time.Millisecond)
	})
}

// outboxEmpty reports whether the confirmation outbox is empty.
func outboxEmpty(t *testing.T, st store.Store) bool {
	t.Helper()
	list, err := st.ListConfirmations(t.Context(), 10)
	require.NoError(t, err)
	return len(list) == 0
}

// outboxAttempts answers the failed tries of the one row in the outbox (-1 when there is none).
func outboxAttempts(t *testing.T, st store.Store) int32 {
	t.Helper()
	list, err := st.ListConfirmations(t.Context(), 10)
	require.NoError(t, err)
	if len(list) == 0 {
		return -1
	}
	return list[0].Attempts
}

// enqueueCounter is a store (the real one) that records the tasks of the confirmations the
// Scheduler's transactions enqueue (the worker may take and delete a row before a test reads the
// outbox: a row whose log names no item is done without Knowledge).
type enqueueCounter struct {
	store.Store
	mu    sync.Mutex
	tasks []string
}

func (c *enqueueCounter) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	return c.Store.UpdateExecution(ctx, id, func(tx store.ExecTx) error { return fn(countingTx{tx, c}) })
}

func (c *enqueueCounter) enqueued() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.tasks)
}

type countingTx struct {
	store.ExecTx
	c *enqueueCounter
}

func (t countingTx) EnqueueConfirmation(c *store.Confirmation) error {
	t.c.mu.Lock()
	t.c.tasks = append(t.c.tasks, c.TaskID)
	t.c.mu.Unlock()
	return t.ExecTx.EnqueueConfirmation(c)
}

// A first try that reported nothing and whose completion names no knowledge item enqueues no
// confirmation (the log cannot name one: nothing for the worker to read, take and delete); a try
// whose report or completion may name items enqueues its row, as does a later attempt (the log
// holds the earlier attempts' entries too).
func TestAConfirmationIsEnqueuedOnlyWhenTheTryMayHaveBeenGivenKnowledge(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		k := startKnowledge(t)
		counted := &enqueueCounter{Store: st}
		b := bundleWith(t, counted, WithKnowledge(k.client()))
		spec := oneTask("enqueue")
		spec.Tasks = append(spec.Tasks,
			&commonv1.Task{Id: "B", Title: "b", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "b.txt"},
			&commonv1.Task{Id: "C", Title: "c", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "c.txt"},
			&commonv1.Task{Id: "D", Title: "d", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "d.txt"})
		retries := int32(2)
		opts := promptOptions()
		opts.MaxParallel, opts.MaxRetries = 1, &retries
		b.start(t, b.createList(t, spec), opts)
		info := func(withIDs bool) *schedulerv1.AgentEvent {
			fields := map[string]any{"other": "x"}
			if withIDs {
				fields["knowledge_item_ids"] = []any{k.provisional("x.txt")}
			}
			ctx, err := structpb.NewStruct(fields)
			require.NoError(t, err)
			return &schedulerv1.AgentEvent{EventType: commonv1.EventType_EVENT_TYPE_INFO, Message: "info", Context: ctx}
		}
		claim := func() *schedulerv1.Assignment {
			c := claimPrompted(t, b)
			require.NotNil(t, c)
			return c.GetAssignment()
		}
		complete := func(a *schedulerv1.Assignment, result schedulerv1.CompletionResult, events ...*schedulerv1.AgentEvent) {
			req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: a.GetInstanceId(),
				FencingToken: a.GetFencingToken(), Result: result, Tries: 1, Events: events}
			if result != schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED {
				req.Error = &commonv1.ErrorContext{Code: "TEST", Message: "stopped"}
			}
			_, err := b.client.CompleteTask(t.Context(), req)
			require.NoError(t, err)
		}

		// First try, no report, an INFO event without items: nothing enqueued.
		first := claim()
		complete(first, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, info(false))
		require.Empty(t, counted.enqueued(), "a first try whose log names no item enqueues no confirmation")

		// First try whose completion carries the items: enqueued.
		withItems := claim()
		complete(withItems, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, info(true))
		require.Equal(t, []string{withItems.GetTaskId()}, counted.enqueued())

		// First try whose report carried the items, completion without events: enqueued.
		reported := claim()
		_, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: reported.GetId(),
			InstanceId: reported.GetInstanceId(), FencingToken: reported.GetFencingToken(), ReportSeq: 1, ProgressPercent: 10,
			Message: "prime", Events: []*schedulerv1.AgentEvent{info(true)}})
		require.NoError(t, err)
		complete(reported, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.Equal(t, []string{withItems.GetTaskId(), reported.GetTaskId()}, counted.enqueued())

		// A second attempt (the first was cancelled: the agent stopped, after logging items), no
		// report, no items in its completion: enqueued.
		cancelled := claim()
		complete(cancelled, schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, info(true))
		again := claim()
		require.Equal(t, cancelled.GetTaskId(), again.GetTaskId())
		require.EqualValues(t, 2, again.GetAttempt())
		complete(again, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.Equal(t, []string{withItems.GetTaskId(), reported.GetTaskId(), again.GetTaskId()}, counted.enqueued())
	})
}

// TestACommandTaskConfirmsNothing: a command reads no prompt, so it was given no knowledge; the
// Scheduler enqueues no confirmation for its passing try even when the agent names items (as an
// agent from before that rule did), and the item stays provisional.
func TestACommandTaskConfirmsNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		k := startKnowledge(t)
		counted := &enqueueCounter{Store: st}
		b := bundleWith(t, counted, WithKnowledge(k.client()))
		b.start(t, b.createList(t, oneTask("command")), nil)
		item := k.provisional("a.txt")
		c := b.claim(t, "agent-1", 5*time.Second)
		require.NotNil(t, c)
		passNaming(t, b, c, item)
		require.Empty(t, counted.enqueued(), "a command task's passing enqueues no confirmation")
		require.True(t, k.isProvisional(item))
	})
}
