package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// CompleteTask with claim_next answers the agent's next assignment in the same round trip: a
// whole run goes through with one ClaimTask and then completions only, in wave order.
func TestCompleteTaskClaimsTheNextAssignment(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		list := b.createList(t, diamond("fused"))
		e := b.start(t, list, nil)
		claim := &schedulerv1.ClaimTaskRequest{InstanceId: "agent-1", Capabilities: agentCaps, SessionId: "boot-1"}
		c := b.claim(t, "agent-1", time.Second)
		require.NotNil(t, c)
		var order []string
		for c != nil {
			order = append(order, c.GetAssignment().GetTaskId())
			a := c.GetAssignment()
			req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: "agent-1", FencingToken: a.GetFencingToken(),
				Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, ClaimNext: claim}
			res, err := b.client.CompleteTask(t.Context(), req)
			require.NoError(t, err)
			require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, res.GetAssignment().GetStatus())
			// A retried completion answers the same and claims nothing more.
			again, err := b.client.CompleteTask(t.Context(), req)
			require.NoError(t, err)
			require.Nil(t, again.GetNext())
			c = res.GetNext()
			if c != nil {
				require.Equal(t, "agent-1", c.GetAssignment().GetInstanceId())
				require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, c.GetAssignment().GetStatus())
			}
		}
		require.Equal(t, "A", order[0])
		require.ElementsMatch(t, []string{"B", "C"}, order[1:3])
		require.Equal(t, "D", order[3])
		require.Len(t, order, 4, "no task claimed twice, none left behind")
		got := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(4), got.GetCompletedTasks())
		require.Zero(t, got.GetRunningTasks())
	})
}

func TestCompleteTaskClaimNextIsTheCompletingInstance(t *testing.T) {
	t.Parallel()
	b := setup(t, backends["sqlite"](t))
	_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: "x", InstanceId: "agent-1", FencingToken: 1,
		Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, ClaimNext: &schedulerv1.ClaimTaskRequest{InstanceId: "agent-2"}})
	requireViolations(t, err, map[string]string{"": "claim_next.instance_id must be the completing instance_id"})
}

// waveWrites is a store that counts, per transaction, how often each wave is written.
type waveWrites struct {
	store.Store
	mu    sync.Mutex
	twice []string // waves written more than once by one transaction
	total int
}

func (s *waveWrites) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	return s.Store.UpdateExecution(ctx, id, func(tx store.ExecTx) error {
		return fn(&waveWritesTx{ExecTx: tx, s: s, seen: map[string]bool{}})
	})
}

type waveWritesTx struct {
	store.ExecTx
	s    *waveWrites
	seen map[string]bool
}

func (t *waveWritesTx) PutWave(w *schedulerv1.Wave) error {
	t.s.mu.Lock()
	if t.seen[w.GetId()] {
		t.s.twice = append(t.s.twice, w.GetId())
	}
	t.seen[w.GetId()] = true
	t.s.total++
	t.s.mu.Unlock()
	return t.ExecTx.PutWave(w)
}

// A completion and the claim fused with it change the same wave (its counts, its active agents):
// the transaction writes it once, at its end, with both changes.
func TestFusedCompletionWritesItsWaveOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		ws := &waveWrites{Store: st}
		b := runBundle(t, ws)
		e := b.start(t, b.createList(t, diamond("fused waves")), nil)
		claim := &schedulerv1.ClaimTaskRequest{InstanceId: "agent-1", Capabilities: agentCaps, SessionId: "boot-1"}
		c := b.claim(t, "agent-1", time.Second)
		for c != nil {
			a := c.GetAssignment()
			res, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: "agent-1",
				FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, ClaimNext: claim})
			require.NoError(t, err)
			c = res.GetNext()
		}
		got := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(4), got.GetCompletedTasks())
		ws.mu.Lock()
		defer ws.mu.Unlock()
		require.Empty(t, ws.twice, "a transaction wrote a wave more than once")
		require.Positive(t, ws.total)
	})
}
