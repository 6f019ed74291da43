package scheduler

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Agents' events are never lost in a grouped transaction: reports and completions (some
// claiming their next assignment) of one execution that queue behind its first transaction,
// one stale report and one stale completion among them, are applied together, and the log then
// holds every event of every accepted request exactly once and none of a refused one, whichever
// savepoints were undone around them. Then each reporter completes, and its later events are
// logged too: an agent whose report was answered may drop the events it sent.
func TestGroupedReportsAndCompletionsLogEveryEvent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		const n, staleReport, staleCompletion = 8, 4, 3
		s, b, gs, e, claims, gate := gatedRun(t, st, true, "group-events", 12, n)
		events := func(prefix string, i int) []*schedulerv1.AgentEvent {
			return []*schedulerv1.AgentEvent{
				{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: fmt.Sprintf("%s %d started", prefix, i)},
				{EventType: commonv1.EventType_EVENT_TYPE_INFO, Message: fmt.Sprintf("%s %d info", prefix, i)},
				{EventType: commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, Message: fmt.Sprintf("%s %d checkpoint", prefix, i)},
			}
		}
		errs := make([]error, n)
		request := func(i int) {
			a := claims[i].GetAssignment()
			token := a.GetFencingToken()
			if i == staleReport || i == staleCompletion {
				token++ // never granted
			}
			if i%2 == 0 {
				_, errs[i] = b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: a.GetId(),
					InstanceId: a.GetInstanceId(), FencingToken: token, ReportSeq: 1, ProgressPercent: 50, Events: events("report", i)})
				return
			}
			req := &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: a.GetInstanceId(), FencingToken: token,
				Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, Events: events("completion", i)}
			if i%4 == 1 {
				req.ClaimNext = &schedulerv1.ClaimTaskRequest{InstanceId: a.GetInstanceId(), Capabilities: agentCaps, Wait: durationpb.New(0)}
			}
			_, errs[i] = b.client.CompleteTask(t.Context(), req)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); request(0) }()
		require.Eventually(t, func() bool { return gs.count() >= 1 }, 30*time.Second, time.Millisecond)
		for i := 1; i < n; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); request(i) }()
		}
		require.Eventually(t, func() bool { return s.queued(e.GetId()) >= n }, 30*time.Second, time.Millisecond)
		close(gate)
		wg.Wait()

		want := map[string]int{}
		for i, err := range errs {
			if i == staleReport || i == staleCompletion {
				require.Equal(t, codes.Aborted, status.Code(err), "request %d: %v", i, err)
				continue
			}
			require.NoError(t, err, "request %d", i)
			prefix := "report"
			if i%2 == 1 {
				prefix = "completion"
			}
			for _, ev := range events(prefix, i) {
				want[ev.GetMessage()] = 1
			}
		}
		// The reporters finish: their completions carry what they queued since.
		for i := 0; i < n; i += 2 {
			if i == staleReport {
				continue
			}
			a := claims[i].GetAssignment()
			_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(),
				InstanceId: a.GetInstanceId(), FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED,
				Tries: 1, Events: []*schedulerv1.AgentEvent{{EventType: commonv1.EventType_EVENT_TYPE_VALIDATION_RUN, Message: fmt.Sprintf("later %d", i)}}})
			require.NoError(t, err)
			want[fmt.Sprintf("later %d", i)] = 1
		}
		entries, _, _, err := st.ReadLog(t.Context(), store.LogQuery{ExecutionID: e.GetId(), Limit: 1000})
		require.NoError(t, err)
		got := map[string]int{}
		for i, en := range entries {
			require.EqualValues(t, i+1, en.GetSeq(), "the log is dense")
			if m := en.GetMessage(); strings.HasPrefix(m, "report ") || strings.HasPrefix(m, "completion ") || strings.HasPrefix(m, "later ") {
				got[m]++ // an agent's event (the Scheduler's own entries start otherwise)
			}
		}
		require.Equal(t, want, got, "every accepted event once, no refused one")
	})
}
