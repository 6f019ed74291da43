package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

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
	etx := &execTx{ctx: ctx, tx: tx, TxState: store.TxState{Exec: e, At: now.UTC()}}
	err = fn(etx)
	etx.Done = true
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
	ctx           context.Context
	tx            pgx.Tx
	store.TxState                     // the execution with the deferred writes applied
	logRows       []stmt              // deferred log inserts
	execRow       *store.ExecutionRow // deferred execution update, when PutExecution was called
	seqDirty      bool                // last_seq moved
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
				r.TotalAttempts, r.Detail, r.StartTime, r.EndTime, t.At, t.Exec.GetLastSeq()}})
	case t.seqDirty:
		stmts = append(stmts, stmt{"advance last seq", `UPDATE task_list_execution_runs SET last_seq = $2 WHERE execution_id = $1`,
			[]any{t.ID(), t.Exec.GetLastSeq()}})
	}
	if t.execRow != nil || t.seqDirty || len(t.logRows) > 0 {
		// Other replicas' long polls and streams wake at the commit (Listen), in the same batch:
		// no round trip of its own.
		stmts = append(stmts, stmt{"notify", `SELECT pg_notify('` + ChangesChannel + `', $1)`, []any{t.ID()}})
	}
	t.logRows, t.execRow, t.seqDirty = nil, nil, false
	if err := execBatch(t.ctx, t.tx, stmts); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", t.ID(), err)
	}
	return nil
}

func (t *execTx) PutExecution(e *schedulerv1.Execution) error {
	r, err := t.ExecutionRow(e)
	if err != nil {
		return err
	}
	e2, err := store.DecodeExecution(r)
	if err != nil {
		return err
	}
	t.Exec, t.execRow = e2, &r // written by flush
	return nil
}

func (t *execTx) Waves() ([]*schedulerv1.Wave, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	rows, err := t.tx.Query(t.ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = $1 ORDER BY w.wave_number`, t.ID())
	waves, err := collect(rows, err, scanWave)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: waves of %q: %w", t.ID(), err)
	}
	return waves, nil
}

func (t *execTx) Wave(n int32) (*schedulerv1.Wave, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	w, err := scanWave(t.tx.QueryRow(t.ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = $1 AND w.wave_number = $2`, t.ID(), n))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("wave %d of execution %q: %w", n, t.ID(), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: wave %d of %q: %w", n, t.ID(), err)
	}
	return w, nil
}

func (t *execTx) PutWave(w *schedulerv1.Wave) error {
	if err := t.Check(); err != nil {
		return err
	}
	r, err := store.EncodeWave(w)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE parallel_execution_waves SET status = $3, task_count = $4,
		completed_count = $5, failed_count = $6, skipped_count = $7, active_agents = $8, base_commit = $9,
		integration_commit = $10, started_at = $11, completed_at = $12
		WHERE wave_id = $1 AND execution_id = $2`,
		r.ID, t.ID(), r.Status, r.TaskCount, r.CompletedCount, r.FailedCount, r.SkippedCount, r.ActiveAgents,
		r.BaseCommit, r.IntegrationCommit, r.StartTime, r.EndTime)
	if err != nil {
		return fmt.Errorf("scheduler store: put wave %q: %w", w.GetId(), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("wave %q of execution %q: %w", w.GetId(), t.ID(), store.ErrNotFound)
	}
	return nil
}

func (t *execTx) Assignment(id string) (*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	a, err := scanAssignment(t.tx.QueryRow(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = $1 AND a.execution_id = $2`, id, t.ID()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("assignment %q of execution %q: %w", id, t.ID(), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: assignment %q: %w", id, err)
	}
	return a, nil
}

func (t *execTx) Assignments(q store.ListAssignmentsQuery) ([]*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	q.ExecutionID = t.ID()
	list, err := readAssignments(t.ctx, t.tx, q, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: assignments of %q: %w", t.ID(), err)
	}
	return list, nil
}

func (t *execTx) NextPending(waveNumber int32, kinds []schedulerv1.AssignmentKind) (*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	// Two indexed look-ups, never a sort of the wave's pending rows (a fan-out of n tasks made
	// every claim sort the n − k still pending): the wave's pending integration through its unique
	// index, else the first pending task in position order through the claimable index.
	var picks []string
	if len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION) {
		picks = append(picks, `(SELECT i.assignment_id FROM wave_task_assignments i WHERE i.wave_id =
			(SELECT w.wave_id FROM parallel_execution_waves w WHERE w.execution_id = $1 AND w.wave_number = $2)
			AND i.kind = 'integration' AND i.status = 'pending')`)
	}
	if len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK) {
		picks = append(picks, `(SELECT p.assignment_id FROM wave_task_assignments p
			WHERE p.execution_id = $1 AND p.wave_number = $2 AND p.status = 'pending' AND p.kind = 'task'
			ORDER BY p.position, p.assignment_id LIMIT 1)`)
	}
	if len(picks) == 0 {
		return nil, nil
	}
	pick := picks[0]
	if len(picks) == 2 {
		pick = "COALESCE(" + picks[0] + ", " + picks[1] + ")"
	}
	a, err := scanAssignment(t.tx.QueryRow(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = `+pick, t.ID(), waveNumber))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: next pending assignment of %q: %w", t.ID(), err)
	}
	return a, nil
}

func (t *execTx) NextEager(currentWave int32, limit int) ([]*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	rows, err := t.tx.Query(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.execution_id = $1 AND a.status = 'pending' AND a.ready_wave IS NOT NULL AND a.ready_wave <= $2 AND a.wave_number > $2 AND a.unmet_deps = 0
		ORDER BY a.wave_number, a.position, a.assignment_id LIMIT $3`, t.ID(), currentWave, limit)
	list, err := collect(rows, err, scanAssignment)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: eager assignments of %q: %w", t.ID(), err)
	}
	return list, nil
}

func (t *execTx) InsertAssignment(a *store.Assignment) error {
	if err := t.Check(); err != nil {
		return err
	}
	waves, err := readWaves(t.ctx, t.tx, t.ID())
	if err != nil {
		return fmt.Errorf("scheduler store: insert assignment: %w", err)
	}
	r, err := store.NewAssignmentRow(t.ID(), a, waves)
	if err != nil {
		return err
	}
	// ON CONFLICT DO NOTHING: a duplicate is ErrAlreadyExists and leaves the transaction usable.
	tag, err := t.tx.Exec(t.ctx, insertAssignmentSQL+` ON CONFLICT DO NOTHING`, assignmentArgs(r, t.At)...)
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
	if err := t.Check(); err != nil {
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
		r.ID, t.ID(), r.Status, r.InstanceID, r.Attempt, r.FencingToken, r.LeaseExpireTime, r.AssignTime,
		r.CompleteTime, r.LastReportSeq, r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail, t.At, r.SessionID)
	if err != nil {
		return fmt.Errorf("scheduler store: put assignment %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("assignment %q of execution %q: %w", r.ID, t.ID(), store.ErrNotFound)
	}
	return nil
}

func (t *execTx) Append(entries ...*commonv1.LogEntry) error {
	if err := t.Check(); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	rows, err := store.LogRows(t.ID(), t.Exec.GetLastSeq(), t.At, entries)
	if err != nil {
		return err
	}
	for _, r := range rows {
		t.logRows = append(t.logRows, stmt{fmt.Sprintf("insert log entry %d", r.Seq), insertLogSQL, logArgs(r)})
	}
	t.Exec.LastSeq, t.seqDirty = rows[len(rows)-1].Seq, true // written by flush
	store.SetEntries(entries, rows)
	return nil
}

func (t *execTx) PutCheckpoint(c *commonv1.Checkpoint, assignmentID string, attempt int32) error {
	if err := t.Check(); err != nil {
		return err
	}
	if assignmentID != "" {
		var found bool
		err := t.tx.QueryRow(t.ctx, `SELECT true FROM wave_task_assignments WHERE assignment_id = $1 AND execution_id = $2`,
			assignmentID, t.ID()).Scan(&found)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("assignment %q of execution %q: %w", assignmentID, t.ID(), store.ErrNotFound)
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
		r.ID, t.ID(), r.TaskKey, r.AssignmentID, r.Attempt, r.InstanceID, r.GitRef, r.Files, r.Metadata, t.At)
	if err != nil {
		return fmt.Errorf("scheduler store: put checkpoint %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("checkpoint %q: %w", r.ID, store.ErrAlreadyExists)
	}
	c.ExecutionId, c.CreateTime = t.ID(), timestamppb.New(t.At)
	return nil
}

func (t *execTx) SetTaskStatus(taskID string, status commonv1.TaskStatus) error {
	if err := t.Check(); err != nil {
		return err
	}
	name, err := store.TaskStatusName(status)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE tasks SET status = $3, updated_at = $4 WHERE task_list_id = $1 AND task_key = $2`,
		t.Exec.GetTaskListId(), taskID, name, t.At)
	if err != nil {
		return fmt.Errorf("scheduler store: set status of task %q: %w", taskID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("task %q of task list %q: %w", taskID, t.Exec.GetTaskListId(), store.ErrNotFound)
	}
	return nil
}

func (t *execTx) SatisfyDependencies(taskIDs []string) error {
	if err := t.Check(); err != nil {
		return err
	}
	tasks, counts := store.DependencyCounts(taskIDs)
	if len(tasks) == 0 {
		return nil
	}
	if _, err := t.tx.Exec(t.ctx, `UPDATE wave_task_assignments a SET unmet_deps = GREATEST(a.unmet_deps - d.n, 0)
		FROM unnest($2::text[], $3::int[]) AS d(task_key, n)
		WHERE a.execution_id = $1 AND a.task_key = d.task_key AND a.unmet_deps > 0`, t.ID(), tasks, counts); err != nil {
		return fmt.Errorf("scheduler store: satisfy dependencies in %q: %w", t.ID(), err)
	}
	return nil
}
