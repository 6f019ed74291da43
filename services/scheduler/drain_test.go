package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Issue 15 part 11: the agents of a paused run are told DRAIN at their next ReportProgress — finish
// the assignment, the run hands out nothing more — and their completion is accepted; the same
// agent goes on getting other runs' work, and the paused run's again once it is resumed. (A
// cancelled run's agents are told CANCEL: TestPauseResumeCancel.)
func TestPausedRunDrainsItsAgents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		paused := b.start(t, b.createList(t, diamond("paused")), nil)
		c := b.claim(t, "agent-1", time.Second)
		require.NotNil(t, c)
		require.Equal(t, paused.GetId(), c.GetAssignment().GetExecutionId())
		_, err := b.client.PauseExecution(t.Context(), &schedulerv1.PauseExecutionRequest{ExecutionId: paused.GetId(), Reason: "lunch"})
		require.NoError(t, err)

		res, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: c.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), ReportSeq: 1})
		require.NoError(t, err)
		require.Equal(t, schedulerv1.Directive_DIRECTIVE_DRAIN, res.GetDirective())
		require.Contains(t, res.GetReason(), "paused")
		require.Contains(t, res.GetReason(), "lunch")
		done, err := b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, done.GetAssignment().GetStatus(), "the drained work counts")
		require.Nil(t, b.claim(t, "agent-1", 200*time.Millisecond), "the paused run hands out nothing more")

		other := b.start(t, b.createList(t, diamond("other")), nil)
		next := b.claim(t, "agent-1", time.Second)
		require.NotNil(t, next, "the agent serves other runs")
		require.Equal(t, other.GetId(), next.GetAssignment().GetExecutionId())
		res, err = b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: next.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: next.GetAssignment().GetFencingToken(), ReportSeq: 1})
		require.NoError(t, err)
		require.Equal(t, schedulerv1.Directive_DIRECTIVE_CONTINUE, res.GetDirective())

		_, err = b.client.ResumeExecution(t.Context(), &schedulerv1.ResumeExecutionRequest{ExecutionId: paused.GetId()})
		require.NoError(t, err)
		again := b.claim(t, "agent-2", time.Second)
		require.NotNil(t, again)
		require.Equal(t, paused.GetId(), again.GetAssignment().GetExecutionId(), "resumed: its work is handed out again")
	})
}
