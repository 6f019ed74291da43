package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A stored list is planned from its tasks prepared once: whatever its tasks' statuses (completed,
// skipped, blocked by a design change, and their dependents), the runnable tasks, their plan and
// the response are those of plan.FromSpec of the runnable list, PlanWaves' tasks those of
// plan.FromSpec of the list, and the list is prepared once.
func TestPlannedTasksAreThoseOfTheRunnableList(t *testing.T) {
	t.Parallel()
	s := &Server{}
	files := []string{"a.go", "b.go", "c/", "c/d.go", "e/**/*.go", "e/f.go"}
	statuses := []commonv1.TaskStatus{commonv1.TaskStatus_TASK_STATUS_PENDING, commonv1.TaskStatus_TASK_STATUS_PENDING,
		commonv1.TaskStatus_TASK_STATUS_COMPLETED, commonv1.TaskStatus_TASK_STATUS_SKIPPED, commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR}
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 1))
		spec := &schedulerv1.TaskListSpec{Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/r"}}}
		for i := range 1 + rng.IntN(60) {
			task := &commonv1.Task{Id: fmt.Sprintf("t%d", i), Title: "t", Priority: int32(rng.IntN(3))}
			for range rng.IntN(3) {
				if i > 0 {
					task.DependsOn = append(task.DependsOn, fmt.Sprintf("t%d", rng.IntN(i)))
				}
			}
			if rng.IntN(8) > 0 {
				task.Files = append(task.Files, &commonv1.FileImpact{Path: files[rng.IntN(len(files))]})
			}
			spec.Tasks = append(spec.Tasks, task)
		}
		tl := &store.TaskList{ID: fmt.Sprintf("list%d", seed), Spec: spec, CreateTime: time.Unix(1, 0)}
		for round := range 3 {
			for _, task := range spec.GetTasks() {
				task.Status = statuses[rng.IntN(len(statuses))]
			}
			what := fmt.Sprintf("seed %d round %d", seed, round)
			runnableSpec, _ := runnable(tl.Spec)
			want, _ := plan.FromSpec(runnableSpec, false)
			pr := s.plannedTasks(tl, runnableSpec)
			require.Len(t, pr.Tasks(), len(want), what)
			if len(want) == 0 {
				continue
			}
			require.Equal(t, want, pr.Tasks(), what)
			wantPlan, err := plan.Plan(want, 3)
			require.NoError(t, err, what)
			got, err := pr.Plan(t.Context(), 3, plan.DefaultBudget)
			require.NoError(t, err, what)
			require.True(t, proto.Equal(plan.Response(want, wantPlan, nil), plan.Response(pr.Tasks(), got, nil)), what)
		}
		for _, includeCompleted := range []bool{false, true} {
			what := fmt.Sprintf("seed %d, completed included %v", seed, includeCompleted)
			want, wantCompleted := plan.FromSpec(tl.Spec, includeCompleted)
			pr, completed := s.listTasks(tl, includeCompleted)
			require.Equal(t, wantCompleted, completed, what)
			require.Len(t, pr.Tasks(), len(want), what)
			if len(want) > 0 {
				require.Equal(t, want, pr.Tasks(), what)
			}
		}
		first := s.preparedList(tl)
		require.Same(t, first, s.preparedList(tl), "prepared once")
		again := &store.TaskList{ID: tl.ID, Spec: spec, CreateTime: time.Unix(2, 0)}
		require.NotSame(t, first, s.preparedList(again), "a list made again under the same id is prepared anew")
	}
}
