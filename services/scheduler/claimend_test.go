package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// longWait is a claim's wait far longer than the guard below: a claim that answers within the
// guard did not wait it out.
const longWait = 60 * time.Second

// claimEnded is what a ClaimTask answered.
type claimEnded struct {
	res *schedulerv1.ClaimTaskResponse
	err error
}

// claimFiltered starts a ClaimTask of instance filtered on execution with wait longWait; its
// answer arrives on the channel.
func claimFiltered(ctx context.Context, c schedulerv1.SchedulerServiceClient, instance, execution string) <-chan claimEnded {
	ch := make(chan claimEnded, 1)
	go func() {
		res, err := c.ClaimTask(ctx, &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: agentCaps,
			ExecutionId: execution, Wait: durationpb.New(longWait)})
		ch <- claimEnded{res, err}
	}()
	return ch
}

// requireNoWork waits for a claim's answer and checks it is the contract's "nothing": no error,
// no assignment. The guard is half the claim's wait: an answer within it was not the wait
// running out.
func requireNoWork(t *testing.T, ch <-chan claimEnded, why string) {
	t.Helper()
	select {
	case got := <-ch:
		require.NoError(t, got.err, why)
		require.Nil(t, got.res.GetAssignment(), why)
	case <-time.After(longWait / 2):
		t.Fatalf("%s: the claim was still waiting out its %s wait", why, longWait)
	}
}

// TestClaimFilteredOnAnExecutionAnswersWhenItEnds: a long-poll ClaimTask filtered on an
// execution answers at once, with no assignment, when that execution ends while it waits
// (converged, cancelled), and when it has already ended as the claim arrives — it no longer
// waits out its wait for work that cannot come.
func TestClaimFilteredOnAnExecutionAnswersWhenItEnds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		_, b := runServer(t, st)
		ctx := t.Context()

		// Converged: the last completion integrates the wave and Verify Done ends the run.
		e := b.start(t, b.createList(t, oneTask("ends")), nil)
		c := b.claim(t, "agent-1", 5*time.Second)
		require.NotNil(t, c)
		waiting := claimFiltered(ctx, b.client, "agent-2", e.GetId())
		_, err := b.complete(ctx, c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
		requireNoWork(t, waiting, "the execution converged")
		got, _ := b.execution(t, e.GetId())
		require.True(t, ended(got), "the claim answered before the execution ended: %v", got.GetStatus())

		// Already ended when the claim arrives.
		requireNoWork(t, claimFiltered(ctx, b.client, "agent-2", e.GetId()), "the execution had ended before the claim")

		// Cancelled while the claim waits (its only task is leased to another agent).
		e2 := b.start(t, b.createList(t, oneTask("cancelled")), nil)
		require.NotNil(t, b.claim(t, "agent-1", 5*time.Second))
		waiting = claimFiltered(ctx, b.client, "agent-2", e2.GetId())
		_, err = b.client.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: e2.GetId(), Reason: "test"})
		require.NoError(t, err)
		requireNoWork(t, waiting, "the execution was cancelled")
	})
}

// TestClaimOnOneReplicaAnswersWhenAnotherEndsItsExecution: replica A cancels the execution a
// claim on replica B is filtered on; B learns it from A's notification (LISTEN/NOTIFY) and
// answers at once instead of waiting out the claim's wait.
func TestClaimOnOneReplicaAnswersWhenAnotherEndsItsExecution(t *testing.T) {
	t.Parallel()
	stA, stB := twoReplicaStores(t)
	_, ca := runServer(t, stA)
	b := New(stB, WithWorkDir(t.TempDir()), WithDriverInterval(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b.Start(ctx)
	conn := servertest.Serve(t, server.Config{Name: "replica-b",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: b, Ready: stB.Ping}}})
	cb := schedulerv1.NewSchedulerServiceClient(conn)

	// B's listener is up once a notification sent now wakes it.
	waitListening(t, b, stA)

	e := ca.start(t, ca.createList(t, oneTask("replicas")), nil)
	require.NotNil(t, ca.claim(t, "agent-1", 5*time.Second))
	waiting := claimFiltered(t.Context(), cb, "agent-2", e.GetId())
	_, err := ca.client.CancelExecution(t.Context(), &schedulerv1.CancelExecutionRequest{ExecutionId: e.GetId(), Reason: "test"})
	require.NoError(t, err)
	requireNoWork(t, waiting, "another replica cancelled the execution")
	require.True(t, b.wake.hasEnded(e.GetId()))
}

// TestSignalRemembersTheLastEndedExecutions: what the wake signal remembers of ended executions
// is bounded; the oldest are forgotten first.
func TestSignalRemembersTheLastEndedExecutions(t *testing.T) {
	t.Parallel()
	s := newSignal()
	for i := range endedKept + 10 {
		s.end(fmt.Sprint("e", i))
	}
	s.end("e20") // known already: not added twice
	require.Len(t, s.ended, endedKept)
	require.False(t, s.hasEnded("e0"))
	require.False(t, s.hasEnded("e9"))
	require.True(t, s.hasEnded("e10"))
	require.True(t, s.hasEnded(fmt.Sprint("e", endedKept+9)))
}
