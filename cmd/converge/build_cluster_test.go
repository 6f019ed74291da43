package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// The build-feature loop is leader-driven: a Scheduler replica killed -9 mid-build (the one that
// leads, so the loop's driver dies with it) does not stop the build; the other replica takes the
// lead and runs it to CONVERGED in 2 iterations (examples/feature-loop with its scripted fixer).
func TestClusterFeatureBuildSurvivesASchedulerKill(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2)
	repo := featureLoopRepo(t)
	tasks, err := os.ReadFile(featureLoopTasks)
	require.NoError(t, err)
	criteria, err := os.ReadFile(featureLoopCriteria)
	require.NoError(t, err)
	fixer, err := filepath.Abs(filepath.Join(featureLoop, "fixer.sh"))
	require.NoError(t, err)

	// The leader: the replica whose log says it leads.
	leader := -1
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		for i := range c.Schedulers() {
			if strings.Contains(c.Scheduler(i).Output(), "this replica leads") {
				leader = i
				return true
			}
		}
		return false
	}), "no replica leads")
	survivor := 1 - leader
	client := c.SchedulerClient(survivor)

	tl, err := client.ImportTaskList(t.Context(), &schedulerv1.ImportTaskListRequest{Format: schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, Content: tasks,
		Base: &schedulerv1.TaskListSpec{Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}}}})
	require.NoError(t, err)
	res, err := client.StartFeatureBuild(t.Context(), &schedulerv1.StartFeatureBuildRequest{Feature: "inventory-export", DoneCriteria: string(criteria),
		TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: tl.GetTaskList().GetId()},
		Options: &schedulerv1.ExecutionOptions{AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(500 * time.Millisecond)}, Executor: &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{
			AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", fixer}}}}}})
	require.NoError(t, err)
	id := res.GetFeatureBuild().GetId()
	get := func() *schedulerv1.FeatureBuild {
		got, err := client.GetFeatureBuild(t.Context(), &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: id}})
		require.NoError(t, err)
		return got.GetFeatureBuild()
	}

	// Kill the leader once it has started iteration 1.
	require.True(t, clustertest.Eventually(60*time.Second, func() bool { return get().GetCurrentExecutionId() != "" }), "iteration 1 did not start")
	c.Scheduler(leader).Kill()
	killedAt := time.Now()

	var fb *schedulerv1.FeatureBuild
	ok := clustertest.Eventually(3*time.Minute, func() bool {
		fb = get()
		return fb.GetEndTime() != nil
	})
	if !ok {
		c.Dump(60)
	}
	require.True(t, ok, "the build did not end: %v", fb)
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, fb.GetOutcome(), fb.GetExitMessage())
	require.Len(t, fb.GetIterations(), 2)
	require.Contains(t, c.Scheduler(survivor).Output(), "this replica leads")
	t.Logf("leader scheduler-%d killed during iteration %d; scheduler-%d led the build to CONVERGED %.1fs later",
		leader, 1, survivor, time.Since(killedAt).Seconds())
	require.Contains(t, clustertest.Git(t, repo, "show", "converge/"+id+":export.sh"), "No items to export")
}
