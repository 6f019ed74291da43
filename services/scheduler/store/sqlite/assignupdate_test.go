package sqlite

import (
	"slices"
	"strings"
	"testing"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestAssignmentUpdateNamesChangedColumns: an assignment the transaction has read is updated in
// the columns that changed (and updated_at) only; one it has not read, in all of them.
func TestAssignmentUpdateNamesChangedColumns(t *testing.T) {
	holder, detail := "agent-1", `{"progressMessage":"x"}`
	before := store.AssignmentRow{ID: "a1", Status: "assigned", InstanceID: &holder, Attempt: 1, FencingToken: 7,
		Position: 3, PreviousErrors: "[]", Merges: "[]", Detail: "{}"}
	after := before
	after.Status, after.Detail = "running", detail
	stored := assignmentValuesOf(before)

	query, args := assignmentUpdate(&stored, assignmentValuesOf(after), "now", "a1", "e1")
	want := "UPDATE wave_task_assignments SET status = ?, detail = ?, updated_at = ? WHERE assignment_id = ? AND execution_id = ?"
	if query != want || !slices.Equal(args, []any{"running", detail, "now", "a1", "e1"}) {
		t.Fatalf("update after a read =\n%s %v\nwant\n%s", query, args, want)
	}

	query, args = assignmentUpdate(nil, assignmentValuesOf(after), "now", "a1", "e1")
	for _, c := range assignmentSet {
		if !contains(query, c+" = ?") {
			t.Fatalf("update of a row not read leaves out %s: %s", c, query)
		}
	}
	if len(args) != len(assignmentSet)+3 || args[1] != holder {
		t.Fatalf("update of a row not read: args %v", args)
	}

	// A nil pointer column and its value differ; equal values given through different pointers
	// do not.
	other := holder
	same := before
	same.InstanceID = &other
	if query, _ := assignmentUpdate(&stored, assignmentValuesOf(same), "now", "a1", "e1"); contains(query, "instance_id") {
		t.Fatalf("an unchanged holder is written: %s", query)
	}
	released := before
	released.InstanceID = nil
	if query, _ := assignmentUpdate(&stored, assignmentValuesOf(released), "now", "a1", "e1"); !contains(query, "instance_id = ?") {
		t.Fatalf("a released holder is not written: %s", query)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestExecutionUpdateNamesChangedColumns: a completion's update of the execution row names its
// counters, not its detail (whose JSON check SQLite would run again) nor its unchanged columns.
func TestExecutionUpdateNamesChangedColumns(t *testing.T) {
	before := store.ExecutionRow{ID: "e1", Status: "running", TriggeredBy: "user", TotalTasks: 3,
		CompletedTasks: 1, RunningTasks: 2, WaveCount: 1, CurrentWave: 1, LastSeq: 4, Detail: `{"baseCommit":"abc"}`}
	after := before
	after.CompletedTasks, after.RunningTasks, after.LastSeq = 2, 1, 6
	stored, values := executionValuesOf(before), executionValuesOf(after)
	query, args := changedUpdate("task_list_execution_runs", executionSet[:], stored[:], values[:],
		"updated_at = ? WHERE execution_id = ?", "now", "e1")
	want := "UPDATE task_list_execution_runs SET completed_tasks = ?, running_tasks = ?, last_seq = ?, updated_at = ? WHERE execution_id = ?"
	if query != want || !slices.Equal(args, []any{int32(2), int32(1), int64(6), "now", "e1"}) {
		t.Fatalf("update =\n%s %v\nwant\n%s", query, args, want)
	}
}

// TestWaveUpdateNamesChangedColumns: a wave the transaction read is updated in the columns that
// changed only (a wave row has no updated_at), one it has not read in all of them.
func TestWaveUpdateNamesChangedColumns(t *testing.T) {
	before := store.WaveRow{ID: "w1", Status: "running", TaskCount: 4, CompletedCount: 1, ActiveAgents: 2}
	after := before
	after.CompletedCount, after.ActiveAgents = 2, 1
	stored, values := waveValuesOf(before), waveValuesOf(after)
	query, args := changedUpdate("parallel_execution_waves", waveSet[:], stored[:], values[:],
		"WHERE wave_id = ? AND execution_id = ?", "w1", "e1")
	want := "UPDATE parallel_execution_waves SET completed_count = ?, active_agents = ? WHERE wave_id = ? AND execution_id = ?"
	if query != want || !slices.Equal(args, []any{int32(2), int32(1), "w1", "e1"}) {
		t.Fatalf("update =\n%s %v\nwant\n%s", query, args, want)
	}
	query, args = changedUpdate("parallel_execution_waves", waveSet[:], nil, values[:],
		"WHERE wave_id = ? AND execution_id = ?", "w1", "e1")
	for _, c := range waveSet {
		if !contains(query, c+" = ?") {
			t.Fatalf("update of a wave not read leaves out %s: %s", c, query)
		}
	}
	if len(args) != len(waveSet)+2 || contains(query, ",  WHERE") || contains(query, ", WHERE") {
		t.Fatalf("update of a wave not read: %s %v", query, args)
	}
}
