package sqlite

import (
	"strings"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// PutAssignment writes only the columns that changed since the transaction read the row. SQLite
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
	var b strings.Builder
	args := make([]any, 0, len(values)+3)
	b.WriteString("UPDATE wave_task_assignments SET ")
	for i, v := range values {
		if stored != nil && stored[i] == v {
			continue
		}
		b.WriteString(assignmentSet[i])
		b.WriteString(" = ?, ")
		args = append(args, v)
	}
	b.WriteString("updated_at = ? WHERE assignment_id = ? AND execution_id = ?")
	return b.String(), append(args, updatedAt, id, execution)
}
