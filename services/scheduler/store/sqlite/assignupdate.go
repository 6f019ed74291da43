package sqlite

import (
	"strings"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// PutAssignment (and PutExecution, PutWave) write only the columns that changed since the transaction
// read the row. SQLite
// maintains an index, and checks a CHECK constraint, when the UPDATE names one of its columns,
// whether or not the value changes: an UPDATE of all fourteen columns kept every index of the
// assignment table (ten) and parsed its three JSON columns for their checks on each claim, report
// and completion, where a status change needs the indexes on the status only.

// assignmentSet are the columns PutAssignment writes, besides updated_at.
var assignmentSet = [...]string{"status", "instance_id", "attempt", "fencing_token", "lease_expires_at",
	"assigned_at", "completed_at", "last_report_seq", "position", "final_integration", "previous_errors",
	"merges", "detail", "session_id"}

// assignmentValues are r's values of assignmentSet, comparable with ==.
type assignmentValues [len(assignmentSet)]any

func assignmentValuesOf(r store.AssignmentRow) assignmentValues {
	return assignmentValues{r.Status, nstr(r.InstanceID), r.Attempt, r.FencingToken, nts(r.LeaseExpireTime),
		nts(r.AssignTime), nts(r.CompleteTime), r.LastReportSeq, r.Position, r.FinalIntegration,
		r.PreviousErrors, r.Merges, r.Detail, nstr(r.SessionID)}
}

func nstr(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// assignmentUpdate is the UPDATE of assignment id of execution to values at updatedAt, with
// only the columns that differ from stored (all when stored is nil), and its arguments.
func assignmentUpdate(stored *assignmentValues, values assignmentValues, updatedAt, id, execution string) (string, []any) {
	var old []any
	if stored != nil {
		old = stored[:]
	}
	return changedUpdate("wave_task_assignments", assignmentSet[:], old, values[:],
		"updated_at = ? WHERE assignment_id = ? AND execution_id = ?", updatedAt, id, execution)
}

// changedUpdate is an UPDATE of table setting the columns whose values differ from stored (all
// when stored is nil), then tail (the rest of the SET list and the WHERE clause, or only the
// WHERE clause when it starts with "WHERE"), and its arguments. With a bare WHERE tail at least
// one column must differ.
func changedUpdate(table string, columns []string, stored, values []any, tail string, tailArgs ...any) (string, []any) {
	b := make([]byte, 0, 64+len(tail)+16*len(values))
	args := make([]any, 0, len(values)+len(tailArgs))
	b = append(b, "UPDATE "...)
	b = append(b, table...)
	b = append(b, " SET "...)
	for i, v := range values {
		if stored != nil && stored[i] == v {
			continue
		}
		b = append(b, columns[i]...)
		b = append(b, " = ?, "...)
		args = append(args, v)
	}
	if strings.HasPrefix(tail, "WHERE") {
		b = append(b[:len(b)-2], ' ')
	}
	b = append(b, tail...)
	return string(b), append(args, tailArgs...)
}

// executionSet are the columns PutExecution writes, besides updated_at.
var executionSet = [...]string{"status", "outcome", "triggered_by", "previous_execution_id", "feature_build_id",
	"total_tasks", "completed_tasks", "failed_tasks", "skipped_tasks", "running_tasks", "current_wave",
	"wave_count", "total_attempts", "detail", "started_at", "completed_at", "last_seq"}

// executionValues are r's values of executionSet, comparable with ==.
type executionValues [len(executionSet)]any

func executionValuesOf(r store.ExecutionRow) executionValues {
	return executionValues{r.Status, nstr(r.Outcome), r.TriggeredBy, nstr(r.PreviousExecutionID),
		nstr(r.FeatureBuildID), r.TotalTasks, r.CompletedTasks, r.FailedTasks, r.SkippedTasks,
		r.RunningTasks, r.CurrentWave, r.WaveCount, r.TotalAttempts, r.Detail, nts(r.StartTime),
		nts(r.EndTime), r.LastSeq}
}

// waveSet are the columns PutWave writes (a wave row has no updated_at).
var waveSet = [...]string{"status", "task_count", "completed_count", "failed_count", "skipped_count",
	"active_agents", "base_commit", "integration_commit", "started_at", "completed_at"}

// waveValues are r's values of waveSet, comparable with ==.
type waveValues [len(waveSet)]any

func waveValuesOf(r store.WaveRow) waveValues {
	return waveValues{r.Status, r.TaskCount, r.CompletedCount, r.FailedCount, r.SkippedCount, r.ActiveAgents,
		nstr(r.BaseCommit), nstr(r.IntegrationCommit), nts(r.StartTime), nts(r.EndTime)}
}
