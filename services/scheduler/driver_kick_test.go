package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestLastWaveStartsVerifyDoneWithoutWaitingForTheTick: the completion that integrates an
// execution's last wave kicks the leader's driver, so Verify Done (here: no criteria, so the run
// ends CONVERGED_PENDING_HUMAN at once) does not wait for the driver's next round — an hour
// here, which the test would never see.
func TestLastWaveStartsVerifyDoneWithoutWaitingForTheTick(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		srv, b := runServer(t, st, WithDriverInterval(time.Hour))
		// The driver's first round (at Start) takes the leadership; wait for it, so the kick
		// below is the only thing that can end the run within the test. The wait does not try
		// to take the leadership itself: a probe that took it, even for a moment, could make the
		// driver's one attempt of the hour fail.
		require.Eventually(t, srv.leading.Load, 10*time.Second, 5*time.Millisecond, "the driver leads")

		e := b.start(t, b.createList(t, diamond("kick")), nil)
		for range 4 {
			c := b.claim(t, "agent-1", 5*time.Second)
			require.NotNil(t, c)
			_, err := b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { got, _ := b.execution(t, e.GetId()); return ended(got) },
			30*time.Second, 5*time.Millisecond, "Verify Done ran without the driver's tick")
		got, _ := b.execution(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, got.GetOutcome(), got.GetStatusMessage())
	})
}
