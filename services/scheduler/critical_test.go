package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// criticalList: R, S, U (wave 1), W (on S) and V (on U) (wave 2), Z (on V, wave 3), Z1 (on Z),
// Z2 (on Z1). The longest chains of dependents below each task: U 5, V 4, Z 3, S 2, and 1 for R
// and W. List order puts every short chain first.
func criticalList(name string) *schedulerv1.TaskListSpec {
	task := func(id string, deps ...string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true",
			File: id + ".txt", DependsOn: deps}
	}
	return &schedulerv1.TaskListSpec{Name: name, Tasks: []*commonv1.Task{
		task("R"), task("S"), task("U"), task("W", "S"), task("V", "U"), task("Z", "V"), task("Z1", "Z"), task("Z2", "Z1")}}
}

// A claim takes the task with the longest chain of dependents below it first (ninja's critical
// path), not the first in list order: within the open wave in both modes, and, in eager mode,
// among the ready tasks of later waves too (a wave-3 task on the critical path before a wave-2
// task nothing waits for).
func TestClaimsTakeTheCriticalPathFirst(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		for _, mode := range []schedulerv1.DispatchMode{schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES, schedulerv1.DispatchMode_DISPATCH_MODE_EAGER} {
			t.Run(mode.String(), func(t *testing.T) {
				b := runBundle(t, st)
				e := b.start(t, b.createList(t, criticalList("critical-"+mode.String())), &schedulerv1.ExecutionOptions{MaxParallel: 8, Dispatch: mode})
				require.EqualValues(t, 5, e.GetWaveCount())
				claim := func(instance string) *schedulerv1.ClaimedAssignment {
					c := b.claim(t, instance, 0)
					require.NotNil(t, c, instance)
					return c
				}
				complete := func(c *schedulerv1.ClaimedAssignment) {
					_, err := b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
					require.NoError(t, err)
				}
				u, s, r := claim("agent-1"), claim("agent-2"), claim("agent-3")
				require.Equal(t, []string{"U", "S", "R"}, []string{u.GetAssignment().GetTaskId(), s.GetAssignment().GetTaskId(), r.GetAssignment().GetTaskId()},
					"wave 1 by the chains below: U 5, S 2, R 1")
				if mode != schedulerv1.DispatchMode_DISPATCH_MODE_EAGER {
					return
				}
				// U and S complete without a commit; R runs on, wave 1 stays open.
				complete(u)
				complete(s)
				v := claim("agent-1")
				require.Equal(t, "V", v.GetAssignment().GetTaskId(), "V (chain 4) before W (chain 1), though W comes first in the list")
				complete(v)
				z := claim("agent-2")
				require.Equal(t, "Z", z.GetAssignment().GetTaskId(), "Z of wave 3 (chain 3) before W of wave 2 (chain 1)")
				require.EqualValues(t, 3, z.GetAssignment().GetWaveNumber())
				w := claim("agent-3")
				require.Equal(t, "W", w.GetAssignment().GetTaskId())
				for _, c := range []*schedulerv1.ClaimedAssignment{r, z, w} {
					complete(c)
				}
				require.Equal(t, []string{"Z1", "Z2"}, b.work(t, "agent-1", e.GetId(), succeed))
				got := b.waitEnded(t, e.GetId())
				require.EqualValues(t, 8, got.GetCompletedTasks(), got.GetStatusMessage())
			})
		}
	})
}
