package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Column lists, each read by its scan function.
const (
	executionColumns = `r.execution_id, r.task_list_id, r.run_number, r.status, r.outcome, r.triggered_by,
	r.request_id, r.previous_execution_id, r.feature_build_id, r.total_tasks, r.completed_tasks,
	r.failed_tasks, r.skipped_tasks, r.running_tasks, r.current_wave, r.wave_count, r.total_attempts,
	r.last_seq, r.detail, r.created_at, r.updated_at, r.started_at, r.completed_at`
	// waveColumns read from waveTables: a wave's placements (its detail) are a table of their own
	// (migration 0012), so that the wave row a claim or a completion updates holds counters alone.
	waveColumns = `w.wave_id, w.execution_id, w.wave_number, w.status, w.task_count, w.completed_count,
	w.failed_count, w.skipped_count, w.active_agents, w.base_commit, w.integration_commit,
	coalesce(p.detail, '{}'), w.started_at, w.completed_at`
	waveTables = `parallel_execution_waves w LEFT JOIN parallel_execution_wave_placements p ON p.wave_id = w.wave_id`
	// waveCountColumns are waveColumns without the placements (the detail), for ExecTx: they
	// read parallel_execution_waves alone.
	waveCountColumns = `w.wave_id, w.execution_id, w.wave_number, w.status, w.task_count, w.completed_count,
	w.failed_count, w.skipped_count, w.active_agents, w.base_commit, w.integration_commit,
	'{}', w.started_at, w.completed_at`
	assignmentColumns = `a.assignment_id, a.execution_id, a.wave_id, a.wave_number, a.kind, a.task_key,
	a.status, a.instance_id, a.attempt, a.fencing_token, a.lease_expires_at, a.assigned_at,
	a.completed_at, a.last_report_seq, a.position, a.final_integration, a.previous_errors,
	a.merges, a.detail, a.session_id, a.ready_wave, a.unmet_deps`
	logColumns = `l.execution_id, l.seq, l.task_key, l.instance_id, l.wave_number, l.event_type,
	l.message, l.context, l.created_at, l.source_time`
)

// assignmentOrder is ListAssignments' order: wave, tasks before the integration, position.
const assignmentOrder = ` ORDER BY a.wave_number, CASE a.kind WHEN 'task' THEN 0 ELSE 1 END, a.position, a.assignment_id`

// querier is what reads and writes need of a database or a transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// now is the store's clock: SQLite runs in this process, so its clock is Go's, at SQLite's
// precision.
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// timeCol scans a NOT NULL timestamp column.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("timestamp column holds %T", v)
	}
	t, err := database.ParseSQLiteTime(s)
	*c.t = t
	return err
}

// nullTimeCol scans a nullable timestamp column.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(v any) error {
	if v == nil {
		*c.t = nil
		return nil
	}
	var t time.Time
	if err := (timeCol{&t}).Scan(v); err != nil {
		return err
	}
	*c.t = &t
	return nil
}

// ts and nts are the column values of times.
func ts(t time.Time) string { return database.FormatSQLiteTime(t) }

func nts(t *time.Time) any {
	if t == nil {
		return nil
	}
	return database.FormatSQLiteTime(*t)
}

func scanExecution(row scanner) (*schedulerv1.Execution, error) {
	_, e, err := scanExecutionRow(row)
	return e, err
}

func scanExecutionRow(row scanner) (store.ExecutionRow, *schedulerv1.Execution, error) {
	var r store.ExecutionRow
	if err := row.Scan(&r.ID, &r.TaskListID, &r.RunNumber, &r.Status, &r.Outcome, &r.TriggeredBy,
		&r.RequestID, &r.PreviousExecutionID, &r.FeatureBuildID, &r.TotalTasks, &r.CompletedTasks,
		&r.FailedTasks, &r.SkippedTasks, &r.RunningTasks, &r.CurrentWave, &r.WaveCount, &r.TotalAttempts,
		&r.LastSeq, &r.Detail, timeCol{&r.CreateTime}, timeCol{&r.UpdateTime}, nullTimeCol{&r.StartTime},
		nullTimeCol{&r.EndTime}); err != nil {
		return r, nil, err
	}
	e, err := store.DecodeExecution(r)
	return r, e, err
}

func scanWave(row scanner) (*schedulerv1.Wave, error) {
	_, w, err := scanWaveRow(row)
	return w, err
}

func scanWaveRow(row scanner) (store.WaveRow, *schedulerv1.Wave, error) {
	r, err := scanWaveRowRaw(row)
	if err != nil {
		return r, nil, err
	}
	w, err := store.DecodeWave(r)
	return r, w, err
}

// scanWaveRowRaw scans a wave's row without decoding it.
func scanWaveRowRaw(row scanner) (store.WaveRow, error) {
	var r store.WaveRow
	err := row.Scan(&r.ID, &r.ExecutionID, &r.WaveNumber, &r.Status, &r.TaskCount, &r.CompletedCount,
		&r.FailedCount, &r.SkippedCount, &r.ActiveAgents, &r.BaseCommit, &r.IntegrationCommit,
		&r.Detail, nullTimeCol{&r.StartTime}, nullTimeCol{&r.EndTime})
	return r, err
}

func scanAssignment(row scanner) (*store.Assignment, error) {
	_, a, err := scanAssignmentRow(row)
	return a, err
}

func scanAssignmentRow(row scanner) (store.AssignmentRow, *store.Assignment, error) {
	var r store.AssignmentRow
	if err := row.Scan(&r.ID, &r.ExecutionID, &r.WaveID, &r.WaveNumber, &r.Kind, &r.TaskKey,
		&r.Status, &r.InstanceID, &r.Attempt, &r.FencingToken, nullTimeCol{&r.LeaseExpireTime},
		nullTimeCol{&r.AssignTime}, nullTimeCol{&r.CompleteTime}, &r.LastReportSeq, &r.Position,
		&r.FinalIntegration, &r.PreviousErrors, &r.Merges, &r.Detail, &r.SessionID, &r.ReadyWave, &r.UnmetDeps); err != nil {
		return r, nil, err
	}
	a, err := store.DecodeAssignment(r)
	return r, a, err
}

// collect reads every row of rows with scan.
func collect[T any](rows *sql.Rows, err error, scan func(scanner) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, rows.Close()
}

// in returns "(?, ?, ...)" for values and appends them to args.
func in[T any](values []T, args *[]any) string {
	for _, v := range values {
		*args = append(*args, v)
	}
	return "(?" + strings.Repeat(", ?", len(values)-1) + ")"
}

const insertExecutionSQL = `INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number,
	status, outcome, triggered_by, request_id, previous_execution_id, feature_build_id, total_tasks,
	completed_tasks, failed_tasks, skipped_tasks, running_tasks, current_wave, wave_count,
	total_attempts, last_seq, detail, created_at, updated_at, started_at, completed_at)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

const (
	insertWavesSQL = `INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, status,
	task_count, completed_count, failed_count, skipped_count, active_agents, base_commit,
	integration_commit, created_at, started_at, completed_at)
	VALUES `
	waveTuple = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// insertPlacementsSQL stores the placements (detail) of the waves that have any.
	insertPlacementsSQL = `INSERT INTO parallel_execution_wave_placements (wave_id, detail) VALUES `
	placementTuple      = `(?, ?)`
)

func waveArgs(r store.WaveRow, now time.Time) []any {
	return []any{r.ID, r.ExecutionID, r.WaveNumber, r.Status, r.TaskCount, r.CompletedCount, r.FailedCount,
		r.SkippedCount, r.ActiveAgents, r.BaseCommit, r.IntegrationCommit, ts(now), nts(r.StartTime), nts(r.EndTime)}
}

// insertWaves stores a run's waves, then the placements of those that have any.
func insertWaves(ctx context.Context, tx querier, rows []store.WaveRow, now time.Time) error {
	id := func(w store.WaveRow) string { return w.ID }
	if err := insertRows(ctx, tx, "waves", insertWavesSQL, waveTuple, rows, id,
		func(w store.WaveRow) []any { return waveArgs(w, now) }); err != nil {
		return err
	}
	var placed []store.WaveRow
	for _, w := range rows {
		if w.Detail != "{}" && w.Detail != "" {
			placed = append(placed, w)
		}
	}
	return insertRows(ctx, tx, "wave placements", insertPlacementsSQL, placementTuple, placed, id,
		func(w store.WaveRow) []any { return []any{w.ID, w.Detail} })
}

const (
	insertAssignmentsSQL = `INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id,
	wave_number, kind, task_key, status, instance_id, attempt, fencing_token, lease_expires_at,
	assigned_at, completed_at, last_report_seq, position, final_integration, previous_errors, merges,
	detail, created_at, updated_at, session_id, ready_wave, unmet_deps)
	VALUES `
	assignmentTuple = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// insertAssignmentSQL inserts one assignment.
	insertAssignmentSQL = insertAssignmentsSQL + assignmentTuple
)

func assignmentArgs(r store.AssignmentRow, now time.Time) []any {
	return []any{r.ID, r.ExecutionID, r.WaveID, r.WaveNumber, r.Kind, r.TaskKey, r.Status, r.InstanceID,
		r.Attempt, r.FencingToken, nts(r.LeaseExpireTime), nts(r.AssignTime), nts(r.CompleteTime), r.LastReportSeq,
		r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail, ts(now), ts(now), r.SessionID, r.ReadyWave, r.UnmetDeps}
}

const (
	insertLogSQL = `INSERT INTO task_execution_log (execution_id, seq, task_key, instance_id,
	wave_number, event_type, message, context, created_at, source_time) VALUES `
	logTuple = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// logRowsPerInsert is how many log rows one INSERT stores (10 parameters each).
const logRowsPerInsert = 32

// insertLog numbers entries after lastSeq, for execution id at now, stores them and returns
// their rows. The entries themselves are not changed (see store.SetEntries).
func insertLog(ctx context.Context, tx *sql.Tx, id string, lastSeq int64, now time.Time, entries []*commonv1.LogEntry) ([]store.LogRow, error) {
	rows, err := store.LogRows(id, lastSeq, now, entries)
	if err != nil || len(rows) == 0 {
		return rows, err
	}
	return rows, insertLogRows(ctx, tx, rows)
}

// insertLogRows stores log rows with one multi-row INSERT per logRowsPerInsert rows: one
// statement per transaction's worth of entries instead of one per entry (its text built once,
// multiRowSQL).
func insertLogRows(ctx context.Context, tx querier, rows []store.LogRow) error {
	for len(rows) > 0 {
		n := min(len(rows), logRowsPerInsert)
		args := make([]any, 0, 10*n)
		for _, r := range rows[:n] {
			args = append(args, r.ExecutionID, r.Seq, r.TaskKey, r.InstanceID, r.WaveNumber, r.EventType,
				r.Message, r.Context, ts(r.Time), nts(r.SourceTime))
		}
		if _, err := tx.ExecContext(ctx, multiRowSQL(insertLogSQL, logTuple, "", n), args...); err != nil {
			return fmt.Errorf("insert log entries %d to %d: %w", rows[0].Seq, rows[n-1].Seq, err)
		}
		rows = rows[n:]
	}
	return nil
}

// CreateExecution stores an execution with its waves, assignments and first log entries. The
// transaction holds SQLite's write lock from its start, so run numbers cannot collide.
func (s *Store) CreateExecution(ctx context.Context, e *schedulerv1.Execution, waves []*schedulerv1.Wave, assignments []*store.Assignment, entries []*commonv1.LogEntry, opts ...store.CreateOptions) error {
	if e.GetId() == "" {
		return errors.New("scheduler store: create execution: no id")
	}
	row, err := store.EncodeExecution(e)
	if err != nil {
		return err
	}
	wrows, arows, err := store.CreateRows(e.GetId(), waves, assignments)
	if err != nil {
		return err
	}
	newRun := !store.ConcurrentAllowed(opts) && (e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING || e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED)
	var (
		runNumber int32
		t         = now()
		logs      []store.LogRow
	)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var found string
		err := tx.QueryRowContext(ctx, `SELECT id FROM task_lists WHERE id = ?`, e.GetTaskListId()).Scan(&found)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("task list %q: %w", e.GetTaskListId(), store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		var existing *string
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(run_number), 0) + 1,
			(SELECT execution_id FROM task_list_execution_runs WHERE task_list_id = ?1 AND request_id = ?2)
			FROM task_list_execution_runs WHERE task_list_id = ?1`,
			e.GetTaskListId(), e.GetRequestId()).Scan(&runNumber, &existing); err != nil {
			return err
		}
		if existing != nil {
			return fmt.Errorf("task list %q: execution %s has request id %q: %w", e.GetTaskListId(), *existing, e.GetRequestId(), store.ErrAlreadyExists)
		}
		// A new run (stored PENDING, as the engine starts every run) needs the list to itself.
		var open string
		err = tx.QueryRowContext(ctx, `SELECT execution_id FROM task_list_execution_runs WHERE task_list_id = ?
			AND status IN ('pending', 'running', 'paused') ORDER BY created_at LIMIT 1`, e.GetTaskListId()).Scan(&open)
		if err == nil && newRun {
			return store.OpenExecutionError(e.GetTaskListId(), open)
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		_, err = tx.ExecContext(ctx, insertExecutionSQL, row.ID, row.TaskListID, runNumber, row.Status,
			row.Outcome, row.TriggeredBy, row.RequestID, row.PreviousExecutionID, row.FeatureBuildID, row.TotalTasks,
			row.CompletedTasks, row.FailedTasks, row.SkippedTasks, row.RunningTasks, row.CurrentWave, row.WaveCount,
			row.TotalAttempts, len(entries), row.Detail, ts(t), ts(t), nts(row.StartTime), nts(row.EndTime))
		if err != nil {
			return uniqueExists(fmt.Errorf("insert execution: %w", err))
		}
		if err := insertWaves(ctx, tx, wrows, t); err != nil {
			return err
		}
		if err := insertRows(ctx, tx, "assignments", insertAssignmentsSQL, assignmentTuple, arows,
			func(a store.AssignmentRow) string { return a.ID }, func(a store.AssignmentRow) []any { return assignmentArgs(a, t) }); err != nil {
			return err
		}
		logs, err = insertLog(ctx, tx, e.GetId(), 0, t, entries)
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAlreadyExists) || errors.Is(err, store.ErrActive) {
			return err
		}
		return fmt.Errorf("scheduler store: create execution %q: %w", e.GetId(), err)
	}
	e.RunNumber, e.LastSeq = runNumber, int64(len(entries))
	e.CreateTime, e.UpdateTime = timestamppb.New(t), timestamppb.New(t)
	store.Created(e, waves, assignments)
	store.SetEntries(entries, logs)
	return nil
}

// uniqueExists wraps ErrAlreadyExists into err when it is a unique violation.
func uniqueExists(err error) error {
	if database.ViolationOf(err) == database.UniqueViolation {
		return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
	}
	return err
}

// AssignmentExecution returns the execution of an assignment.
func (s *Store) AssignmentExecution(ctx context.Context, assignmentID string) (string, error) {
	var id string
	err := s.DB().QueryRowContext(ctx, `SELECT execution_id FROM wave_task_assignments WHERE assignment_id = ?`, assignmentID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("assignment %q: %w", assignmentID, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("scheduler store: assignment %q: %w", assignmentID, err)
	}
	return id, nil
}

// ExecutionIDByRequest returns the execution a list started with a request id.
func (s *Store) ExecutionIDByRequest(ctx context.Context, taskListID, requestID string) (string, error) {
	var id string
	err := s.DB().QueryRowContext(ctx, `SELECT execution_id FROM task_list_execution_runs
		WHERE task_list_id = ? AND request_id = ?`, taskListID, requestID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("task list %q: execution with request id %q: %w", taskListID, requestID, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("scheduler store: execution by request id: %w", err)
	}
	return id, nil
}

// GetExecution reads an execution and its waves in one snapshot: a read-only transaction, which
// the driver begins DEFERRED (it does not take the write lock).
func (s *Store) GetExecution(ctx context.Context, id string) (*schedulerv1.Execution, []*schedulerv1.Wave, error) {
	e, waves, err := func() (*schedulerv1.Execution, []*schedulerv1.Wave, error) {
		tx, err := s.DB().BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return nil, nil, err
		}
		defer func() { _ = tx.Rollback() }()
		e, err := scanExecution(tx.QueryRowContext(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r WHERE r.execution_id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil, fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return nil, nil, err
		}
		waves, err := s.readWavesCached(ctx, tx, id)
		return e, waves, err
	}()
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("scheduler store: get execution %q: %w", id, err)
	}
	return e, waves, nil
}

// Execution reads an execution's row alone.
func (s *Store) Execution(ctx context.Context, id string) (*schedulerv1.Execution, error) {
	e, err := scanExecution(s.DB().QueryRowContext(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r WHERE r.execution_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: get execution %q: %w", id, err)
	}
	return e, nil
}

func readWaves(ctx context.Context, q querier, id string) ([]*schedulerv1.Wave, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+waveColumns+` FROM `+waveTables+`
		WHERE w.execution_id = ? ORDER BY w.wave_number`, id)
	return collect(rows, err, scanWave)
}

// ListExecutions reads a page of executions, newest first.
func (s *Store) ListExecutions(ctx context.Context, q store.ListExecutionsQuery) ([]*schedulerv1.Execution, *store.Cursor, error) {
	var where []string
	var args []any
	if q.After != nil {
		where = append(where, "(r.created_at, r.execution_id) < (?, ?)")
		args = append(args, ts(q.After.CreateTime), q.After.ID)
	}
	if q.TaskListID != "" {
		where = append(where, "r.task_list_id = ?")
		args = append(args, q.TaskListID)
	}
	if len(q.Statuses) > 0 {
		statuses, err := store.ExecutionStatusNames(q.Statuses)
		if err != nil {
			return nil, nil, err
		}
		where = append(where, "r.status IN "+in(statuses, &args))
	}
	if q.FeatureBuildID != "" {
		where = append(where, "r.feature_build_id = ?")
		args = append(args, q.FeatureBuildID)
	}
	query := `SELECT ` + executionColumns + ` FROM task_list_execution_runs r`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY r.created_at DESC, r.execution_id DESC LIMIT ?`
	args = append(args, q.PageSize+1)
	rows, err := s.DB().QueryContext(ctx, query, args...)
	list, err := collect(rows, err, scanExecution)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler store: list executions: %w", err)
	}
	var next *store.Cursor
	if len(list) > q.PageSize {
		list = list[:q.PageSize]
		last := list[len(list)-1]
		next = &store.Cursor{CreateTime: last.GetCreateTime().AsTime(), ID: last.GetId()}
	}
	return list, next, nil
}

func readAssignments(ctx context.Context, db querier, q store.ListAssignmentsQuery, page bool) ([]*store.Assignment, error) {
	where := []string{"a.execution_id = ?"}
	args := []any{q.ExecutionID}
	if q.WaveNumber != 0 {
		where = append(where, "a.wave_number = ?")
		args = append(args, q.WaveNumber)
	}
	if q.TaskID != "" {
		where = append(where, "a.task_key = ?")
		args = append(args, q.TaskID)
	}
	if len(q.Statuses) > 0 {
		statuses, err := store.AssignmentStatusNames(q.Statuses)
		if err != nil {
			return nil, err
		}
		where = append(where, "a.status IN "+in(statuses, &args))
	}
	if q.InstanceID != "" {
		where = append(where, "a.instance_id = ?")
		args = append(args, q.InstanceID)
	}
	query := `SELECT ` + assignmentColumns + ` FROM wave_task_assignments a WHERE ` + strings.Join(where, " AND ") + assignmentOrder
	if page {
		query += ` LIMIT ? OFFSET ?`
		args = append(args, q.PageSize+1, q.Offset)
	}
	rows, err := db.QueryContext(ctx, query, args...)
	return collect(rows, err, scanAssignment)
}

// ListAssignments reads a page of an execution's assignments.
func (s *Store) ListAssignments(ctx context.Context, q store.ListAssignmentsQuery) ([]*store.Assignment, int, error) {
	list, err := readAssignments(ctx, s.DB(), q, true)
	if err != nil {
		return nil, 0, fmt.Errorf("scheduler store: list assignments of %q: %w", q.ExecutionID, err)
	}
	next := 0
	if len(list) > q.PageSize {
		list, next = list[:q.PageSize], q.Offset+q.PageSize
	}
	return list, next, nil
}
