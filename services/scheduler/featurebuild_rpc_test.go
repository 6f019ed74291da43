package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The RPCs' own rules: dry run, validation, one running build per feature, get, list, cancel and
// resume.
func TestFeatureBuildRPCs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		// A Verifier whose first verdict is BLOCKED, the next CONVERGED; no agent yet.
		v := &loopVerifier{failing: func(int) []string { return nil }, blocked: func(n int) bool { return n == 1 }}
		b := bundleWith(t, st, WithVerifier(serveVerifier(t, v)))
		list := b.createList(t, diamond("feature"))

		// Dry run: the waves and the criteria, nothing stored.
		dry, err := b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", DryRun: true,
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskList{TaskList: diamond("inline")}, DoneCriteria: loopDoneCriteria})
		require.NoError(t, err)
		require.Empty(t, dry.GetFeatureBuild().GetId())
		require.Len(t, dry.GetPlannedWaves(), 3)
		require.EqualValues(t, 3, dry.GetCriteria().GetTotal())
		require.EqualValues(t, 3, dry.GetCriteria().GetAutoVerify())
		builds, err := b.client.ListFeatureBuilds(ctx, &schedulerv1.ListFeatureBuildsRequest{})
		require.NoError(t, err)
		require.Empty(t, builds.GetFeatureBuilds(), "a dry run stores nothing")
		require.Equal(t, 1, listCount(t, b), "not even its inline list")

		// Bad requests.
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export",
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: list}})
		requireCode(t, err, codes.FailedPrecondition) // no done-criteria anywhere
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", DoneCriteria: "# x\nBROKEN",
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: list}})
		requireViolations(t, err, map[string]string{"done_criteria:L2": `unknown check kind "ftp"`})
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", DoneCriteria: loopDoneCriteria,
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: "nope"}})
		requireCode(t, err, codes.NotFound)
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", Resume: true})
		requireCode(t, err, codes.NotFound) // nothing to resume
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "bad key!", DoneCriteria: loopDoneCriteria,
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: list}})
		requireCode(t, err, codes.InvalidArgument)
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", DoneCriteria: loopDoneCriteria,
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: list}, MaxTokens: -1, MaxCostUsdMicros: -5})
		requireViolations(t, err, map[string]string{"max_tokens": "must be greater than or equal to 0", "max_cost_usd_micros": "must be greater than or equal to 0"})

		// One running build per feature.
		fb := b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "export", TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: list}})
		require.Equal(t, schedulerv1.Autonomy_AUTONOMY_DEFAULT, fb.GetAutonomy())
		require.Equal(t, []string{".env*", "**/.env*", ".git/**"}, fb.GetScopeGuards().GetBlocklistGlobs())
		require.EqualValues(t, 5, fb.GetMaxIterations())
		require.Len(t, fb.GetDoneCriteriaSha256(), 64)
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", DoneCriteria: loopDoneCriteria,
			TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: list}})
		requireCode(t, err, codes.FailedPrecondition)
		_, err = b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", Resume: true})
		requireCode(t, err, codes.FailedPrecondition) // it has not ended

		// Get by id and by feature; list by feature and status.
		got, err := b.client.GetFeatureBuild(ctx, &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_Feature{Feature: "export"}})
		require.NoError(t, err)
		require.Equal(t, fb.GetId(), got.GetFeatureBuild().GetId())
		_, err = b.client.GetFeatureBuild(ctx, &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_Feature{Feature: "other"}})
		requireCode(t, err, codes.NotFound)
		running := b.waitRunning(t, fb.GetId())
		require.NotEmpty(t, running.GetCurrentExecutionId())
		builds, err = b.client.ListFeatureBuilds(ctx, &schedulerv1.ListFeatureBuildsRequest{Feature: "export",
			Statuses: []schedulerv1.FeatureBuildStatus{schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING}})
		require.NoError(t, err)
		require.Len(t, builds.GetFeatureBuilds(), 1)

		// Cancel: the build and its execution; idempotent.
		c, err := b.client.CancelFeatureBuild(ctx, &schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: fb.GetId(), Reason: "wrong branch"})
		require.NoError(t, err)
		require.Equal(t, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED, c.GetFeatureBuild().GetStatus())
		require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_CANCELLED, c.GetFeatureBuild().GetExitReason())
		require.Contains(t, c.GetFeatureBuild().GetExitMessage(), "wrong branch")
		ex, _ := b.execution(t, running.GetCurrentExecutionId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, ex.GetStatus())
		_, err = b.client.CancelFeatureBuild(ctx, &schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: fb.GetId()})
		require.NoError(t, err)
		_, err = b.client.CancelFeatureBuild(ctx, &schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: "fb_nope"})
		requireCode(t, err, codes.NotFound)

		// Resume of the cancelled build: the same build goes on, resume_count 1.
		res, err := b.client.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "export", Resume: true})
		require.NoError(t, err)
		require.Equal(t, fb.GetId(), res.GetFeatureBuild().GetId())
		require.EqualValues(t, 1, res.GetFeatureBuild().GetResumeCount())
		require.Equal(t, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING, res.GetFeatureBuild().GetStatus())
		_, err = b.client.CancelFeatureBuild(ctx, &schedulerv1.CancelFeatureBuildRequest{FeatureBuildId: fb.GetId()})
		require.NoError(t, err)
	})
}

// waitRunning polls until the build runs an execution.
func (b *testBundle) waitRunning(t *testing.T, id string) *schedulerv1.FeatureBuild {
	t.Helper()
	var fb *schedulerv1.FeatureBuild
	require.Eventually(t, func() bool {
		res, err := b.client.GetFeatureBuild(t.Context(), &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: id}})
		require.NoError(t, err)
		fb = res.GetFeatureBuild()
		return fb.GetCurrentExecutionId() != ""
	}, 20*time.Second, 10*time.Millisecond)
	return fb
}

// What fixed a criterion is recorded under the project the agents Prime with: a clone URL's
// host/path however it is written, a local repository's absolute path, a scratch list's id.
func TestFixKnowledgeProjectIsTheAgents(t *testing.T) {
	t.Parallel()
	byURL := func(u string) *schedulerv1.Repository {
		return &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: u}}
	}
	require.Equal(t, "github.com/acme/shop", projectOfRepo(byURL("https://u:secret@GitHub.com/acme/shop.git"), "tl_1"))
	require.Equal(t, "github.com/acme/shop", projectOfRepo(byURL("git@github.com:acme/shop"), "tl_1"))
	require.Equal(t, "/srv/app", projectOfRepo(&schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/srv/app/"}}, "tl_1"))
	require.Equal(t, "tasklist:tl_1", projectOfRepo(nil, "tl_1"))
}

// An agent that escalates STUCK (three consecutive failures of a task) ends the build ESCALATED
// STUCK naming the agent and the task, with the escalation report: no fix iteration is started
// for a task an agent gave up on.
func TestFeatureBuildAgentStuckExitsStuck(t *testing.T) {
	t.Parallel()
	v := &loopVerifier{failing: func(int) []string { return nil }}
	b := bundleWith(t, backends["sqlite"](t), WithVerifier(serveVerifier(t, v)))
	fb := b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "stuck"})
	c := b.claimWithin(t, "agent-3", "", 30*time.Second)
	_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
		InstanceId: "agent-3", FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, Tries: 4,
		ConsecutiveFailures: 3, Error: &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "tests fail"}})
	require.NoError(t, err)
	fb = b.waitBuild(t, fb.GetId())
	require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_STUCK, fb.GetExitReason(), fb.GetExitMessage())
	require.Equal(t, commonv1.Outcome_OUTCOME_ESCALATED, fb.GetOutcome())
	require.Len(t, fb.GetIterations(), 1)
	require.Contains(t, fb.GetExitMessage(), "Agent agent-3 escalated STUCK on task A in iteration 1")
	require.Contains(t, fb.GetExitMessage(), "## Build Feature - ESCALATED")
	require.Contains(t, fb.GetExitMessage(), "converge build stuck --resume")
}
