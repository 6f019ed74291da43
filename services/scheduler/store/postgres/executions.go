package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	r.last_seq, r.detail::text, r.created_at, r.updated_at, r.started_at, r.completed_at`
	waveColumns = `w.wave_id, w.execution_id, w.wave_number, w.status, w.task_count, w.completed_count,
	w.failed_count, w.skipped_count, w.active_agents, w.base_commit, w.integration_commit,
	w.detail::text, w.started_at, w.completed_at`
	// waveCountColumns are waveColumns without the placements (the detail), for ExecTx.
	waveCountColumns = `w.wave_id, w.execution_id, w.wave_number, w.status, w.task_count, w.completed_count,
	w.failed_count, w.skipped_count, w.active_agents, w.base_commit, w.integration_commit,
	'{}'::text, w.started_at, w.completed_at`
	assignmentColumns = `a.assignment_id, a.execution_id, a.wave_id, a.wave_number, a.kind, a.task_key,
	a.status, a.instance_id, a.attempt, a.fencing_token, a.lease_expires_at, a.assigned_at,
	a.completed_at, a.last_report_seq, a.position, a.final_integration, a.previous_errors::text,
	a.merges::text, a.detail::text, a.session_id, a.ready_wave, a.unmet_deps`
	logColumns = `l.execution_id, l.seq, l.task_key, l.instance_id, l.wave_number, l.event_type,
	l.message, l.context::text, l.created_at, l.source_time`
)

// assignmentOrder is ListAssignments' order: wave, tasks before the integration, position.
const assignmentOrder = ` ORDER BY a.wave_number, CASE a.kind WHEN 'task' THEN 0 ELSE 1 END, a.position, a.assignment_id`

// querier is what reads and writes need of a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func scanExecution(row pgx.Row, extra ...any) (*schedulerv1.Execution, error) {
	var r store.ExecutionRow
	dest := append([]any{&r.ID, &r.TaskListID, &r.RunNumber, &r.Status, &r.Outcome, &r.TriggeredBy,
		&r.RequestID, &r.PreviousExecutionID, &r.FeatureBuildID, &r.TotalTasks, &r.CompletedTasks,
		&r.FailedTasks, &r.SkippedTasks, &r.RunningTasks, &r.CurrentWave, &r.WaveCount, &r.TotalAttempts,
		&r.LastSeq, &r.Detail, &r.CreateTime, &r.UpdateTime, &r.StartTime, &r.EndTime}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	utc(&r.CreateTime, &r.UpdateTime)
	utcp(r.StartTime, r.EndTime)
	return store.DecodeExecution(r)
}

func scanWave(row pgx.Row) (*schedulerv1.Wave, error) {
	var r store.WaveRow
	if err := row.Scan(&r.ID, &r.ExecutionID, &r.WaveNumber, &r.Status, &r.TaskCount, &r.CompletedCount,
		&r.FailedCount, &r.SkippedCount, &r.ActiveAgents, &r.BaseCommit, &r.IntegrationCommit,
		&r.Detail, &r.StartTime, &r.EndTime); err != nil {
		return nil, err
	}
	utcp(r.StartTime, r.EndTime)
	return store.DecodeWave(r)
}

func scanAssignment(row pgx.Row) (*store.Assignment, error) {
	var r store.AssignmentRow
	if err := row.Scan(&r.ID, &r.ExecutionID, &r.WaveID, &r.WaveNumber, &r.Kind, &r.TaskKey,
		&r.Status, &r.InstanceID, &r.Attempt, &r.FencingToken, &r.LeaseExpireTime, &r.AssignTime,
		&r.CompleteTime, &r.LastReportSeq, &r.Position, &r.FinalIntegration, &r.PreviousErrors,
		&r.Merges, &r.Detail, &r.SessionID, &r.ReadyWave, &r.UnmetDeps); err != nil {
		return nil, err
	}
	utcp(r.LeaseExpireTime, r.AssignTime, r.CompleteTime)
	return store.DecodeAssignment(r)
}

func utc(ts ...*time.Time) {
	for _, t := range ts {
		*t = t.UTC()
	}
}

func utcp(ts ...*time.Time) {
	for _, t := range ts {
		if t != nil {
			*t = t.UTC()
		}
	}
}

// collect reads every row of rows with scan.
func collect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func scanExecutionRow(row pgx.Row) (*schedulerv1.Execution, error) { return scanExecution(row) }

// stmt is one statement of a batch, with what it writes for errors.
type stmt struct {
	what string
	sql  string
	args []any
}

// execBatch sends stmts in one round trip and returns the first error, naming its statement.
func execBatch(ctx context.Context, tx interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}, stmts []stmt) error {
	if len(stmts) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, s := range stmts {
		b.Queue(s.sql, s.args...)
	}
	br := tx.SendBatch(ctx, b)
	for _, s := range stmts {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return br.Close()
}

const insertExecutionSQL = `INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number,
	status, outcome, triggered_by, request_id, previous_execution_id, feature_build_id, total_tasks,
	completed_tasks, failed_tasks, skipped_tasks, running_tasks, current_wave, wave_count,
	total_attempts, last_seq, detail, created_at, updated_at, started_at, completed_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19::jsonb,
	$20, $21, $22, $23)`

const insertWaveSQL = `INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, status,
	task_count, completed_count, failed_count, skipped_count, active_agents, base_commit,
	integration_commit, detail, created_at, started_at, completed_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14, $15)`

func waveArgs(r store.WaveRow, now time.Time) []any {
	return []any{r.ID, r.ExecutionID, r.WaveNumber, r.Status, r.TaskCount, r.CompletedCount, r.FailedCount,
		r.SkippedCount, r.ActiveAgents, r.BaseCommit, r.IntegrationCommit, r.Detail, now, r.StartTime, r.EndTime}
}

const insertAssignmentSQL = `INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id,
	wave_number, kind, task_key, status, instance_id, attempt, fencing_token, lease_expires_at,
	assigned_at, completed_at, last_report_seq, position, final_integration, previous_errors, merges,
	detail, created_at, updated_at, session_id, ready_wave, unmet_deps)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17::jsonb, $18::jsonb,
	$19::jsonb, $20, $20, $21, $22, $23)`

func assignmentArgs(r store.AssignmentRow, now time.Time) []any {
	return []any{r.ID, r.ExecutionID, r.WaveID, r.WaveNumber, r.Kind, r.TaskKey, r.Status, r.InstanceID,
		r.Attempt, r.FencingToken, r.LeaseExpireTime, r.AssignTime, r.CompleteTime, r.LastReportSeq,
		r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail, now, r.SessionID, r.ReadyWave, r.UnmetDeps}
}

const insertLogSQL = `INSERT INTO task_execution_log (execution_id, seq, task_key, instance_id,
	wave_number, event_type, message, context, created_at, source_time)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10)`

func logArgs(r store.LogRow) []any {
	return []any{r.ExecutionID, r.Seq, r.TaskKey, r.InstanceID, r.WaveNumber, r.EventType, r.Message, r.Context, r.Time, r.SourceTime}
}

// CreateExecution stores an execution with its waves, assignments and first log entries. The
// list's row is locked (FOR NO KEY UPDATE) first: concurrent starts of one list take run numbers
// one after the other, and DeleteTaskList, which locks it FOR UPDATE, waits.
func (s *Store) CreateExecution(ctx context.Context, e *schedulerv1.Execution, waves []*schedulerv1.Wave, assignments []*store.Assignment, entries []*commonv1.LogEntry, opts ...store.CreateOptions) error {
	if e.GetId() == "" {
		return errors.New("scheduler store: create execution: no id")
	}
	newRun := !store.ConcurrentAllowed(opts) && (e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_PENDING || e.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED)
	var (
		runNumber int32
		now       time.Time
		logs      []store.LogRow
	)
	err := s.createExecution(ctx, e, newRun, func(n int32, at time.Time) ([]stmt, error) {
		runNumber, now = n, at
		stmts, rows, err := createStatements(e, runNumber, now, waves, assignments, entries)
		logs = rows
		return stmts, err
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAlreadyExists) || errors.Is(err, store.ErrActive) {
			return err
		}
		return fmt.Errorf("scheduler store: create execution %q: %w", e.GetId(), err)
	}
	created(e, runNumber, now, waves, assignments, entries, logs)
	return nil
}

// createExecution runs CreateExecution's transaction in two round trips: BEGIN, the task list's
// lock and the reads that need it (the next run number, the store time, a run of the same
// request, an open run) in one; then the inserts (what inserts answers for that run number and
// time) and COMMIT in the other.
func (s *Store) createExecution(ctx context.Context, e *schedulerv1.Execution, newRun bool,
	inserts func(runNumber int32, now time.Time) ([]stmt, error)) error {
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		return err
	}
	open := true // a transaction may be open on conn
	defer func() {
		if open {
			// A connection that cannot roll back is closed (the pool then drops it).
			if _, err := conn.Exec(context.WithoutCancel(ctx), "rollback"); err != nil {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
		conn.Release()
	}()
	var (
		found              bool
		runNumber          int32
		now                time.Time
		existing, openExec *string
	)
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(`SELECT true FROM task_lists WHERE id = $1 FOR NO KEY UPDATE`, e.GetTaskListId()).Query(func(rows pgx.Rows) error {
		found = rows.Next()
		return nil
	})
	// clock_timestamp, read once the lock is held (the statement before): create times follow
	// run numbers. A new run (stored PENDING, as the engine starts every run) needs the list to
	// itself: the open run, if any.
	b.Queue(`SELECT coalesce(max(run_number), 0) + 1, clock_timestamp(),
		(SELECT execution_id FROM task_list_execution_runs WHERE task_list_id = $1 AND request_id = $2),
		(SELECT execution_id FROM task_list_execution_runs WHERE task_list_id = $1
			AND status IN ('pending', 'running', 'paused') ORDER BY created_at LIMIT 1)
		FROM task_list_execution_runs WHERE task_list_id = $1`,
		e.GetTaskListId(), e.GetRequestId()).QueryRow(func(row pgx.Row) error {
		return row.Scan(&runNumber, &now, &existing, &openExec)
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	switch {
	case !found:
		return fmt.Errorf("task list %q: %w", e.GetTaskListId(), store.ErrNotFound)
	case existing != nil:
		return fmt.Errorf("task list %q: execution %s has request id %q: %w", e.GetTaskListId(), *existing, e.GetRequestId(), store.ErrAlreadyExists)
	case openExec != nil && newRun:
		return store.OpenExecutionError(e.GetTaskListId(), *openExec)
	}
	stmts, err := inserts(runNumber, now.UTC())
	if err != nil {
		return err
	}
	err = execBatch(ctx, conn, append(stmts, stmt{"commit", "commit", nil}))
	if database.ViolationOf(err) == database.UniqueViolation {
		return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
	}
	if err != nil {
		return err
	}
	open = false
	return nil
}

// createStatements returns the inserts of CreateExecution and the log rows.
func createStatements(e *schedulerv1.Execution, runNumber int32, now time.Time, waves []*schedulerv1.Wave,
	assignments []*store.Assignment, entries []*commonv1.LogEntry) ([]stmt, []store.LogRow, error) {
	row, err := store.EncodeExecution(e)
	if err != nil {
		return nil, nil, err
	}
	row.RunNumber, row.LastSeq = runNumber, int64(len(entries))
	stmts := []stmt{{"insert execution", insertExecutionSQL, []any{row.ID, row.TaskListID, row.RunNumber, row.Status,
		row.Outcome, row.TriggeredBy, row.RequestID, row.PreviousExecutionID, row.FeatureBuildID, row.TotalTasks,
		row.CompletedTasks, row.FailedTasks, row.SkippedTasks, row.RunningTasks, row.CurrentWave, row.WaveCount,
		row.TotalAttempts, row.LastSeq, row.Detail, now, now, row.StartTime, row.EndTime}}}
	wrows, arows, err := store.CreateRows(e.GetId(), waves, assignments)
	if err != nil {
		return nil, nil, err
	}
	for _, w := range wrows {
		stmts = append(stmts, stmt{"insert wave " + w.ID, insertWaveSQL, waveArgs(w, now)})
	}
	if len(arows) > 0 {
		stmts = append(stmts, stmt{"insert assignments", insertAssignmentsSQL, assignmentsArgs(e.GetId(), arows, now)})
	}
	logs, err := store.LogRows(e.GetId(), 0, now, entries)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range logs {
		stmts = append(stmts, stmt{fmt.Sprintf("insert log entry %d", l.Seq), insertLogSQL, logArgs(l)})
	}
	return stmts, logs, nil
}

// created sets what CreateExecution assigned on what it was given.
func created(e *schedulerv1.Execution, runNumber int32, now time.Time, waves []*schedulerv1.Wave,
	assignments []*store.Assignment, entries []*commonv1.LogEntry, logs []store.LogRow) {
	e.RunNumber, e.LastSeq = runNumber, int64(len(entries))
	e.CreateTime, e.UpdateTime = timestamppb.New(now), timestamppb.New(now)
	store.Created(e, waves, assignments)
	store.SetEntries(entries, logs)
}

// AssignmentExecution returns the execution of an assignment.
func (s *Store) AssignmentExecution(ctx context.Context, assignmentID string) (string, error) {
	var id string
	err := s.Pool().QueryRow(ctx, `SELECT execution_id FROM wave_task_assignments WHERE assignment_id = $1`, assignmentID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
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
	err := s.Pool().QueryRow(ctx, `SELECT execution_id FROM task_list_execution_runs
		WHERE task_list_id = $1 AND request_id = $2`, taskListID, requestID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("task list %q: execution with request id %q: %w", taskListID, requestID, store.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("scheduler store: execution by request id: %w", err)
	}
	return id, nil
}

// GetExecution reads an execution and its waves in one snapshot (a repeatable-read transaction).
func (s *Store) GetExecution(ctx context.Context, id string) (*schedulerv1.Execution, []*schedulerv1.Wave, error) {
	var (
		e     *schedulerv1.Execution
		waves []*schedulerv1.Wave
	)
	err := pgx.BeginTxFunc(ctx, s.Pool(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		e, err = scanExecution(tx.QueryRow(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r WHERE r.execution_id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		waves, err = readWaves(ctx, tx, id)
		return err
	})
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
	e, err := scanExecution(s.Pool().QueryRow(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r WHERE r.execution_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: get execution %q: %w", id, err)
	}
	return e, nil
}

func readWaves(ctx context.Context, q querier, id string) ([]*schedulerv1.Wave, error) {
	rows, err := q.Query(ctx, `SELECT `+waveColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = $1 ORDER BY w.wave_number`, id)
	return collect(rows, err, scanWave)
}

// ListExecutions reads a page of executions, newest first.
func (s *Store) ListExecutions(ctx context.Context, q store.ListExecutionsQuery) ([]*schedulerv1.Execution, *store.Cursor, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.After != nil {
		where = append(where, fmt.Sprintf("(r.created_at, r.execution_id) < (%s, %s)", arg(q.After.CreateTime), arg(q.After.ID)))
	}
	if q.TaskListID != "" {
		where = append(where, "r.task_list_id = "+arg(q.TaskListID))
	}
	if len(q.Statuses) > 0 {
		statuses, err := store.ExecutionStatusNames(q.Statuses)
		if err != nil {
			return nil, nil, err
		}
		where = append(where, "r.status = ANY("+arg(statuses)+")")
	}
	if q.FeatureBuildID != "" {
		where = append(where, "r.feature_build_id = "+arg(q.FeatureBuildID))
	}
	query := `SELECT ` + executionColumns + ` FROM task_list_execution_runs r`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY r.created_at DESC, r.execution_id DESC LIMIT ` + arg(q.PageSize+1)
	rows, err := s.Pool().Query(ctx, query, args...)
	list, err := collect(rows, err, scanExecutionRow)
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

// assignmentWhere is the WHERE clause of q's filters, its arguments appended to args.
func assignmentWhere(q store.ListAssignmentsQuery, args *[]any) (string, error) {
	arg := func(v any) string {
		*args = append(*args, v)
		return fmt.Sprintf("$%d", len(*args))
	}
	where := []string{"a.execution_id = " + arg(q.ExecutionID)}
	if q.WaveNumber != 0 {
		where = append(where, "a.wave_number = "+arg(q.WaveNumber))
	}
	if q.TaskID != "" {
		where = append(where, "a.task_key = "+arg(q.TaskID))
	}
	if len(q.Statuses) > 0 {
		statuses, err := store.AssignmentStatusNames(q.Statuses)
		if err != nil {
			return "", err
		}
		where = append(where, "a.status = ANY("+arg(statuses)+")")
	}
	if q.InstanceID != "" {
		where = append(where, "a.instance_id = "+arg(q.InstanceID))
	}
	return ` WHERE ` + strings.Join(where, " AND "), nil
}

func readAssignments(ctx context.Context, db querier, q store.ListAssignmentsQuery, page bool) ([]*store.Assignment, error) {
	var args []any
	where, err := assignmentWhere(q, &args)
	if err != nil {
		return nil, err
	}
	query := `SELECT ` + assignmentColumns + ` FROM wave_task_assignments a` + where + assignmentOrder
	if page {
		args = append(args, q.PageSize+1, q.Offset)
		query += fmt.Sprintf(` LIMIT $%d OFFSET $%d`, len(args)-1, len(args))
	}
	rows, err := db.Query(ctx, query, args...)
	return collect(rows, err, scanAssignment)
}

// ListAssignments reads a page of an execution's assignments.
func (s *Store) ListAssignments(ctx context.Context, q store.ListAssignmentsQuery) ([]*store.Assignment, int, error) {
	list, err := readAssignments(ctx, s.Pool(), q, true)
	if err != nil {
		return nil, 0, fmt.Errorf("scheduler store: list assignments of %q: %w", q.ExecutionID, err)
	}
	next := 0
	if len(list) > q.PageSize {
		list, next = list[:q.PageSize], q.Offset+q.PageSize
	}
	return list, next, nil
}
