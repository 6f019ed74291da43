package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/proto"
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
	assignmentColumns = `a.assignment_id, a.execution_id, a.wave_id, a.wave_number, a.kind, a.task_key,
	a.status, a.instance_id, a.attempt, a.fencing_token, a.lease_expires_at, a.assigned_at,
	a.completed_at, a.last_report_seq, a.position, a.final_integration, a.previous_errors::text,
	a.merges::text, a.detail::text, a.session_id`
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
		&r.Merges, &r.Detail, &r.SessionID); err != nil {
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
func execBatch(ctx context.Context, tx pgx.Tx, stmts []stmt) error {
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
	detail, created_at, updated_at, session_id)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17::jsonb, $18::jsonb,
	$19::jsonb, $20, $20, $21)`

func assignmentArgs(r store.AssignmentRow, now time.Time) []any {
	return []any{r.ID, r.ExecutionID, r.WaveID, r.WaveNumber, r.Kind, r.TaskKey, r.Status, r.InstanceID,
		r.Attempt, r.FencingToken, r.LeaseExpireTime, r.AssignTime, r.CompleteTime, r.LastReportSeq,
		r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail, now, r.SessionID}
}

const insertLogSQL = `INSERT INTO task_execution_log (execution_id, seq, task_key, instance_id,
	wave_number, event_type, message, context, created_at, source_time)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10)`

func logArgs(r store.LogRow) []any {
	return []any{r.ExecutionID, r.Seq, r.TaskKey, r.InstanceID, r.WaveNumber, r.EventType, r.Message, r.Context, r.Time, r.SourceTime}
}

// logRows numbers entries after lastSeq, for execution id at now, and returns their rows. The
// entries themselves are not changed (see setEntries).
func logRows(id string, lastSeq int64, now time.Time, entries []*commonv1.LogEntry) ([]store.LogRow, error) {
	rows := make([]store.LogRow, len(entries))
	for i, e := range entries {
		r, err := store.EncodeLogEntry(e)
		if err != nil {
			return nil, err
		}
		r.ExecutionID, r.Seq, r.Time = id, lastSeq+int64(i)+1, now
		rows[i] = r
	}
	return rows, nil
}

// setEntries gives entries the seqs, execution and time of their stored rows.
func setEntries(entries []*commonv1.LogEntry, rows []store.LogRow) {
	for i, e := range entries {
		e.Seq, e.ExecutionId, e.Time = rows[i].Seq, rows[i].ExecutionID, timestamppb.New(rows[i].Time)
	}
}

// CreateExecution stores an execution with its waves, assignments and first log entries. The
// list's row is locked (FOR NO KEY UPDATE) first: concurrent starts of one list take run numbers
// one after the other, and DeleteTaskList, which locks it FOR UPDATE, waits.
func (s *Store) CreateExecution(ctx context.Context, e *schedulerv1.Execution, waves []*schedulerv1.Wave, assignments []*store.Assignment, entries []*commonv1.LogEntry) error {
	if e.GetId() == "" {
		return errors.New("scheduler store: create execution: no id")
	}
	var (
		runNumber int32
		now       time.Time
		logs      []store.LogRow
	)
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var found string
		err := tx.QueryRow(ctx, `SELECT id FROM task_lists WHERE id = $1 FOR NO KEY UPDATE`, e.GetTaskListId()).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("task list %q: %w", e.GetTaskListId(), store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		// clock_timestamp, read once the lock is held: create times follow run numbers.
		var existing *string
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(run_number), 0) + 1, clock_timestamp(),
			(SELECT execution_id FROM task_list_execution_runs WHERE task_list_id = $1 AND request_id = $2)
			FROM task_list_execution_runs WHERE task_list_id = $1`,
			e.GetTaskListId(), e.GetRequestId()).Scan(&runNumber, &now, &existing); err != nil {
			return err
		}
		if existing != nil {
			return fmt.Errorf("task list %q: execution %s has request id %q: %w", e.GetTaskListId(), *existing, e.GetRequestId(), store.ErrAlreadyExists)
		}
		now = now.UTC()
		stmts, rows, err := createStatements(e, runNumber, now, waves, assignments, entries)
		if err != nil {
			return err
		}
		logs = rows
		err = execBatch(ctx, tx, stmts)
		if database.ViolationOf(err) == database.UniqueViolation {
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrAlreadyExists) {
			return err
		}
		return fmt.Errorf("scheduler store: create execution %q: %w", e.GetId(), err)
	}
	created(e, runNumber, now, waves, assignments, entries, logs)
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
	for _, a := range arows {
		stmts = append(stmts, stmt{"insert assignment " + a.ID, insertAssignmentSQL, assignmentArgs(a, now)})
	}
	logs, err := logRows(e.GetId(), 0, now, entries)
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
	setEntries(entries, logs)
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

// updateAttempts is how many times UpdateExecution runs fn when Postgres reports a deadlock or
// a serialization failure.
const updateAttempts = 5

// UpdateExecution runs fn in a transaction holding the execution's row lock, and runs it again
// (up to updateAttempts in all) when Postgres aborts the transaction for a deadlock or a
// serialization failure.
func (s *Store) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	for attempt := 1; ; attempt++ {
		err := s.updateOnce(ctx, id, fn)
		if attempt < updateAttempts && retryable(err) && ctx.Err() == nil {
			time.Sleep(time.Duration(attempt*attempt) * 5 * time.Millisecond)
			continue
		}
		return err
	}
}

// retryable reports whether err is a deadlock or a serialization failure.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

func (s *Store) updateOnce(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var now time.Time
	// FOR NO KEY UPDATE: writers of the execution wait for each other, while inserts that only
	// reference the row (its children's foreign keys) do not.
	e, err := scanExecution(tx.QueryRow(ctx, `SELECT `+executionColumns+`, now() FROM task_list_execution_runs r
		WHERE r.execution_id = $1 FOR NO KEY UPDATE`, id), &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	etx := &execTx{ctx: ctx, tx: tx, now: now.UTC(), e: e}
	err = fn(etx)
	etx.done = true
	if err != nil {
		return err
	}
	if err := etx.flush(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: commit: %w", id, err)
	}
	return nil
}

// execTx is the ExecTx of one UpdateExecution attempt.
//
// The execution row is locked for the whole transaction, so every other writer of the execution
// waits on it: each round trip made while holding it costs every claim, report and completion of
// the run. Writes that cannot fail for a reason the caller could act on are therefore deferred and
// sent in one batch just before the commit: the log entries (their seqs come from the locked row)
// and the execution row itself (with last_seq folded in). Writes whose "not found" the caller must
// see at once (waves, assignments, task status) stay immediate.
type execTx struct {
	ctx      context.Context
	tx       pgx.Tx
	now      time.Time
	e        *schedulerv1.Execution // as stored in the transaction, with the deferred writes applied
	done     bool
	logRows  []stmt              // deferred log inserts
	execRow  *store.ExecutionRow // deferred execution update, when PutExecution was called
	seqDirty bool                // last_seq moved
}

// flush sends the deferred writes in one round trip.
func (t *execTx) flush() error {
	stmts := t.logRows
	switch {
	case t.execRow != nil:
		r := t.execRow
		stmts = append(stmts, stmt{"put execution", `UPDATE task_list_execution_runs SET status = $2, outcome = $3,
		triggered_by = $4, previous_execution_id = $5, feature_build_id = $6, total_tasks = $7,
		completed_tasks = $8, failed_tasks = $9, skipped_tasks = $10, running_tasks = $11,
		current_wave = $12, wave_count = $13, total_attempts = $14, detail = $15::jsonb,
		started_at = $16, completed_at = $17, updated_at = $18, last_seq = $19 WHERE execution_id = $1`,
			[]any{r.ID, r.Status, r.Outcome, r.TriggeredBy, r.PreviousExecutionID, r.FeatureBuildID, r.TotalTasks,
				r.CompletedTasks, r.FailedTasks, r.SkippedTasks, r.RunningTasks, r.CurrentWave, r.WaveCount,
				r.TotalAttempts, r.Detail, r.StartTime, r.EndTime, t.now, t.e.GetLastSeq()}})
	case t.seqDirty:
		stmts = append(stmts, stmt{"advance last seq", `UPDATE task_list_execution_runs SET last_seq = $2 WHERE execution_id = $1`,
			[]any{t.id(), t.e.GetLastSeq()}})
	}
	t.logRows, t.execRow, t.seqDirty = nil, nil, false
	if err := execBatch(t.ctx, t.tx, stmts); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", t.id(), err)
	}
	return nil
}

func (t *execTx) id() string { return t.e.GetId() }

// check fails once UpdateExecution's function has returned.
func (t *execTx) check() error {
	if t.done {
		return fmt.Errorf("execution %q: %w", t.id(), store.ErrTxDone)
	}
	return nil
}

func (t *execTx) Now() time.Time { return t.now }

func (t *execTx) Execution() *schedulerv1.Execution { return proto.CloneOf(t.e) }

func (t *execTx) PutExecution(e *schedulerv1.Execution) error {
	if err := t.check(); err != nil {
		return err
	}
	if e.GetId() != t.id() {
		return fmt.Errorf("scheduler store: put execution %q in the transaction of %q", e.GetId(), t.id())
	}
	stored := store.KeepStored(e, t.e, t.now)
	r, err := store.EncodeExecution(stored)
	if err != nil {
		return err
	}
	e2, err := store.DecodeExecution(r)
	if err != nil {
		return err
	}
	t.e, t.execRow = e2, &r // written by flush
	return nil
}

func (t *execTx) Waves() ([]*schedulerv1.Wave, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	waves, err := readWaves(t.ctx, t.tx, t.id())
	if err != nil {
		return nil, fmt.Errorf("scheduler store: waves of %q: %w", t.id(), err)
	}
	return waves, nil
}

func (t *execTx) PutWave(w *schedulerv1.Wave) error {
	if err := t.check(); err != nil {
		return err
	}
	r, err := store.EncodeWave(w)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE parallel_execution_waves SET status = $3, task_count = $4,
		completed_count = $5, failed_count = $6, skipped_count = $7, active_agents = $8, base_commit = $9,
		integration_commit = $10, detail = $11::jsonb, started_at = $12, completed_at = $13
		WHERE wave_id = $1 AND execution_id = $2`,
		r.ID, t.id(), r.Status, r.TaskCount, r.CompletedCount, r.FailedCount, r.SkippedCount, r.ActiveAgents,
		r.BaseCommit, r.IntegrationCommit, r.Detail, r.StartTime, r.EndTime)
	if err != nil {
		return fmt.Errorf("scheduler store: put wave %q: %w", w.GetId(), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("wave %q of execution %q: %w", w.GetId(), t.id(), store.ErrNotFound)
	}
	return nil
}

func (t *execTx) Assignment(id string) (*store.Assignment, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	a, err := scanAssignment(t.tx.QueryRow(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = $1 AND a.execution_id = $2`, id, t.id()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("assignment %q of execution %q: %w", id, t.id(), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: assignment %q: %w", id, err)
	}
	return a, nil
}

func (t *execTx) Assignments(q store.ListAssignmentsQuery) ([]*store.Assignment, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	q.ExecutionID = t.id()
	list, err := readAssignments(t.ctx, t.tx, q, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: assignments of %q: %w", t.id(), err)
	}
	return list, nil
}

func (t *execTx) NextPending(waveNumber int32, kinds []schedulerv1.AssignmentKind) (*store.Assignment, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	args := []any{t.id(), waveNumber}
	query := `SELECT ` + assignmentColumns + ` FROM wave_task_assignments a
		WHERE a.execution_id = $1 AND a.wave_number = $2 AND a.status = 'pending'`
	if len(kinds) > 0 {
		names, err := store.AssignmentKindNames(kinds)
		if err != nil {
			return nil, err
		}
		args = append(args, names)
		query += ` AND a.kind = ANY($3)`
	}
	query += ` ORDER BY CASE a.kind WHEN 'integration' THEN 0 ELSE 1 END, a.position, a.assignment_id LIMIT 1`
	a, err := scanAssignment(t.tx.QueryRow(t.ctx, query, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: next pending assignment of %q: %w", t.id(), err)
	}
	return a, nil
}

func (t *execTx) InsertAssignment(a *store.Assignment) error {
	if err := t.check(); err != nil {
		return err
	}
	waves, err := readWaves(t.ctx, t.tx, t.id())
	if err != nil {
		return fmt.Errorf("scheduler store: insert assignment: %w", err)
	}
	r, err := store.NewAssignmentRow(t.id(), a, waves)
	if err != nil {
		return err
	}
	// ON CONFLICT DO NOTHING: a duplicate is ErrAlreadyExists and leaves the transaction usable.
	tag, err := t.tx.Exec(t.ctx, insertAssignmentSQL+` ON CONFLICT DO NOTHING`, assignmentArgs(r, t.now)...)
	if err != nil {
		return fmt.Errorf("scheduler store: insert assignment %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return store.DuplicateAssignment(r)
	}
	store.Inserted(a, r)
	return nil
}

func (t *execTx) PutAssignment(a *store.Assignment) error {
	if err := t.check(); err != nil {
		return err
	}
	r, err := store.EncodeAssignment(a)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE wave_task_assignments SET status = $3, instance_id = $4,
		attempt = $5, fencing_token = $6, lease_expires_at = $7, assigned_at = $8, completed_at = $9,
		last_report_seq = $10, position = $11, final_integration = $12, previous_errors = $13::jsonb,
		merges = $14::jsonb, detail = $15::jsonb, updated_at = $16, session_id = $17
		WHERE assignment_id = $1 AND execution_id = $2`,
		r.ID, t.id(), r.Status, r.InstanceID, r.Attempt, r.FencingToken, r.LeaseExpireTime, r.AssignTime,
		r.CompleteTime, r.LastReportSeq, r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail, t.now, r.SessionID)
	if err != nil {
		return fmt.Errorf("scheduler store: put assignment %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("assignment %q of execution %q: %w", r.ID, t.id(), store.ErrNotFound)
	}
	return nil
}

func (t *execTx) Append(entries ...*commonv1.LogEntry) error {
	if err := t.check(); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	rows, err := logRows(t.id(), t.e.GetLastSeq(), t.now, entries)
	if err != nil {
		return err
	}
	for _, r := range rows {
		t.logRows = append(t.logRows, stmt{fmt.Sprintf("insert log entry %d", r.Seq), insertLogSQL, logArgs(r)})
	}
	t.e.LastSeq, t.seqDirty = rows[len(rows)-1].Seq, true // written by flush
	setEntries(entries, rows)
	return nil
}

func (t *execTx) PutCheckpoint(c *commonv1.Checkpoint, assignmentID string, attempt int32) error {
	if err := t.check(); err != nil {
		return err
	}
	if assignmentID != "" {
		var found bool
		err := t.tx.QueryRow(t.ctx, `SELECT true FROM wave_task_assignments WHERE assignment_id = $1 AND execution_id = $2`,
			assignmentID, t.id()).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("assignment %q of execution %q: %w", assignmentID, t.id(), store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("scheduler store: put checkpoint %q: %w", c.GetId(), err)
		}
	}
	r, err := store.EncodeCheckpoint(c, assignmentID, attempt)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO checkpoints (checkpoint_id, execution_id, task_key, assignment_id,
		attempt, instance_id, git_ref, files, metadata, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10) ON CONFLICT DO NOTHING`,
		r.ID, t.id(), r.TaskKey, r.AssignmentID, r.Attempt, r.InstanceID, r.GitRef, r.Files, r.Metadata, t.now)
	if err != nil {
		return fmt.Errorf("scheduler store: put checkpoint %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("checkpoint %q: %w", r.ID, store.ErrAlreadyExists)
	}
	c.ExecutionId, c.CreateTime = t.id(), timestamppb.New(t.now)
	return nil
}

func (t *execTx) SetTaskStatus(taskID string, status commonv1.TaskStatus) error {
	if err := t.check(); err != nil {
		return err
	}
	name, err := store.TaskStatusName(status)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE tasks SET status = $3, updated_at = $4 WHERE task_list_id = $1 AND task_key = $2`,
		t.e.GetTaskListId(), taskID, name, t.now)
	if err != nil {
		return fmt.Errorf("scheduler store: set status of task %q: %w", taskID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("task %q of task list %q: %w", taskID, t.e.GetTaskListId(), store.ErrNotFound)
	}
	return nil
}

// ClaimableExecutions reads the running executions with a pending assignment in an open wave.
func (s *Store) ClaimableExecutions(ctx context.Context, limit int) ([]*schedulerv1.Execution, error) {
	rows, err := s.Pool().Query(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r
		WHERE r.status = 'running' AND EXISTS (SELECT 1 FROM wave_task_assignments a
			JOIN parallel_execution_waves w ON w.wave_id = a.wave_id
			WHERE a.execution_id = r.execution_id AND a.status = 'pending' AND w.status IN ('running', 'integrating'))
		ORDER BY r.created_at, r.execution_id LIMIT $1`, limit)
	list, err := collect(rows, err, scanExecutionRow)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: claimable executions: %w", err)
	}
	return list, nil
}

// ExpiredLeases reads the held assignments whose lease ran out by Postgres' now().
func (s *Store) ExpiredLeases(ctx context.Context, limit int) ([]*store.Assignment, error) {
	rows, err := s.Pool().Query(ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.status IN ('assigned', 'running') AND a.lease_expires_at <= now()
		ORDER BY a.lease_expires_at, a.assignment_id LIMIT $1`, limit)
	list, err := collect(rows, err, scanAssignment)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: expired leases: %w", err)
	}
	return list, nil
}

// HeldAssignments reads the assignments that the instances hold (ASSIGNED or RUNNING).
func (s *Store) HeldAssignments(ctx context.Context, instances []string, limit int) ([]*store.Assignment, error) {
	if len(instances) == 0 {
		return nil, nil
	}
	rows, err := s.Pool().Query(ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.status IN ('assigned', 'running') AND a.instance_id = ANY($1)
		ORDER BY a.assigned_at, a.assignment_id LIMIT $2`, instances, limit)
	list, err := collect(rows, err, scanAssignment)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: held assignments: %w", err)
	}
	return list, nil
}

// ExecutionsInStatus reads the executions in some statuses, oldest first.
func (s *Store) ExecutionsInStatus(ctx context.Context, statuses []schedulerv1.ExecutionStatus, limit int) ([]*schedulerv1.Execution, error) {
	names, err := store.ExecutionStatusNames(statuses)
	if err != nil {
		return nil, err
	}
	rows, err := s.Pool().Query(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r
		WHERE r.status = ANY($1) ORDER BY r.created_at, r.execution_id LIMIT $2`, names, limit)
	list, err := collect(rows, err, scanExecutionRow)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: executions in status: %w", err)
	}
	return list, nil
}

// ReadLog reads log entries and the execution's last seq in one statement, so both come from
// one snapshot.
func (s *Store) ReadLog(ctx context.Context, q store.LogQuery) ([]*commonv1.LogEntry, bool, int64, error) {
	args := []any{q.ExecutionID, q.AfterSeq}
	where := []string{"l.execution_id = $1", "l.seq > $2"}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.TaskID != "" {
		where = append(where, "l.task_key = "+arg(q.TaskID))
	}
	if q.InstanceID != "" {
		where = append(where, "l.instance_id = "+arg(q.InstanceID))
	}
	if len(q.EventTypes) > 0 {
		types, err := store.EventTypeNames(q.EventTypes)
		if err != nil {
			return nil, false, 0, err
		}
		where = append(where, "l.event_type = ANY("+arg(types)+")")
	}
	order := "ASC"
	if q.Tail {
		order = "DESC"
	}
	query := `SELECT r.last_seq, p.* FROM task_list_execution_runs r
		LEFT JOIN (SELECT ` + logColumns + ` FROM task_execution_log l WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY l.seq ` + order + ` LIMIT ` + arg(q.Limit+1) + `) p ON true
		WHERE r.execution_id = $1 ORDER BY p.seq`
	rows, err := s.Pool().Query(ctx, query, args...)
	if err != nil {
		return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
	}
	defer rows.Close()
	found := false
	var lastSeq int64
	var list []store.LogRow
	for rows.Next() {
		found = true
		var (
			r                 store.LogRow
			execID, eventType *string
			seq               *int64
			message           *string
			created           *time.Time
		)
		if err := rows.Scan(&lastSeq, &execID, &seq, &r.TaskKey, &r.InstanceID, &r.WaveNumber, &eventType,
			&message, &r.Context, &created, &r.SourceTime); err != nil {
			return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
		}
		if seq == nil {
			continue // the execution without a matching entry
		}
		r.ExecutionID, r.Seq, r.EventType, r.Message, r.Time = *execID, *seq, *eventType, *message, created.UTC()
		utcp(r.SourceTime)
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, 0, fmt.Errorf("scheduler store: read log of %q: %w", q.ExecutionID, err)
	}
	if !found {
		return nil, false, 0, fmt.Errorf("execution %q: %w", q.ExecutionID, store.ErrNotFound)
	}
	entries, hasMore, err := store.LogPage(list, q)
	return entries, hasMore, lastSeq, err
}

// lead is a held leadership: its session and lock key; released at most once.
type lead struct {
	conn *pgx.Conn
	key  int64
	once sync.Once
}

// leadKey is the advisory lock key of a named leadership: the FNV-1a hash of
// "converge:scheduler:lead:<name>".
func leadKey(name string) int64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, "converge:scheduler:lead:"+name)
	return int64(h.Sum64())
}

// TryLead takes the session-level advisory lock of the leadership on a connection of its own,
// taken out of the pool: the lock lasts as long as that session, and release (unlock and close)
// ends it. Closing the store does not wait for a held leadership.
func (s *Store) TryLead(ctx context.Context, name string) (bool, func(), error) {
	pc, err := s.Pool().Acquire(ctx)
	if err != nil {
		return false, func() {}, fmt.Errorf("scheduler store: lead %q: %w", name, err)
	}
	key := leadKey(name)
	var held bool
	if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&held); err != nil {
		pc.Release()
		return false, func() {}, fmt.Errorf("scheduler store: lead %q: %w", name, err)
	}
	if !held {
		pc.Release()
		return false, func() {}, nil
	}
	l := &lead{conn: pc.Hijack(), key: key}
	return true, l.release, nil
}

func (l *lead) release() {
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.key)
		_ = l.conn.Close(ctx) // ends the session, and so the lock, whatever the unlock did
	})
}
