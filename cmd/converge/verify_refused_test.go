package main

// Issue 12 defect 5 end to end: the real Verifier refuses Verify Done (the criteria hold an http
// check by path and the target has no base URL), and the Scheduler ends the run BLOCKED at once
// with the Verifier's code and message, instead of asking again every round forever.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler"
	schedulersqlite "github.com/converge-dev/converge/services/scheduler/store/sqlite"
	"github.com/converge-dev/converge/services/verifier"
	verifiersqlite "github.com/converge-dev/converge/services/verifier/store/sqlite"
)

func TestRefusingVerifierEndsTheRunBlockedAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	vst, err := verifiersqlite.New(ctx, dbtest.SQLite(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = vst.Close() })
	vconn := servertest.Serve(t, server.Config{Name: "verifier-test",
		Services: []server.Service{{Desc: &verifierv1.VerifierService_ServiceDesc, Impl: verifier.New(vst), Ready: vst.Ping}}})

	sst, err := schedulersqlite.New(ctx, dbtest.SQLite(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sst.Close() })
	s := scheduler.New(sst, scheduler.WithVerifier(verifierv1.NewVerifierServiceClient(vconn)),
		scheduler.WithWorkDir(t.TempDir()), scheduler.WithDriverInterval(20*time.Millisecond))
	s.Start(ctx)
	sconn := servertest.Serve(t, server.Config{Name: "scheduler-test",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: sst.Ping}}})
	client := schedulerv1.NewSchedulerServiceClient(sconn)

	list, err := client.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: &schedulerv1.TaskListSpec{
		Name: "refused",
		Tasks: []*commonv1.Task{{Id: "1", Title: "one", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN,
			File: "out.txt"}},
		// No app is started, so the target has no base URL: the Verifier refuses the request.
		DoneCriteria: "## F1: healthy\nTag: AUTO_VERIFY\n```check\nhttp:\n  path: /healthz\n  expect:\n    status: 200\n```\n",
	}})
	require.NoError(t, err)
	started, err := client.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: list.GetTaskList().GetId()})
	require.NoError(t, err)
	id := started.GetExecution().GetId()

	// One agent by hand: claim the task and complete it.
	claimed, err := client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "agent-1",
		Capabilities: []string{"executor:command", "integration"}, Wait: durationpb.New(10 * time.Second)})
	require.NoError(t, err)
	a := claimed.GetAssignment().GetAssignment()
	require.NotNil(t, a)
	_, err = client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: "agent-1",
		FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1})
	require.NoError(t, err)

	var e *schedulerv1.Execution
	require.Eventually(t, func() bool {
		res, err := client.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
		require.NoError(t, err)
		e = res.GetExecution()
		return e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED
	}, 20*time.Second, 20*time.Millisecond, "the run ends instead of waiting for the Verifier forever")
	require.Equal(t, commonv1.Outcome_OUTCOME_BLOCKED, e.GetOutcome())
	const want = "the Verifier refused the request: InvalidArgument"
	require.Contains(t, e.GetStatusMessage(), want)
	require.Contains(t, e.GetVerification().GetBlockReason(), want)
	require.Contains(t, e.GetStatusMessage(), "needs target.base_url", "the Verifier's own message")

	log, err := client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: id,
		EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_VERDICT, commonv1.EventType_EVENT_TYPE_WARNING}})
	require.NoError(t, err)
	require.Len(t, log.GetEntries(), 1, "one verdict, no retries")
	require.Contains(t, log.GetEntries()[0].GetMessage(), want)
}
