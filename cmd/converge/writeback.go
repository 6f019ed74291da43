package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// Write-back (seed 003): `converge run` of a tasks.md keeps the file's **Status:** lines current
// as the run goes (🔴 TODO → 🟡 IN PROGRESS → 🟢 DONE / ⏭️ SKIPPED / ❌ FAILED / 🔵 BLOCKED / 🛑 DCR)
// by precise edits of each task's block (tasklist.SetMarker), and when the run ends appends or
// updates the execution tracking table (tasklist.SetTracking). Every other byte of the file stays
// as it was. A re-run of the updated file skips the DONE tasks and does not run the SKIPPED and
// BLOCKED ones. --no-write-back turns it off.

// writeBackEvery is how often a running execution's task states are written to the file.
const writeBackEvery = 300 * time.Millisecond

// fileTaskState is one task's state in an execution, as the file and `converge status` show it.
type fileTaskState struct {
	row tasklist.TrackingRow
	// steps: the marker is DONE, so the block's steps are checked.
	steps bool
}

// taskStates answers every task of the list in list order with its marker: the list's status
// (the record later runs read), with the latest assignment of the execution for tries, commit and
// why it did not complete. A BLOCKED_DCR task whose assignment ended in a merge conflict is
// BLOCKED; one with a design change request DCR.
func taskStates(list *schedulerv1.TaskList, as []*schedulerv1.Assignment) []fileTaskState {
	latest := map[string]*schedulerv1.Assignment{}
	for _, a := range as {
		if a.GetKind() != schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK {
			continue
		}
		if prev, ok := latest[a.GetTaskId()]; !ok || a.GetAttempt() >= prev.GetAttempt() {
			latest[a.GetTaskId()] = a
		}
	}
	out := make([]fileTaskState, 0, len(list.GetSpec().GetTasks()))
	for _, t := range list.GetSpec().GetTasks() {
		st := t.GetStatus()
		if st == commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED {
			st = commonv1.TaskStatus_TASK_STATUS_PENDING
		}
		row := tasklist.TrackingRow{TaskID: t.GetId(), Title: t.GetTitle(), Marker: tasklist.Markers[st]}
		a := latest[t.GetId()]
		if st == commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR && a.GetError().GetCode() == "MERGE_CONFLICT" {
			row.Marker = tasklist.MarkerBlocked
		}
		if a != nil {
			row.Tries = a.GetTries()
			if row.Tries == 0 && terminalAssignment(a.GetStatus()) && a.GetStatus() != schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED {
				row.Tries = a.GetAttempt()
			}
			row.Commit = a.GetCommitSha()
			if st != commonv1.TaskStatus_TASK_STATUS_COMPLETED && st != commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS {
				row.Note = a.GetError().GetMessage()
			}
		}
		out = append(out, fileTaskState{row: row, steps: st == commonv1.TaskStatus_TASK_STATUS_COMPLETED})
	}
	return out
}

func terminalAssignment(s schedulerv1.AssignmentStatus) bool {
	switch s {
	case schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED,
		schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED, schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_CANCELLED:
		return true
	}
	return false
}

// readStates reads the execution's list and assignments and answers its task states.
func readStates(ctx context.Context, client schedulerv1.SchedulerServiceClient, ex *schedulerv1.Execution) ([]fileTaskState, error) {
	list, err := client.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: ex.GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL})
	if err != nil {
		return nil, rpcError("task list "+ex.GetTaskListId(), err)
	}
	as, err := allAssignments(ctx, client, ex.GetId())
	if err != nil {
		return nil, err
	}
	return taskStates(list.GetTaskList(), as), nil
}

// trackingSummary is the line above the tracking table.
func trackingSummary(ex *schedulerv1.Execution) string {
	state := strings.TrimPrefix(ex.GetStatus().String(), "EXECUTION_STATUS_")
	if o := ex.GetOutcome(); o != commonv1.Outcome_OUTCOME_UNSPECIFIED {
		state += ", outcome " + strings.TrimPrefix(o.String(), "OUTCOME_")
	}
	return fmt.Sprintf("Execution %s (run %d), written by converge run: %s — %d/%d completed, %d failed, %d skipped.",
		ex.GetId(), ex.GetRunNumber(), state, ex.GetCompletedTasks(), ex.GetTotalTasks(), ex.GetFailedTasks(), ex.GetSkippedTasks())
}

// writeBack keeps one tasks.md current with one execution.
type writeBack struct {
	path    string
	client  schedulerv1.SchedulerServiceClient
	warn    io.Writer
	mu      sync.Mutex
	written map[string]string // task → the marker last written
	warned  bool
}

func newWriteBack(path string, client schedulerv1.SchedulerServiceClient, warn io.Writer) *writeBack {
	return &writeBack{path: path, client: client, warn: warn, written: map[string]string{}}
}

// run writes the states of execution id every writeBackEvery until ctx ends.
func (wb *writeBack) run(ctx context.Context, id string) {
	t := time.NewTicker(writeBackEvery)
	defer t.Stop()
	for {
		if ex, err := wb.client.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id}); err == nil {
			wb.sync(ctx, ex.GetExecution(), false)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sync writes the task markers that changed (and, with tracking, the tracking table) into the
// file. A file that cannot be read or written is warned about once; the run goes on.
func (wb *writeBack) sync(ctx context.Context, ex *schedulerv1.Execution, tracking bool) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	states, err := readStates(ctx, wb.client, ex)
	if err != nil {
		return
	}
	fi, err := os.Stat(wb.path)
	var content []byte
	if err == nil {
		content, err = os.ReadFile(wb.path)
	}
	if err != nil {
		wb.warnOnce(err)
		return
	}
	out := content
	changed := map[string]string{}
	for _, s := range states {
		if s.row.Marker == "" || (wb.written[s.row.TaskID] == s.row.Marker && !tracking) {
			continue
		}
		next, err := tasklist.SetMarker(out, s.row.TaskID, s.row.Marker, s.steps)
		if errors.Is(err, tasklist.ErrTaskNotFound) {
			continue // the file changed under the run: nothing to mark
		}
		if err != nil {
			wb.warnOnce(err)
			return
		}
		out = next
		changed[s.row.TaskID] = s.row.Marker
	}
	if tracking {
		rows := make([]tasklist.TrackingRow, len(states))
		for i, s := range states {
			rows[i] = s.row
		}
		out = tasklist.SetTracking(out, trackingSummary(ex), rows)
	}
	if string(out) != string(content) {
		if err := os.WriteFile(wb.path, out, fi.Mode().Perm()); err != nil {
			wb.warnOnce(err)
			return
		}
	}
	for id, m := range changed {
		wb.written[id] = m
	}
}

func (wb *writeBack) warnOnce(err error) {
	if wb.warned {
		return
	}
	wb.warned = true
	fmt.Fprintf(wb.warn, "warning: cannot write task status back into %s: %v (give --no-write-back to leave the file alone)\n", wb.path, err)
}

// renderTaskStates prints the tracking table of `converge status <execution>`.
func renderTaskStates(w io.Writer, states []fileTaskState) {
	if len(states) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATUS\tTRIES\tCOMMIT\tTITLE / NOTE")
	for _, s := range states {
		tries := ""
		if s.row.Tries > 0 {
			tries = fmt.Sprint(s.row.Tries)
		}
		text := s.row.Title
		if s.row.Note != "" {
			text += " — " + firstLine(s.row.Note)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.row.TaskID, s.row.Marker, tries, short(s.row.Commit), text)
	}
	_ = tw.Flush()
}
