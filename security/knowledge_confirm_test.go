package security

// Finding 10, the rest: a provisional item (recorded by a principal that is not an operator) is
// capped below the injection threshold until a second principal confirms it or a task given it
// passes. The agent logs the items given to each try's prompt; on a passing task the Scheduler
// (its own principal, never the recorder) confirms them; a failing task confirms nothing, and
// neither does a command task, which reads no prompt and so is given no knowledge. Against the
// real binaries.

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/clustertest"
)

func TestFinding10APassingTaskConfirmsTheProvisionalItemsItWasGiven(t *testing.T) {
	t.Parallel()
	path := writeAuthFile(t)
	c := clustertest.Start(t, clustertest.Options{Agents: 1, WaitAgents: true, Without: []string{"verifier"},
		Env: []string{"CONVERGE_AUTH_FILE=" + path, "CONVERGE_TOKEN=" + tokenOf(principalOf(auth.RoleOperator))}})
	repo := clustertest.GitRepo(t)
	abs, err := filepath.Abs(repo)
	require.NoError(t, err)
	kc := knowledgev1.NewKnowledgeServiceClient(dialAs(t, c.KnowledgeAddr, principalOf(auth.RoleKnowledgeClient)))
	record := func(file string) *knowledgev1.Item {
		res, err := kc.RecordItem(t.Context(), &knowledgev1.RecordItemRequest{Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA,
			Content: "write " + file + " with a trailing newline", FilePattern: file, Confidence: new(0.9), Project: filepath.Clean(abs)})
		require.NoError(t, err)
		require.True(t, res.GetItem().GetProvisional())
		return res.GetItem()
	}
	good, bad, plain := record("good.txt"), record("bad.txt"), record("plain.txt")

	sched := schedulerv1.NewSchedulerServiceClient(dialAs(t, c.SchedulerAddr(0), principalOf(auth.RoleOperator)))
	// An agent CLI that reads its prompt on its standard input, checks the gotcha of file is in
	// it and writes file, as the task's command would.
	agentCLI := func(file string) *commonv1.ExecutorSpec {
		script := `grep -F 'write ` + file + ` with a trailing newline' >/dev/null && echo ` + file + ` > ` + file
		return &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", "-c", script}}}}
	}
	// execute runs task alone in a list of its own, by executor (nil: the task's command).
	execute := func(task *commonv1.Task, executor *commonv1.ExecutorSpec) (*schedulerv1.Execution, []*commonv1.LogEntry) {
		spec := &schedulerv1.TaskListSpec{Name: "confirm-" + task.GetId(),
			Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"}, Tasks: []*commonv1.Task{task}}
		tl, err := sched.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: spec})
		require.NoError(t, err)
		ex, err := sched.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId(),
			Options: &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0), KnowledgeMinConfidence: proto.Float64(0.1), Executor: executor}})
		require.NoError(t, err)
		id := ex.GetExecution().GetId()
		var e *schedulerv1.Execution
		require.True(t, clustertest.Eventually(2*time.Minute, func() bool {
			res, err := sched.GetExecution(t.Context(), &schedulerv1.GetExecutionRequest{ExecutionId: id})
			e = res.GetExecution()
			return err == nil && clustertest.Ended(e)
		}), "the execution did not end: %v", e)
		log, err := clustertest.ExecutionLog(t.Context(), sched, id)
		require.NoError(t, err)
		return e, log
	}
	given := func(log []*commonv1.LogEntry) []string {
		var ids []string
		for _, e := range log {
			for _, v := range e.GetContext().GetFields()["knowledge_item_ids"].GetListValue().GetValues() {
				ids = append(ids, v.GetStringValue())
			}
		}
		return ids
	}
	get := func(id string) *knowledgev1.Item {
		res, err := kc.GetItem(t.Context(), &knowledgev1.GetItemRequest{Id: id})
		require.NoError(t, err)
		return res.GetItem()
	}

	// A failing task given the bad item: it stays provisional.
	e, log := execute(&commonv1.Task{Id: "bad", Title: "write bad.txt", File: "bad.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE,
		Validation: &commonv1.TaskValidation{Command: "false"}}, agentCLI("bad.txt"))
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, e.GetStatus(), logText(log))
	require.True(t, slices.Contains(given(log), bad.GetId()), "the failing task was given the item: %s", logText(log))
	require.True(t, get(bad.GetId()).GetProvisional(), "a failing task confirms nothing")

	// A passing command task on the plain item's file: a command reads no prompt, so it is given
	// nothing and its passing is no evidence for the item.
	e, log = execute(&commonv1.Task{Id: "plain", Title: "write plain.txt", File: "plain.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE,
		Command: "echo plain > plain.txt", Validation: &commonv1.TaskValidation{Command: "test -s plain.txt"}}, nil)
	require.Contains(t, logText(log), "Task plain: write plain.txt completed", "%s: %s", e.GetStatus(), logText(log))
	require.Empty(t, given(log), "a command task is given no knowledge: %s", logText(log))

	// A passing task given the good item: confirmed by the Scheduler's principal, cap lifted.
	e, log = execute(&commonv1.Task{Id: "good", Title: "write good.txt", File: "good.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE,
		Validation: &commonv1.TaskValidation{Command: "test -s good.txt"}}, agentCLI("good.txt"))
	// (The run itself ends BLOCKED: this cluster has no Verifier for its Done check.)
	require.Contains(t, logText(log), "Task good: write good.txt completed", "%s: %s", e.GetStatus(), logText(log))
	require.True(t, slices.Contains(given(log), good.GetId()), "the passing task was given the item: %s", logText(log))
	// The confirmation happens off CompleteTask's path (the Scheduler's outbox worker): soon after.
	var it *knowledgev1.Item
	require.True(t, clustertest.Eventually(time.Minute, func() bool {
		it = get(good.GetId())
		return !it.GetProvisional()
	}), "a passing task confirms the provisional item it was given")
	require.Equal(t, principalOf(auth.RoleOperator), it.GetConfirmedBy(), "confirmed by the Scheduler's principal")
	require.Greater(t, it.GetConfidence(), 0.5, "above the cap now")
	require.True(t, get(bad.GetId()).GetProvisional(), "the failed task's item is still provisional")
	// The plain task completed before the good one, whose confirmation has come.
	require.True(t, get(plain.GetId()).GetProvisional(), "the passing command task's file's item is still provisional")
}
