package postgres

import (
	"time"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// insertAssignmentsSQL inserts a run's assignments in one statement (unnest over column
// arrays): CreateExecution of a 1,000-task run was 1,000 INSERTs in its batch, each parsed,
// planned and executed by the server on its own (issue 17, P2b: the run's start is in its wall).
const insertAssignmentsSQL = `INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id,
	wave_number, kind, task_key, status, instance_id, attempt, fencing_token, lease_expires_at,
	assigned_at, completed_at, last_report_seq, position, final_integration, previous_errors, merges,
	detail, created_at, updated_at, session_id, ready_wave, unmet_deps)
	SELECT a.id, $1, a.wave_id, a.wave_number, a.kind, a.task_key, a.status, a.instance_id, a.attempt,
		a.fencing_token, a.lease_expires_at, a.assigned_at, a.completed_at, a.last_report_seq, a.position,
		a.final_integration, a.previous_errors::jsonb, a.merges::jsonb, a.detail::jsonb, $2, $2, a.session_id,
		a.ready_wave, a.unmet_deps
	FROM unnest($3::text[], $4::text[], $5::integer[], $6::text[], $7::text[], $8::text[], $9::text[],
		$10::integer[], $11::bigint[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::bigint[],
		$16::integer[], $17::boolean[], $18::text[], $19::text[], $20::text[], $21::text[], $22::integer[],
		$23::integer[])
		AS a(id, wave_id, wave_number, kind, task_key, status, instance_id, attempt, fencing_token,
			lease_expires_at, assigned_at, completed_at, last_report_seq, position, final_integration,
			previous_errors, merges, detail, session_id, ready_wave, unmet_deps)`

// assignmentsArgs are insertAssignmentsSQL's arguments for rows of one execution.
func assignmentsArgs(executionID string, rows []store.AssignmentRow, now time.Time) []any {
	n := len(rows)
	ids, waveIDs, kinds, statuses := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	waveNumbers, attempts, positions, unmet := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	keys, instances, sessions := make([]*string, n), make([]*string, n), make([]*string, n)
	tokens, seqs := make([]int64, n), make([]int64, n)
	leases, assigned, completed := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	final := make([]bool, n)
	prevErrs, merges, details := make([]string, n), make([]string, n), make([]string, n)
	ready := make([]*int32, n)
	for i, r := range rows {
		ids[i], waveIDs[i], waveNumbers[i], kinds[i], keys[i], statuses[i] = r.ID, r.WaveID, r.WaveNumber, r.Kind, r.TaskKey, r.Status
		instances[i], attempts[i], tokens[i] = r.InstanceID, r.Attempt, r.FencingToken
		leases[i], assigned[i], completed[i], seqs[i] = r.LeaseExpireTime, r.AssignTime, r.CompleteTime, r.LastReportSeq
		positions[i], final[i], prevErrs[i], merges[i], details[i] = r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail
		sessions[i], ready[i], unmet[i] = r.SessionID, r.ReadyWave, r.UnmetDeps
	}
	return []any{executionID, now, ids, waveIDs, waveNumbers, kinds, keys, statuses, instances, attempts, tokens,
		leases, assigned, completed, seqs, positions, final, prevErrs, merges, details, sessions, ready, unmet}
}
