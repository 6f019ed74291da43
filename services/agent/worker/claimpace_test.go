package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// endedRunScheduler answers every ClaimTask at once with no assignment, as the Scheduler answers
// a claim filtered on an execution that has ended.
type endedRunScheduler struct {
	*fakeScheduler
	claims chan struct{}
}

func (e *endedRunScheduler) ClaimTask(_ context.Context, req *schedulerv1.ClaimTaskRequest, _ ...grpc.CallOption) (*schedulerv1.ClaimTaskResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	select {
	case e.claims <- struct{}{}:
	default:
	}
	return &schedulerv1.ClaimTaskResponse{}, nil
}

// TestPinnedAgentDoesNotSpinOnAnEndedExecution: an agent pinned to an execution that has ended
// gets every claim answered at once; it claims again only when its wait would have run out (a
// minute here), not in a loop, and a drain still stops it at once.
func TestPinnedAgentDoesNotSpinOnAnEndedExecution(t *testing.T) {
	t.Parallel()
	ended := &endedRunScheduler{fakeScheduler: newFakeScheduler(), claims: make(chan struct{}, 1)}
	h := startWorker(t, func(c *Config) {
		c.Scheduler, c.ExecutionID, c.ClaimWait = ended, "exec-ended", time.Minute
	})
	select {
	case <-ended.claims:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not claim")
	}
	select {
	case <-ended.claims:
		t.Fatal("the worker claimed again at once after an empty answer")
	case <-time.After(time.Second): // a second claim in a loop would come within microseconds
	}
	h.w.Drain(0)
	require.NoError(t, h.wait())
}
