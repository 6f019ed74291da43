package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/clustertest"
)

// TestSchedulerServesTheDashboard: converge-scheduler --dashboard, in a deployment of separate
// processes on Postgres and Redis with tokens configured, serves the dashboard, reading the
// Scheduler through its own gRPC address and the Verifier, Registry and Knowledge through theirs,
// always with the viewer's token: the Scheduler's own token (CONVERGE_TOKEN, which the services
// accept) is never lent to a viewer who has none.
func TestSchedulerServesTheDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the services' binaries on Postgres and Redis")
	}
	t.Parallel()
	const token = "deployment-secret"
	dash := clustertest.FreeAddr(t)
	c := clustertest.Start(t, clustertest.Options{Agents: 2, LogLevel: "warn",
		Env:           []string{"CONVERGE_AUTH_TOKENS=" + token, "CONVERGE_TOKEN=" + token},
		SchedulerArgs: []string{"--dashboard", dash}})
	conn, err := client.Dial(c.SchedulerAddr(0), client.Options{Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	sched := schedulerv1.NewSchedulerServiceClient(conn)
	ctx := t.Context()
	// A gotcha for the tasks' files: the agents give it to each prompt and say so in the log
	// (a prompt: the tasks run by an agent CLI, a script that reads it and writes the task's file
	// as Layered's command would; a command is given no knowledge).
	kconn, err := client.Dial(c.KnowledgeAddr, client.Options{Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kconn.Close() })
	know := knowledgev1.NewKnowledgeServiceClient(kconn)
	conf := 0.9
	repo := clustertest.GitRepo(t)
	gotcha, err := know.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA,
		Content: "end every out file with a newline", FilePattern: "out/*.txt", Confidence: &conf,
		Project: repo}) // a local repository's project is its path
	require.NoError(t, err)
	tl, err := sched.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: clustertest.Layered("dashboard", repo, 3, "0")})
	require.NoError(t, err)
	cli := `cat > /dev/null && mkdir -p out && echo "$CONVERGE_TASK_ID" > "$CONVERGE_TASK_FILE"`
	ex, err := sched.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
		Options: &schedulerv1.ExecutionOptions{Executor: &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{
			AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", "-c", cli}}}}}})
	require.NoError(t, err)
	id := ex.GetExecution().GetId()
	require.Eventually(t, func() bool {
		res, err := sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
		return err == nil && clustertest.Ended(res.GetExecution())
	}, 3*time.Minute, 100*time.Millisecond)

	// What task t001 found out, recorded as an agent would.
	_, err = know.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_DISCOVERY,
		Content: "out/ holds one file per task", FilePattern: "out/**", Source: &knowledgev1.Source{ExecutionId: id, TaskId: "t001"}})
	require.NoError(t, err)

	s := &suite{url: "http://" + dash}
	auth := "Authorization: Bearer " + token
	// No token: every page asks to sign in, whichever service it reads.
	for _, path := range []string{"/", "/runs/" + id, "/agents", "/knowledge", "/runs/" + id + "/verify"} {
		code, body := s.get(t, path)
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Contains(t, body, `name="token"`, path)
	}
	code, _ := s.do(t, http.MethodPost, "/runs/"+id+"/cancel", "reason=x")
	require.Equal(t, http.StatusUnauthorized, code)

	// With the token: the run, its tasks, the verify report (Verifier), agents and locks
	// (Registry), knowledge (Knowledge).
	code, body := s.get(t, "/", auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/runs/`+id+`"`)
	require.Contains(t, body, "COMPLETED")
	code, body = s.get(t, "/runs/"+id, auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-task="t002"`)
	code, body = s.get(t, "/runs/"+id+"/tasks/t001", auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "out/001.txt")
	// The task view: its prompt's makings, its checkpoint, the knowledge it was given (from the
	// agent's log event, looked up in Knowledge) and the knowledge it recorded.
	require.Contains(t, body, `id="prompt-h"`)
	require.Contains(t, body, "<code>test -s out/001.txt</code>", "the validation command")
	require.Contains(t, body, "checkpoint at ")
	received := body[strings.Index(body, "<h3>Received</h3>"):strings.Index(body, "<h3>Recorded</h3>")]
	require.Contains(t, received, gotcha.GetItem().GetId())
	require.Contains(t, received, "end every out file with a newline")
	require.Contains(t, body[strings.Index(body, "<h3>Recorded</h3>"):], "out/ holds one file per task")
	code, body = s.get(t, "/runs/"+id+"/verify", auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "F1")
	require.Contains(t, body, "CONVERGED")
	regConn, err := client.Dial(c.RegistryAddr, client.Options{Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = regConn.Close() })
	ag, err := registryv1.NewRegistryServiceClient(regConn).ListAgents(context.Background(), &registryv1.ListAgentsRequest{})
	require.NoError(t, err)
	require.Len(t, ag.GetAgents(), 2)
	code, body = s.get(t, "/agents", auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, ag.GetAgents()[0].GetInstanceId())
	code, body = s.get(t, "/knowledge", auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Knowledge")
	// A feature build (the build → verify loop): its list and its page with the iterations, the
	// criteria-progress chart and the exit report.
	fbRes, err := sched.StartFeatureBuild(ctx, &schedulerv1.StartFeatureBuildRequest{Feature: "dash-fb",
		TaskListSource: &schedulerv1.StartFeatureBuildRequest_TaskList{TaskList: clustertest.Layered("dash-fb", repo, 2, "0")}})
	require.NoError(t, err)
	fbID := fbRes.GetFeatureBuild().GetId()
	require.Eventually(t, func() bool {
		res, err := sched.GetFeatureBuild(ctx, &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: fbID}})
		st := res.GetFeatureBuild().GetStatus()
		return err == nil && st != schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING && st != schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING
	}, 3*time.Minute, 200*time.Millisecond)
	code, body = s.get(t, "/builds", auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `href="/builds/`+fbID+`"`)
	require.Contains(t, body, "dash-fb")
	code, _ = s.get(t, "/builds?status=bogus", auth)
	require.Equal(t, http.StatusBadRequest, code)
	code, body = s.get(t, "/builds/"+fbID, auth)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "SUCCESS", "the exit reason")
	require.Contains(t, body, `data-iteration="1"`)
	require.Contains(t, body, `<svg class="chart"`)
	require.Contains(t, body, "iteration 1: 100% of the automatic criteria passing")
	require.Contains(t, body, `id="exit-report"`)
	code, _ = s.get(t, "/builds/"+fbID)
	require.Equal(t, http.StatusUnauthorized, code)

	// Events replay from the Scheduler's stream.
	seqs, ended := readEvents(t, s.url+"/runs/"+id+"/events", auth)
	require.NotEmpty(t, seqs)
	require.True(t, ended)
}
