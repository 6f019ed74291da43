package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// gatedPlan is a two-phase execution plan whose first phase has a gate.
const gatedPlan = "# Execution Plan: gated\n\n## Phase 1: Foundation\n\n**Gate:** `make check`\n\n" +
	"| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T1.1 | Schema | — | `db/schema.sql` |\n| T1.2 | Store | — | `store/store.go` |\n\n" +
	"## Phase 2: API\n\n| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T2.1 | Routes | — | `api/routes.go` |\n| T2.2 | Handlers | — | `api/handlers.go` |\n"

// Issue 15 part 9: a phase gate runs after every task of its phase and before any task of the
// next; a failed gate stops the run with the gate named.
func TestPhaseGateRunsBetweenPhasesAndStopsTheRun(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		importPlan := func() string {
			res, err := b.client.ImportTaskList(t.Context(), &schedulerv1.ImportTaskListRequest{
				Format: schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, Content: []byte(gatedPlan)})
			require.NoError(t, err)
			return res.GetTaskList().GetId()
		}

		// The gate passes: phase 1, then the gate alone, then phase 2.
		e := b.start(t, importPlan(), nil)
		require.Equal(t, int32(3), e.GetWaveCount())
		order := b.work(t, "agent-1", e.GetId(), succeed)
		require.ElementsMatch(t, []string{"T1.1", "T1.2"}, order[:2])
		require.Equal(t, "GATE-P1", order[2])
		require.ElementsMatch(t, []string{"T2.1", "T2.2"}, order[3:])
		got := b.waitEnded(t, e.GetId())
		require.Equal(t, int32(5), got.GetCompletedTasks())

		// The gate fails: the run ends FAILED naming it, and phase 2 never starts.
		e = b.start(t, importPlan(), nil)
		order = b.work(t, "agent-1", e.GetId(), func(c *schedulerv1.ClaimedAssignment) schedulerv1.CompletionResult {
			if c.GetTask().GetId() == "GATE-P1" {
				require.Equal(t, "make check", c.GetTask().GetCommand())
				return schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED
			}
			return schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED
		})
		require.NotContains(t, order, "T2.1")
		require.NotContains(t, order, "T2.2")
		got = b.waitEnded(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, got.GetStatus())
		require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, got.GetOutcome())
		require.Equal(t, "gate GATE-P1 failed (Gate of Phase 1: Foundation): exit status 1", got.GetStatusMessage())
	})
}
