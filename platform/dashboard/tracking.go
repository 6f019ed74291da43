package dashboard

import (
	"context"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// trackingRow is one task's row of the run view's tracking table: the tasks.md "Execution
// Tracking" table that `converge run` writes back and `converge status` prints (task, title, its
// status in the list, tries, commit, why it did not complete).
type trackingRow struct {
	TaskID, Title, Status, Commit, Note string
	Tries                               int32
}

// tracking answers the rows of every task of the execution's list, in the list's order, from the
// list (GetTaskList: titles and statuses) and the task's newest assignment (tries, commit, error).
// A list that cannot be read (deleted since) answers no rows.
func (d *Dashboard) tracking(ctx context.Context, ex *schedulerv1.Execution, as []*schedulerv1.Assignment) []trackingRow {
	tl, err := d.sched.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: ex.GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL})
	if err != nil {
		return nil
	}
	latest := map[string]*schedulerv1.Assignment{}
	for _, a := range as {
		if a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			continue
		}
		if prev, ok := latest[a.GetTaskId()]; !ok || a.GetWaveNumber() > prev.GetWaveNumber() ||
			(a.GetWaveNumber() == prev.GetWaveNumber() && a.GetAttempt() >= prev.GetAttempt()) {
			latest[a.GetTaskId()] = a
		}
	}
	rows := make([]trackingRow, 0, len(tl.GetTaskList().GetSpec().GetTasks()))
	for _, t := range tl.GetTaskList().GetSpec().GetTasks() {
		st := t.GetStatus()
		if st == commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
			st = commonv1.TaskStatus_TASK_STATUS_PENDING
		}
		row := trackingRow{TaskID: t.GetId(), Title: t.GetTitle(), Status: enumName(st)}
		if a := latest[t.GetId()]; a != nil {
			row.Tries, row.Commit = a.GetTries(), a.GetCommitSha()
			if st != commonv1.TaskStatus_TASK_STATUS_COMPLETED && st != commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS {
				row.Note = a.GetError().GetMessage()
			}
		}
		rows = append(rows, row)
	}
	return rows
}
