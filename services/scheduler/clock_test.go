package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// WithClock is the Scheduler's clock for what is not store time: ids carry its time.
func TestWithClockDatesIDs(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := bundleWith(t, st, WithClock(func() time.Time { return at }))
		res, err := b.client.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: diamond("clocked")})
		require.NoError(t, err)
		got, ok := ids.Time(res.GetTaskList().GetId())
		require.True(t, ok, res.GetTaskList().GetId())
		require.True(t, got.Equal(at), "id %s dated %s, want %s", res.GetTaskList().GetId(), got, at)
	})
}
