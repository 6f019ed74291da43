package scheduler

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// waveTasks renders waves as lists of task ids.
func waveTasks(res *schedulerv1.PlanWavesResponse) [][]string {
	var out [][]string
	for _, w := range res.GetWaves() {
		var ids []string
		for _, p := range w.GetPlacements() {
			ids = append(ids, p.GetTaskId())
		}
		out = append(out, ids)
	}
	return out
}

func TestPlanWavesOfAStoredList(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := setup(t, st)
		_, err := b.client.ImportTaskList(t.Context(), &schedulerv1.ImportTaskListRequest{
			Format:     schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD,
			Content:    example(t, "habit-tracker.tasks.md"),
			TaskListId: "habits",
		})
		require.NoError(t, err)

		res, err := b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{Source: &schedulerv1.PlanWavesRequest_TaskListId{TaskListId: "habits"}})
		require.NoError(t, err)
		// 1.1 is done; 2.1 and 2.2 both write api/routes.go; 2.3 comes after both.
		require.Equal(t, [][]string{{"1.2", "1.3"}, {"2.1"}, {"2.2"}, {"2.3"}}, waveTasks(res))
		require.Equal(t, []string{"1.1"}, res.GetCompletedTaskIds())
		require.EqualValues(t, 5, res.GetTaskCount())
		require.EqualValues(t, 3, res.GetLevelCount())

		p := res.GetWaves()[2].GetPlacements()[0]
		require.True(t, proto.Equal(&schedulerv1.WavePlacement{
			TaskId:             "2.2",
			Reason:             schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT,
			DependencyLevel:    1,
			ConflictingTaskIds: []string{"2.1"},
			ConflictingPaths:   []string{"api/routes.go"},
			Message:            "file conflict with 2.1 on api/routes.go (wave 2)",
		}, p), "%v", p)
		first := res.GetWaves()[0].GetPlacements()[0]
		require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL, first.GetReason())
		require.Equal(t, "dependency level 0: waits for no task", first.GetMessage())

		// With the completed task, and one task per wave.
		all, err := b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{
			Source:           &schedulerv1.PlanWavesRequest_TaskListId{TaskListId: "habits"},
			IncludeCompleted: true,
			MaxParallel:      1,
		})
		require.NoError(t, err)
		require.Equal(t, [][]string{{"1.1"}, {"1.2"}, {"1.3"}, {"2.1"}, {"2.2"}, {"2.3"}}, waveTasks(all))
		require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_MAX_PARALLEL, all.GetWaves()[2].GetPlacements()[0].GetReason())

		_, err = b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{Source: &schedulerv1.PlanWavesRequest_TaskListId{TaskListId: "nope"}})
		requireCode(t, err, codes.NotFound)
	})
}

func TestPlanWavesOfAnInlineList(t *testing.T) {
	t.Parallel()
	b := setup(t, backends["sqlite"](t))
	res, err := b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{
		Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: smallList()},
	})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"1.1"}, {"1.2"}, {"1.3"}}, waveTasks(res))
	require.Equal(t, 0, listCount(t, b), "an inline list is not stored")

	// Readers share a wave; a directory conflicts with the files under it.
	res, err = b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{
		Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{
			{Id: "r1", Title: "read", Files: []*commonv1.FileImpact{{Path: "go.mod", Operation: commonv1.FileOperation_FILE_OPERATION_READ}}},
			{Id: "r2", Title: "read", Files: []*commonv1.FileImpact{{Path: "go.mod", Operation: commonv1.FileOperation_FILE_OPERATION_READ}}},
			{Id: "dir", Title: "docs", Files: []*commonv1.FileImpact{{Path: "docs/"}}},
			{Id: "file", Title: "one doc", File: "docs/api/index.md"},
		}}},
	})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"r1", "r2", "dir"}, {"file"}}, waveTasks(res))

	_, err = b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{
		Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{
			{Id: "1.1", Title: "a", DependsOn: []string{"1.3"}},
			{Id: "1.3", Title: "c", DependsOn: []string{"1.1"}},
		}}},
	})
	requireViolations(t, err, map[string]string{"task_list.tasks[0].depends_on[0]": "dependency cycle: 1.1 → 1.3 → 1.1"})
}

// Issue 12 defect 12: in a list with a repository, a task that declares no files is check-only:
// PlanWaves puts it alone in its wave and says why; without a repository it shares a wave.
func TestPlanWavesPutsACheckOnlyTaskAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, backends["sqlite"](t))
	spec := func(repo *schedulerv1.Repository) *schedulerv1.TaskListSpec {
		return &schedulerv1.TaskListSpec{Repository: repo, Tasks: []*commonv1.Task{
			{Id: "1", Title: "write a", File: "a.go"},
			{Id: "2", Title: "run the tests", Command: "go test ./...", Action: commonv1.TaskAction_TASK_ACTION_RUN},
			{Id: "3", Title: "write b", File: "b.go"},
		}}
	}
	res, err := b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{
		Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: spec(&schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/srv/repo"}})}})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"1", "3"}, {"2"}}, waveTasks(res))
	pl := res.GetWaves()[1].GetPlacements()[0]
	require.Equal(t, schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT, pl.GetReason())
	require.Equal(t, []string{"1"}, pl.GetConflictingTaskIds())
	require.Contains(t, pl.GetMessage(), "declares no files in a list with a repository: a check-only task conflicts with every other task, so it runs alone in its wave")

	res, err = b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{
		Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: spec(nil)}})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"1", "2", "3"}}, waveTasks(res), "no repository: scratch dirs, no conflicts")
}

// Issue 14 part 8: planning is bounded. A list whose globs must be compared segment by segment
// with every glob of a wave costs more than the plan's operations budget: PlanWaves answers ResourceExhausted with the figure, at once, instead
// of planning for a minute.
func TestPlanWavesRefusesAPlanOverItsBudget(t *testing.T) {
	t.Parallel()
	st := backends["sqlite"](t)
	conn := servertest.Serve(t, server.Config{Name: "scheduler-test", Services: []server.Service{{
		Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: New(st, WithPlanBudget(20_000)), Ready: st.Ping}}})
	c := schedulerv1.NewSchedulerServiceClient(conn)
	spec := &schedulerv1.TaskListSpec{}
	for i := range 200 {
		task := &commonv1.Task{Id: fmt.Sprintf("t%d", i), Title: "globs"}
		for j := range 20 {
			task.Files = append(task.Files, &commonv1.FileImpact{Path: fmt.Sprintf("src/*%d_%d/**", i, j)})
		}
		spec.Tasks = append(spec.Tasks, task)
	}
	_, err := c.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: spec}})
	requireCode(t, err, codes.ResourceExhausted)
	require.Contains(t, status.Convert(err).Message(), "operations, its budget")
	require.Contains(t, status.Convert(err).Message(), "of 200 tasks placed")

	// The default budget plans it.
	b := setup(t, backends["sqlite"](t))
	res, err := b.client.PlanWaves(t.Context(), &schedulerv1.PlanWavesRequest{Source: &schedulerv1.PlanWavesRequest_TaskList{TaskList: spec}})
	require.NoError(t, err)
	require.Len(t, res.GetWaves(), 50, "the globs part at their literal suffixes: four tasks a wave")
}
