package dashboard

import (
	"context"
	"net/http"
	"slices"

	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// maxTaskKnowledge bounds the knowledge items a task view looks up or lists.
const maxTaskKnowledge = 50

// taskPage shows one task: what its prompt is made of (the task as the list defines it), its
// assignments (one per wave it ran in) with tries, errors, output tails and files, its checkpoints,
// the knowledge its tries were given and the knowledge it recorded, the handoff context when it
// was escalated, and its log.
func (d *Dashboard) taskPage(w http.ResponseWriter, r *http.Request) {
	ctx := d.readCtx(r)
	id, task := r.PathValue("id"), r.PathValue("task")
	ex, err := d.sched.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	as, err := d.assignments(ctx, &schedulerv1.ListAssignmentsRequest{ExecutionId: id, TaskId: task})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	if len(as) == 0 {
		w.WriteHeader(http.StatusNotFound)
		d.render(w, r, "error", map[string]any{"Code": "NotFound", "Message": "task " + task + " is not in execution " + id})
		return
	}
	lg, err := d.sched.GetExecutionLog(ctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: id, TaskId: task, Limit: 500, Tail: true})
	if err != nil {
		d.fail(w, r, err)
		return
	}
	data := map[string]any{"Title": "Task " + task, "Run": ex.GetExecution(), "Task": task, "Assignments": as,
		"Current": as[len(as)-1], "Log": lg.GetEntries()}
	// The task's definition: what every prompt of it is built from. A list that cannot be read
	// (deleted since) leaves the section out.
	if tl, err := d.sched.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: ex.GetExecution().GetTaskListId(),
		View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL}); err == nil {
		for _, t := range tl.GetTaskList().GetSpec().GetTasks() {
			if t.GetId() == task {
				data["Def"] = t
			}
		}
	}
	var checkpoints []*commonv1.LogEntry
	var given []string
	for _, e := range lg.GetEntries() {
		switch e.GetEventType() {
		case commonv1.EventType_EVENT_TYPE_CHECKPOINT_CREATED, commonv1.EventType_EVENT_TYPE_CHECKPOINT_RESTORED:
			checkpoints = append(checkpoints, e)
		case commonv1.EventType_EVENT_TYPE_INFO:
			for _, v := range e.GetContext().GetFields()["knowledge_item_ids"].GetListValue().GetValues() {
				if s := v.GetStringValue(); s != "" && !slices.Contains(given, s) && len(given) < maxTaskKnowledge {
					given = append(given, s)
				}
			}
		}
	}
	data["Checkpoints"] = checkpoints
	data["Received"], data["Recorded"], data["KnowledgeError"] = d.taskKnowledge(ctx, id, task, given)
	if ex.GetExecution().GetEscalatedTaskId() == task {
		if h, err := d.sched.GetHandoffContext(ctx, &schedulerv1.GetHandoffContextRequest{ExecutionId: id, TaskId: task}); err == nil {
			data["Handoff"] = h
		}
	}
	data["Diff"], data["DiffNote"] = d.taskDiff(ctx, id, task)
	data["DiffLimit"] = taskDiffBytes
	d.render(w, r, "task", data)
}

// taskKnowledge reads the items a task's tries were given (by id, from the agents' log events)
// and the items it recorded (Knowledge's newest items whose source is this task). Knowledge not
// answering is said on the page, not an error of the page.
func (d *Dashboard) taskKnowledge(ctx context.Context, execution, task string, given []string) (received, recorded []*knowledgev1.Item, errMsg string) {
	for _, id := range given {
		res, err := d.know.GetItem(ctx, &knowledgev1.GetItemRequest{Id: id})
		if err != nil {
			received = append(received, &knowledgev1.Item{Id: id, Content: "(" + errText(err) + ")"})
			continue
		}
		received = append(received, res.GetItem())
	}
	res, err := d.know.ListItems(ctx, &knowledgev1.ListItemsRequest{PageSize: 1000})
	if err != nil {
		return received, nil, errText(err)
	}
	for _, it := range res.GetItems() {
		if it.GetSource().GetExecutionId() == execution && it.GetSource().GetTaskId() == task && len(recorded) < maxTaskKnowledge {
			recorded = append(recorded, it)
		}
	}
	return received, recorded, ""
}

// errText is a failed call in the API's words.
func errText(err error) string {
	st := status.Convert(err)
	return st.Code().String() + ": " + st.Message()
}
