package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// eagerList: A and B (wave 1), Y (writes A's file: wave 2) and X (independent, wave 2 because
// max_parallel is 2), C (depends on A: wave 3). Ready waves: X 1, C 2, Y none (its own).
func eagerList(name string) *schedulerv1.TaskListSpec {
	task := func(id, file string, deps ...string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true",
			File: file, DependsOn: deps}
	}
	return &schedulerv1.TaskListSpec{Name: name, Tasks: []*commonv1.Task{
		task("A", "a.txt"), task("B", "b.txt"), task("Y", "a.txt"), task("X", "x.txt"), task("C", "c.txt", "A")}}
}

// seqOf is the seq of the first entry of type typ (of task, when task is not "") in log, or 0.
func seqOf(log []*commonv1.LogEntry, typ commonv1.EventType, task string, wave int32) int64 {
	for _, e := range log {
		if e.GetEventType() == typ && (task == "" || e.GetTaskId() == task) && (wave == 0 || e.GetWaveNumber() == wave) {
			return e.GetSeq()
		}
	}
	return 0
}

// Eager dispatch hands out a later wave's task as soon as what it depends on is integrated and
// nothing running or unintegrated before it touches its files; strict waves make it wait for its
// wave. The same steps on both modes, told apart by the order of the log's events.
func TestEagerDispatchStartsIndependentWorkBeforeItsWave(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		for _, mode := range []schedulerv1.DispatchMode{schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES, schedulerv1.DispatchMode_DISPATCH_MODE_EAGER} {
			eager := mode == schedulerv1.DispatchMode_DISPATCH_MODE_EAGER
			t.Run(mode.String(), func(t *testing.T) {
				b := runBundle(t, st)
				e := b.start(t, b.createList(t, eagerList("eager-"+mode.String())), &schedulerv1.ExecutionOptions{MaxParallel: 2, Dispatch: mode})
				require.Equal(t, mode, e.GetOptions().GetDispatch())
				require.EqualValues(t, 3, e.GetWaveCount())
				a := b.claim(t, "agent-1", 0)
				bb := b.claim(t, "agent-2", 0)
				require.Equal(t, []string{"A", "B"}, []string{a.GetAssignment().GetTaskId(), bb.GetAssignment().GetTaskId()})
				require.Nil(t, b.claim(t, "agent-3", 0), "max_parallel 2: two tasks run")
				_, err := b.complete(t.Context(), a, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
				require.NoError(t, err)

				// A slot is free while B (wave 1) runs.
				x := b.claim(t, "agent-3", 0)
				if !eager {
					require.Nil(t, x, "strict: wave 2 waits for wave 1")
					_, err = b.complete(t.Context(), bb, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
					require.NoError(t, err)
					order := b.work(t, "agent-1", e.GetId(), succeed)
					require.Len(t, order, 3)
					require.Equal(t, "C", order[2])
				} else {
					require.Equal(t, "X", x.GetAssignment().GetTaskId(), "eager: X depends on nothing and touches nothing of wave 1")
					require.EqualValues(t, 2, x.GetAssignment().GetWaveNumber(), "it stays a task of its wave")
					require.Nil(t, b.claim(t, "agent-4", 0), "Y writes A's file: it waits for wave 1's integration; max_parallel holds")
					_, err = b.complete(t.Context(), bb, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
					require.NoError(t, err)
					y := b.claim(t, "agent-2", 0)
					require.Equal(t, "Y", y.GetAssignment().GetTaskId(), "wave 1 integrated: wave 2 opens")
					_, err = b.complete(t.Context(), x, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
					require.NoError(t, err)
					c := b.claim(t, "agent-3", 0)
					require.Equal(t, "C", c.GetAssignment().GetTaskId(), "eager: C's dependency A is integrated; Y does not touch its file")
					for _, done := range []*schedulerv1.ClaimedAssignment{y, c} {
						_, err = b.complete(t.Context(), done, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
						require.NoError(t, err)
					}
				}
				got := b.waitEnded(t, e.GetId())
				require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, got.GetOutcome(), got.GetStatusMessage())
				require.EqualValues(t, 5, got.GetCompletedTasks())

				log := logOf(t, b, e.GetId())
				lease := func(task string) int64 { return seqOf(log, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, task, 0) }
				waveDone := func(n int32) int64 { return seqOf(log, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", n) }
				// Waves stay the unit of integration: completed in order, each once.
				require.Less(t, waveDone(1), waveDone(2))
				require.Less(t, waveDone(2), waveDone(3))
				// File conflicts and dependencies hold in both modes.
				require.Less(t, waveDone(1), lease("Y"))
				require.Less(t, seqOf(log, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "A", 0), lease("C"))
				if eager {
					require.Less(t, lease("X"), waveDone(1), "X started before wave 1 was integrated")
					require.Less(t, lease("C"), waveDone(2), "C started before wave 2 was integrated")
					require.Less(t, lease("C"), seqOf(log, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "Y", 0))
					for _, en := range log {
						if en.GetEventType() == commonv1.EventType_EVENT_TYPE_LEASE_GRANTED && (en.GetTaskId() == "X" || en.GetTaskId() == "C") {
							require.Equal(t, true, en.GetContext().AsMap()["eager"], en.GetMessage())
						}
					}
				} else {
					require.Less(t, waveDone(1), lease("X"))
					require.Less(t, waveDone(2), lease("C"))
				}
				// The reports: every task counted in its own wave.
				_, waves := b.execution(t, e.GetId())
				require.Len(t, waves, 3)
				for i, want := range []int32{2, 2, 1} {
					require.Equal(t, want, waves[i].GetCompletedCount(), "wave %d", i+1)
					require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED, waves[i].GetStatus())
				}
				require.Equal(t, seqOf(log, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "X", 2) > 0, true, "X's completion is wave 2's")
			})
		}
	})
}

// With free slots, eager dispatch still keeps a task back while a running task writes its file
// or a task it depends on is not integrated; both start once wave 1 is integrated.
func TestEagerDispatchRespectsConflictsAndDependencies(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		task := func(id, file string, deps ...string) *commonv1.Task {
			return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true", File: file, DependsOn: deps}
		}
		// A (wave 1), Y writes a.txt too (wave 2), D depends on A (wave 3, ready at wave 2).
		list := b.createList(t, &schedulerv1.TaskListSpec{Name: "conflicts", Tasks: []*commonv1.Task{task("A", "a.txt"), task("Y", "a.txt"), task("D", "d.txt", "A")}})
		e := b.start(t, list, nil)
		require.Equal(t, schedulerv1.DispatchMode_DISPATCH_MODE_EAGER, e.GetOptions().GetDispatch(), "eager is the default")
		a := b.claim(t, "agent-1", 0)
		require.Equal(t, "A", a.GetAssignment().GetTaskId())
		require.Nil(t, b.claim(t, "agent-2", 0), "Y conflicts with A, which runs; D's dependency A is not integrated")
		_, err := b.complete(t.Context(), a, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
		y := b.claim(t, "agent-2", 0)
		d := b.claim(t, "agent-3", 0)
		require.Equal(t, "Y", y.GetAssignment().GetTaskId())
		require.Equal(t, "D", d.GetAssignment().GetTaskId(), "D runs alongside Y, before wave 2 is integrated")
		require.EqualValues(t, 3, d.GetAssignment().GetWaveNumber())
		for _, c := range []*schedulerv1.ClaimedAssignment{d, y} {
			_, err = b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
			require.NoError(t, err)
		}
		got := b.waitEnded(t, e.GetId())
		require.EqualValues(t, 3, got.GetCompletedTasks())
		log := logOf(t, b, e.GetId())
		require.Less(t, seqOf(log, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "D", 0), seqOf(log, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", 2))
	})
}
