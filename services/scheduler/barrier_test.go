package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// chainOf is t1 → t2 → … → tn: one wave per task, no repository.
func chainOf(name string, n int) *schedulerv1.TaskListSpec {
	spec := &schedulerv1.TaskListSpec{Name: name}
	for i := 1; i <= n; i++ {
		t := &commonv1.Task{Id: "t" + string(rune('0'+i)), Title: "link", Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true",
			File: "out/" + string(rune('0'+i))}
		if i > 1 {
			t.DependsOn = []string{"t" + string(rune('0'+i-1))}
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return spec
}

var strictWaves = &schedulerv1.ExecutionOptions{Dispatch: schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES}

// completeAndClaim completes c (with commit, which may be empty) and claims the agent's next
// assignment in the same call, as converge-agent does.
func (b *testBundle) completeAndClaim(t *testing.T, c *schedulerv1.ClaimedAssignment, commit string) *schedulerv1.ClaimedAssignment {
	t.Helper()
	a := c.GetAssignment()
	res, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: a.GetInstanceId(),
		FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, CommitSha: commit,
		ClaimNext: &schedulerv1.ClaimTaskRequest{InstanceId: a.GetInstanceId(), Capabilities: agentCaps, SessionId: "boot-1"}})
	require.NoError(t, err)
	return res.GetNext()
}

// after answers the types of the log's entries from the first of type first for task (inclusive),
// and their store times.
func after(t *testing.T, b *testBundle, execution string, first commonv1.EventType, task string) ([]commonv1.EventType, []time.Time, []*commonv1.LogEntry) {
	t.Helper()
	var (
		types []commonv1.EventType
		times []time.Time
		rest  []*commonv1.LogEntry
	)
	for _, en := range logOf(t, b, execution) {
		if len(rest) == 0 && (en.GetEventType() != first || en.GetTaskId() != task) {
			continue
		}
		rest = append(rest, en)
		types = append(types, en.GetEventType())
		times = append(times, en.GetTime().AsTime())
	}
	return types, times, rest
}

// A wave whose tasks made no commit has nothing to integrate: the completion of its last task
// ends it and opens the next wave in its own transaction, and the fused claim leases the
// dependent there too — no integration lease (and no durable commit) between a dependency's
// completion and its dependent's lease. The log says so in the same order a watcher sees it.
func TestACommitlessWaveOpensTheNextInItsLastCompletion(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, chainOf("commitless", 3)), strictWaves)
		c := b.claim(t, "agent-1", time.Second)
		require.Equal(t, "t1", c.GetAssignment().GetTaskId())
		next := b.completeAndClaim(t, c, "")
		require.NotNil(t, next, "the dependent is leased by the completion of its dependency")
		require.Equal(t, "t2", next.GetAssignment().GetTaskId())
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, next.GetAssignment().GetKind())
		require.EqualValues(t, 2, next.GetAssignment().GetWaveNumber())

		types, times, entries := after(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "t1")
		require.Equal(t, []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED,
			commonv1.EventType_EVENT_TYPE_WAVE_STARTED, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED}, types)
		for _, at := range times[1:] {
			require.True(t, at.Equal(times[0]), "one transaction: one store time (%s, %s)", times[0], at)
		}
		require.Contains(t, entries[1].GetMessage(), "wave 1/3 completed: 1 completed, 0 failed, 0 skipped; nothing to integrate")
		require.EqualValues(t, 1, entries[1].GetWaveNumber())
		require.EqualValues(t, 2, entries[2].GetWaveNumber())
		require.Equal(t, "t2", entries[3].GetTaskId())

		got, waves := b.execution(t, e.GetId())
		require.EqualValues(t, 2, got.GetCurrentWave())
		require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED, waves[0].GetStatus())
		require.Equal(t, waves[0].GetBaseCommit(), waves[0].GetIntegrationCommit(), "nothing merged: integrated at its base")
		require.NotNil(t, waves[0].GetEndTime())
		require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_RUNNING, waves[1].GetStatus())
		require.Equal(t, waves[0].GetIntegrationCommit(), waves[1].GetBaseCommit())

		for next != nil {
			next = b.completeAndClaim(t, next, "")
		}
		got = b.waitEnded(t, e.GetId())
		require.EqualValues(t, 3, got.GetCompletedTasks())
		require.Empty(t, logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED),
			"no integration of a wave without commits")
	})
}

// A wave with a task commit still goes through its integration lease: the dependent is leased
// only once the integration completed, from the integration's commit, and the integration's
// completion opens the next wave in its transaction.
func TestAWaveWithACommitIsIntegratedBeforeItsDependentStarts(t *testing.T) {
	t.Parallel()
	const taskCommit, merged = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, chainOf("committing", 2)), strictWaves)
		c := b.claim(t, "agent-1", time.Second)
		require.Equal(t, "t1", c.GetAssignment().GetTaskId())
		integ := b.completeAndClaim(t, c, taskCommit)
		require.NotNil(t, integ)
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, integ.GetAssignment().GetKind())
		require.Len(t, integ.GetMerges(), 1)
		require.Equal(t, taskCommit, integ.GetMerges()[0].GetCommitSha())

		types, _, _ := after(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "t1")
		require.Equal(t, []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED,
			commonv1.EventType_EVENT_TYPE_LEASE_GRANTED}, types)
		_, waves := b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_INTEGRATING, waves[0].GetStatus())
		require.Nil(t, b.claim(t, "agent-2", 0), "the dependent waits for the integration")

		next := b.completeAndClaim(t, integ, merged)
		require.NotNil(t, next)
		require.Equal(t, "t2", next.GetAssignment().GetTaskId())
		types, times, entries := after(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, "")
		require.Equal(t, []commonv1.EventType{commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED,
			commonv1.EventType_EVENT_TYPE_WAVE_STARTED, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED}, types)
		for _, at := range times[1:] {
			require.True(t, at.Equal(times[0]), "one transaction: one store time (%s, %s)", times[0], at)
		}
		require.False(t, strings.Contains(entries[1].GetMessage(), "nothing to integrate"), entries[1].GetMessage())
		_, waves = b.execution(t, e.GetId())
		require.Equal(t, merged, waves[0].GetIntegrationCommit())
		require.Equal(t, merged, waves[1].GetBaseCommit(), "the dependent's wave starts from the integration")
	})
}

// A codebase validation level is an integration step: a wave without commits is still
// integrated (validated) by a lease, with no task commit to merge.
func TestACommitlessWaveWithValidationIsIntegrated(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := chainOf("validated", 2)
		spec.Validation = &schedulerv1.ValidationLevels{Codebase: &commonv1.TaskValidation{Command: "true"}}
		e := b.start(t, b.createList(t, spec), strictWaves)
		c := b.claim(t, "agent-1", time.Second)
		integ := b.completeAndClaim(t, c, "")
		require.NotNil(t, integ)
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, integ.GetAssignment().GetKind())
		require.Empty(t, integ.GetMerges())
		types, _, _ := after(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "t1")
		require.Equal(t, []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED,
			commonv1.EventType_EVENT_TYPE_LEASE_GRANTED}, types)
	})
}

// The commits a wave integrates are those of its completed tasks, whichever of its tasks ends
// last: here B (with a commit) and C (skipped by its agent) of the diamond's second wave, in
// both orders.
func TestAWaveIntegratesTheCommitsOfItsCompletedTasks(t *testing.T) {
	t.Parallel()
	const commit = "3333333333333333333333333333333333333333"
	for _, skippedLast := range []bool{false, true} {
		t.Run(fmt.Sprintf("skipped last %v", skippedLast), func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, st store.Store) {
				b := runBundle(t, st)
				b.start(t, b.createList(t, diamond(fmt.Sprintf("merges %v", skippedLast))), strictWaves)
				a := b.claim(t, "agent-1", time.Second)
				require.Equal(t, "A", a.GetAssignment().GetTaskId())
				first := b.completeAndClaim(t, a, "")
				second := b.claim(t, "agent-1", time.Second)
				held := map[string]*schedulerv1.ClaimedAssignment{first.GetAssignment().GetTaskId(): first, second.GetAssignment().GetTaskId(): second}
				require.Len(t, held, 2)
				skip := func() {
					c := held["C"].GetAssignment()
					_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetId(), InstanceId: c.GetInstanceId(),
						FencingToken: c.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SKIPPED, Tries: 1,
						Error: &commonv1.ErrorContext{Code: "NOTHING_TO_DO", Message: "already done"}})
					require.NoError(t, err)
				}
				if !skippedLast {
					skip()
				}
				integ := b.completeAndClaim(t, held["B"], commit)
				if skippedLast {
					require.Nil(t, integ, "C still runs")
					skip()
					integ = b.claim(t, "agent-1", time.Second)
				}
				require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, integ.GetAssignment().GetKind())
				require.EqualValues(t, 2, integ.GetAssignment().GetWaveNumber())
				require.Len(t, integ.GetMerges(), 1)
				require.Equal(t, "B", integ.GetMerges()[0].GetTaskId())
				require.Equal(t, commit, integ.GetMerges()[0].GetCommitSha())
			})
		})
	}
}
