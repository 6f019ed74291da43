package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// requireClaimWaitsQuietly runs req (a claim that must find nothing for its whole wait) and
// checks how many transactions it made: one attempt at the start and at most one per poll
// interval after it (the poll is the fallback when nothing wakes the claim); a busy loop makes
// thousands.
func requireClaimWaitsQuietly(t *testing.T, b *testBundle, cs *countingStore, req *schedulerv1.ClaimTaskRequest, why string) {
	t.Helper()
	const wait = time.Second
	req.Wait = durationpb.New(wait)
	before := cs.updateExecution.Load()
	res, err := b.client.ClaimTask(t.Context(), req)
	require.NoError(t, err)
	require.Nil(t, res.GetAssignment(), why)
	require.LessOrEqual(t, cs.updateExecution.Load()-before, int64(wait/claimPollInterval)+2, "transactions of one waiting claim")
}

// A long-polling claim that finds an execution claimable but nothing in it for this agent (here:
// the only pending assignment is an integration, and the agent cannot integrate) waits for the
// next change or the poll, not for its own failed attempt: a transaction that changed nothing
// wakes nobody. Before, each failed attempt woke every waiter, the claim itself included, and it
// tried again at once for its whole wait: a busy loop of transactions on the execution's lock.
func TestAClaimThatFindsNothingForItDoesNotWakeItself(t *testing.T) {
	t.Parallel()
	const commit = "1111111111111111111111111111111111111111"
	forEachBackend(t, func(t *testing.T, st store.Store) {
		cs := &countingStore{Store: st}
		b := setup(t, cs)
		b.start(t, b.createList(t, chainOf("waiting", 2)), strictWaves)
		c := b.claim(t, "agent-1", time.Second)
		require.Equal(t, "t1", c.GetAssignment().GetTaskId())
		a := c.GetAssignment()
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: "agent-1",
			FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, CommitSha: commit})
		require.NoError(t, err) // wave 1's integration is pending now

		requireClaimWaitsQuietly(t, b, cs, &schedulerv1.ClaimTaskRequest{InstanceId: "agent-2", Capabilities: []string{"executor:command"}},
			"an agent without the integration capability is given no integration")
	})
}

// The same with eager dispatch at its max_parallel: a later wave's task may start early, so the
// execution is claimable, but the one task allowed at once is running. Every other agent of such
// a run waited in that loop (bench/dag, 300-task random DAG, max_parallel 1, 2 agent processes:
// converge dev's CPU per task 5.5–5.8 ms before, 1.7–1.8 ms after).
func TestAClaimWaitingOutMaxParallelDoesNotWakeItself(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		cs := &countingStore{Store: st}
		b := setup(t, cs)
		b.start(t, b.createList(t, eagerList("one at a time")),
			&schedulerv1.ExecutionOptions{MaxParallel: 1, Dispatch: schedulerv1.DispatchMode_DISPATCH_MODE_EAGER})
		require.NotNil(t, b.claim(t, "agent-1", time.Second), "the first task")

		requireClaimWaitsQuietly(t, b, cs, &schedulerv1.ClaimTaskRequest{InstanceId: "agent-2", Capabilities: agentCaps},
			"max_parallel 1: nothing while the first task runs")
	})
}
