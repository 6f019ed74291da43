package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A short task's agent sends no ReportProgress (issue 17): its TASK_STARTED event rides on the
// completion, which writes it in its one transaction, before TASK_COMPLETED and with the agent's
// source time. The assignment goes from leased to done with the started event in between, for
// GetExecutionLog and for watchers alike.
func TestCompletionCarriesTheStartedEvent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, oneTask("started-rides")), nil)
		ctx := t.Context()
		stream, err := b.client.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(),
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, commonv1.EventType_EVENT_TYPE_TASK_STARTED, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED}})
		require.NoError(t, err)
		c := b.claim(t, "agent-1", 5*time.Second)
		require.NotNil(t, c)
		a := c.GetAssignment()
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED, a.GetStatus())
		started := time.Now().Add(-15 * time.Second).UTC().Truncate(time.Millisecond)
		res, err := b.client.CompleteTask(ctx, &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: "agent-1",
			FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1,
			Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "started", Time: timestamppb.New(started)}}})
		require.NoError(t, err)
		require.Equal(t, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, res.GetAssignment().GetStatus())

		want := []commonv1.EventType{commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, commonv1.EventType_EVENT_TYPE_TASK_STARTED, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED}
		entries := logOf(t, b, e.GetId(), want...)
		var got []commonv1.EventType
		var ofA []*commonv1.LogEntry
		for _, en := range entries {
			if en.GetTaskId() == "A" {
				got, ofA = append(got, en.GetEventType()), append(ofA, en)
			}
		}
		require.Equal(t, want, got, "leased, started, completed, in this order")
		st1, done := ofA[1], ofA[2]
		require.True(t, st1.GetSourceTime().AsTime().Equal(started), "the started event keeps the agent's time: %s", st1.GetSourceTime().AsTime())
		require.Equal(t, done.GetTime().AsTime(), st1.GetTime().AsTime(), "written by the completion's transaction")
		require.Less(t, st1.GetSeq(), done.GetSeq())

		var watched []commonv1.EventType
		for len(watched) < len(want) {
			msg, err := stream.Recv()
			require.NoError(t, err)
			if en := msg.GetEntry(); en != nil && en.GetTaskId() == "A" {
				watched = append(watched, en.GetEventType())
			}
		}
		require.Equal(t, want, watched, "a watcher sees the same order")
	})
}
