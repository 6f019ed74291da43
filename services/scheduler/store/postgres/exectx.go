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
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	open := true // a transaction may be open on conn
	defer func() {
		if open {
			// A connection that cannot roll back is closed (the pool then drops it): its
			// transaction ends with it.
			if _, err := conn.Exec(context.WithoutCancel(ctx), "rollback"); err != nil {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
			}
		}
		conn.Release()
	}()
	var (
		now time.Time
		e   *schedulerv1.Execution
	)
	// BEGIN and the lock in one round trip. FOR NO KEY UPDATE: writers of the execution wait for
	// each other, while inserts that only reference the row (its children's foreign keys) do not.
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(`SELECT `+executionColumns+`, now() FROM task_list_execution_runs r
		WHERE r.execution_id = $1 FOR NO KEY UPDATE`, id).QueryRow(func(row pgx.Row) error {
		var err error
		e, err = scanExecution(row, &now)
		return err
	})
	hint := store.AssignmentHint(ctx)
	pre := prefetch(b, id, hint)
	if hint != "" {
		b.Queue(heldPlanSQL)
	}
	held := prefetchHeld(b, id, hint)
	next := prefetchNext(b, id, hint, store.NextPendingHint(ctx), pre, held)
	if hint != "" {
		b.Queue(heldPlanEndSQL)
	}
	err = conn.SendBatch(ctx, b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	etx := &execTx{ctx: ctx, p: &pipe{conn: conn}, TxState: store.TxState{Exec: e, At: now.UTC()}, pre: pre, next: next.known(), held: held}
	if pre != nil {
		etx.knowWave(pre.w)
	}
	err = fn(etx)
	etx.Done = true
	if err != nil {
		return err
	}
	// The deferred writes and COMMIT in one round trip.
	if err := etx.flush(stmt{"commit", "commit", nil}); err != nil {
		return err
	}
	open = false
	return nil
}

// execTx is the ExecTx of one UpdateExecution attempt.
//
// The execution row is locked for the whole transaction, so every other writer of the execution
// waits on it: each round trip made while holding it costs every claim, report and completion of
// the run. Writes that cannot fail for a reason the caller could act on are therefore deferred and
// sent in one batch just before the commit: the log entries (their seqs come from the locked row)
// and the execution row itself (with last_seq folded in). Updates of the rows the transaction has
// read (its assignments, waves, and their tasks' status) cannot miss and go out with the next
// statement (pipe); a write whose "not found" the caller must see at once (a row the transaction
// has not read) stays immediate. BEGIN rides with the lock, COMMIT with the last batch.
type execTx struct {
	ctx           context.Context
	p             *pipe
	store.TxState                     // the execution with the deferred writes applied
	logRows       []stmt              // deferred inserts (the knowledge outbox's)
	logs          []store.LogRow      // deferred log entries, one INSERT at the commit
	execRow       *store.ExecutionRow // deferred execution update, when PutExecution was called
	seqDirty      bool                // last_seq moved
	// The rows read in this transaction, by id (tasks by key): they exist and are the locked
	// execution's until the commit.
	knownAssignments, knownWaves, knownTasks map[string]bool
	pre                                      *prefetched  // read with the lock (store.AssignmentHint)
	next                                     *nextPending // read with the lock (store.NextPendingHint)
	savepoints                               int          // Savepoint's calls, for its names
	floor                                    mark         // the running Savepoint's mark: writes before it are not folded into
	// Rows read with the lock for a grouped transaction's later requests (readahead.go): the
	// execution's other held assignments, not written since, and its waves as read or written.
	held  map[string]*store.Assignment
	waves map[string]*schedulerv1.Wave
}

// prefetched is an assignment and its wave read in the lock's round trip, for the transaction's
// first read of each before its first write (a write drops them).
type prefetched struct {
	a *store.Assignment
	w *schedulerv1.Wave
}

// prefetch queues, after the lock in b, the reads of assignment id of execution and of its wave.
func prefetch(b *pgx.Batch, execution, id string) *prefetched {
	if id == "" {
		return nil
	}
	pre := &prefetched{}
	b.Queue(`SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = $1 AND a.execution_id = $2`, id, execution).Query(func(rows pgx.Rows) error {
		if rows.Next() {
			a, err := scanAssignment(rows)
			if err != nil {
				return err
			}
			pre.a = a
		}
		return nil
	})
	b.Queue(`SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = $2 AND w.wave_id = (SELECT a.wave_id FROM wave_task_assignments a
		WHERE a.assignment_id = $1 AND a.execution_id = $2)`, id, execution).Query(func(rows pgx.Rows) error {
		if rows.Next() {
			w, err := scanWave(rows)
			if err != nil {
				return err
			}
			pre.w = w
		}
		return nil
	})
	return pre
}

// knowAssignments records assignments read (or inserted) in this transaction.
func (t *execTx) knowAssignments(list ...*store.Assignment) {
	if t.knownAssignments == nil {
		t.knownAssignments, t.knownTasks = map[string]bool{}, map[string]bool{}
	}
	for _, a := range list {
		t.knownAssignments[a.GetId()] = true
		if a.GetTaskId() != "" {
			t.knownTasks[a.GetTaskId()] = true
		}
	}
}

// knowWaves records waves read in this transaction.
func (t *execTx) knowWaves(list ...*schedulerv1.Wave) {
	if t.knownWaves == nil {
		t.knownWaves = map[string]bool{}
	}
	for _, w := range list {
		t.knownWaves[w.GetId()] = true
	}
}

// write runs an update of one row that must find it: deferred (pipe) when the row is known,
// at once otherwise; missing is the error when it finds none.
func (t *execTx) write(known bool, what string, missing error, sql string, args ...any) error {
	t.pre = nil // answers reads only until the first write
	if known {
		t.p.later(stmt{what, sql, args}, func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() == 0 {
				return missing
			}
			return nil
		})
		return nil
	}
	tag, err := t.p.Exec(t.ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("scheduler store: %s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return missing
	}
	return nil
}

// flush sends the deferred writes, then end (COMMIT), in one round trip.
func (t *execTx) flush(end stmt) error {
	stmts := t.logRows
	if len(t.logs) > 0 {
		stmts = append(stmts, insertLog(t.logs))
	}
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
	if t.execRow != nil || t.seqDirty || len(t.logRows) > 0 || len(t.logs) > 0 {
		// Other replicas' long polls and streams wake at the commit (Listen), in the same batch:
		// no round trip of its own.
		stmts = append(stmts, stmt{"notify", `SELECT pg_notify('` + ChangesChannel + `', $1)`, []any{changePayload(t.Exec)}})
	}
	if t.Async {
		// Set in the commit's own batch: it only changes how that commit waits (it returns
		// once the commit is in the WAL buffers; the WAL writer flushes it within
		// wal_writer_delay, or the next synchronous commit does).
		stmts = append(stmts, stmt{"asynchronous commit", "SET LOCAL synchronous_commit = off", nil})
	}
	stmts = append(stmts, end)
	t.logRows, t.logs, t.execRow, t.seqDirty = nil, nil, nil, false
	if err := t.p.flush(t.ctx, stmts); err != nil {
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
	rows, err := t.p.Query(t.ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = $1 ORDER BY w.wave_number`, t.ID())
	waves, err := collect(rows, err, scanWave)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: waves of %q: %w", t.ID(), err)
	}
	t.knowWaves(waves...)
	return waves, nil
}

func (t *execTx) Wave(n int32) (*schedulerv1.Wave, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if t.pre != nil && t.pre.w != nil && t.pre.w.GetWaveNumber() == n {
		w := t.pre.w
		t.pre.w = nil
		t.knowWaves(w)
		return w, nil
	}
	w, err := scanWave(t.p.QueryRow(t.ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = $1 AND w.wave_number = $2`, t.ID(), n))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("wave %d of execution %q: %w", n, t.ID(), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: wave %d of %q: %w", n, t.ID(), err)
	}
	t.knowWaves(w)
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
	t.wroteWave(r)
	return t.write(t.knownWaves[r.ID], fmt.Sprintf("put wave %q", r.ID),
		fmt.Errorf("wave %q of execution %q: %w", w.GetId(), t.ID(), store.ErrNotFound),
		`UPDATE parallel_execution_waves SET status = $3, task_count = $4,
		completed_count = $5, failed_count = $6, skipped_count = $7, active_agents = $8, base_commit = $9,
		integration_commit = $10, started_at = $11, completed_at = $12
		WHERE wave_id = $1 AND execution_id = $2`,
		r.ID, t.ID(), r.Status, r.TaskCount, r.CompletedCount, r.FailedCount, r.SkippedCount, r.ActiveAgents,
		r.BaseCommit, r.IntegrationCommit, r.StartTime, r.EndTime)
}

func (t *execTx) Assignment(id string) (*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if t.pre != nil && t.pre.a != nil && t.pre.a.GetId() == id {
		a := t.pre.a
		t.pre.a = nil
		t.knowAssignments(a)
		return a, nil
	}
	a, err := scanAssignment(t.p.QueryRow(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = $1 AND a.execution_id = $2`, id, t.ID()))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("assignment %q of execution %q: %w", id, t.ID(), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: assignment %q: %w", id, err)
	}
	t.knowAssignments(a)
	return a, nil
}

func (t *execTx) Assignments(q store.ListAssignmentsQuery) ([]*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	q.ExecutionID = t.ID()
	list, err := readAssignments(t.ctx, t.p, q, false)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: assignments of %q: %w", t.ID(), err)
	}
	t.knowAssignments(list...)
	return list, nil
}

// nextPendingTaskSQL picks the first pending task of execution $1's wave $2 in claim order: an
// index scan of the claimable index (migration 0011), which holds that whole order.
const nextPendingTaskSQL = `(SELECT p.assignment_id FROM wave_task_assignments p
			WHERE p.execution_id = $1 AND p.wave_number = $2 AND p.status = 'pending' AND p.kind = 'task'
			ORDER BY p.position, p.assignment_id LIMIT 1)`

func (t *execTx) NextPending(waveNumber int32, kinds []schedulerv1.AssignmentKind) (*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if a, ok := t.next.answer(waveNumber, kinds); ok {
		// t.next stays: the transaction's writes of the assignments it read keep it true.
		if a != nil {
			t.knowAssignments(a)
		}
		return a, nil
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
		picks = append(picks, nextPendingTaskSQL)
	}
	if len(picks) == 0 {
		return nil, nil
	}
	pick := picks[0]
	if len(picks) == 2 {
		pick = "COALESCE(" + picks[0] + ", " + picks[1] + ")"
	}
	a, err := scanAssignment(t.p.QueryRow(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = `+pick, t.ID(), waveNumber))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: next pending assignment of %q: %w", t.ID(), err)
	}
	t.knowAssignments(a)
	return a, nil
}

func (t *execTx) NextEager(currentWave int32, limit int) ([]*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	rows, err := t.p.Query(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.execution_id = $1 AND a.status = 'pending' AND a.ready_wave IS NOT NULL AND a.ready_wave <= $2 AND a.wave_number > $2 AND a.unmet_deps = 0
		ORDER BY a.position, a.wave_number, a.assignment_id LIMIT $3`, t.ID(), currentWave, limit)
	list, err := collect(rows, err, scanAssignment)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: eager assignments of %q: %w", t.ID(), err)
	}
	t.knowAssignments(list...)
	return list, nil
}

func (t *execTx) InsertAssignment(a *store.Assignment) error {
	if err := t.Check(); err != nil {
		return err
	}
	t.pre, t.next = nil, nil
	waves, err := readWaves(t.ctx, t.p, t.ID())
	if err != nil {
		return fmt.Errorf("scheduler store: insert assignment: %w", err)
	}
	r, err := store.NewAssignmentRow(t.ID(), a, waves)
	if err != nil {
		return err
	}
	// ON CONFLICT DO NOTHING: a duplicate is ErrAlreadyExists and leaves the transaction usable.
	tag, err := t.p.Exec(t.ctx, insertAssignmentSQL+` ON CONFLICT DO NOTHING`, assignmentArgs(r, t.At)...)
	if err != nil {
		return fmt.Errorf("scheduler store: insert assignment %q: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return store.DuplicateAssignment(r)
	}
	store.Inserted(a, r)
	t.knowAssignments(a)
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
	t.next = t.next.after(a)
	delete(t.held, a.GetId())
	what := fmt.Sprintf("put assignment %q", r.ID)
	missing := fmt.Errorf("assignment %q of execution %q: %w", r.ID, t.ID(), store.ErrNotFound)
	args := []any{r.ID, t.ID(), r.Status, r.InstanceID, r.Attempt, r.FencingToken, r.LeaseExpireTime, r.AssignTime,
		r.CompleteTime, r.LastReportSeq, r.Position, r.FinalIntegration, r.PreviousErrors, r.Merges, r.Detail, t.At, r.SessionID}
	if !t.knownAssignments[r.ID] || a.GetTaskId() == "" {
		return t.write(t.knownAssignments[r.ID], what, missing, putAssignmentSQL, args...)
	}
	// Deferred, tagged with its task: the task's status set next (SetTaskStatus) rides in this
	// statement.
	t.pre = nil
	taskList, task := t.Exec.GetTaskListId(), a.GetTaskId()
	t.p.laterTask(write{stmt: stmt{what, putAssignmentSQL, args}, check: func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return missing
		}
		return nil
	}, task: task, taskUpdate: func(status string) stmt {
		return stmt{what + " and its task's status", putAssignmentWithTaskSQL, append(slices.Clip(args), status, taskList, task)}
	}})
	return nil
}

// putAssignmentSQL updates an assignment (PutAssignment).
const putAssignmentSQL = `UPDATE wave_task_assignments SET status = $3, instance_id = $4,
		attempt = $5, fencing_token = $6, lease_expires_at = $7, assigned_at = $8, completed_at = $9,
		last_report_seq = $10, position = $11, final_integration = $12, previous_errors = $13::jsonb,
		merges = $14::jsonb, detail = $15::jsonb, updated_at = $16, session_id = $17
		WHERE assignment_id = $1 AND execution_id = $2`

// putAssignmentWithTaskSQL is putAssignmentSQL that also sets its task's status ($18, task
// list $19, task $20) in the same statement: a claim and a completion each write both, so one
// statement per task instead of two. It updates nothing (and the write reports the assignment
// missing) when either row is missing.
const putAssignmentWithTaskSQL = `WITH t AS (UPDATE tasks SET status = $18, updated_at = $16
		WHERE task_list_id = $19 AND task_key = $20 RETURNING 1)
	` + putAssignmentSQL + ` AND EXISTS (SELECT FROM t)`

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
	t.logs = append(t.logs, rows...)
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
		err := t.p.QueryRow(t.ctx, `SELECT true FROM wave_task_assignments WHERE assignment_id = $1 AND execution_id = $2`,
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
	tag, err := t.p.Exec(t.ctx, `INSERT INTO checkpoints (checkpoint_id, execution_id, task_key, assignment_id,
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
	if !t.knownTasks[taskID] {
		return t.write(false, fmt.Sprintf("set status of task %q", taskID),
			fmt.Errorf("task %q of task list %q: %w", taskID, t.Exec.GetTaskListId(), store.ErrNotFound),
			setTaskStatusSQL, t.Exec.GetTaskListId(), taskID, name, t.At)
	}
	// Its assignment's update still waiting (a claim or a completion writes both): one statement.
	t.pre = nil
	if t.p.foldTask(t.floor, taskID, name) {
		return nil
	}
	missing := fmt.Errorf("task %q of task list %q: %w", taskID, t.Exec.GetTaskListId(), store.ErrNotFound)
	t.p.laterTask(write{stmt: stmt{fmt.Sprintf("set status of task %q", taskID), setTaskStatusSQL,
		[]any{t.Exec.GetTaskListId(), taskID, name, t.At}}, check: func(tag pgconn.CommandTag) error {
		if tag.RowsAffected() == 0 {
			return missing
		}
		return nil
	}, task: taskID})
	return nil
}

// setTaskStatusSQL sets a task's status (SetTaskStatus).
const setTaskStatusSQL = `UPDATE tasks SET status = $3, updated_at = $4 WHERE task_list_id = $1 AND task_key = $2`

// satisfyDependenciesSQL lowers by $3[i] the unmet dependencies of execution $1's assignments
// of task $2[i] (SatisfyDependencies).
const satisfyDependenciesSQL = `UPDATE wave_task_assignments a SET unmet_deps = GREATEST(a.unmet_deps - m.n, 0)
	FROM unnest($2::text[], $3::int[]) AS d(task_key, n)
	CROSS JOIN LATERAL (SELECT x.assignment_id, d.n FROM wave_task_assignments x
		WHERE x.execution_id = $1 AND x.task_key = d.task_key AND x.unmet_deps > 0 OFFSET 0) AS m
	WHERE a.assignment_id = m.assignment_id AND a.unmet_deps > 0`

func (t *execTx) SatisfyDependencies(taskIDs []string) error {
	if err := t.Check(); err != nil {
		return err
	}
	tasks, counts := store.DependencyCounts(taskIDs)
	if len(tasks) == 0 {
		return nil
	}
	// It cannot miss (a task without such an assignment is ignored): deferred to the next
	// statement's round trip (pipe), like the updates of rows read.
	//
	// Each task's rows are looked up by (execution, task) in the unmet index, a probe per task:
	// the LATERAL subquery (OFFSET 0 keeps it from being flattened) takes the task from the list,
	// so the list is the outer side whatever the statistics say. A plain join left the order to
	// the planner, which on a table it had no statistics of yet (a new deployment's, or rows
	// written since the last ANALYZE) took execution_id as selective, scanned the unmet index by
	// execution only and joined every still-waiting task of the run with the list: 600–900 rows
	// and buffers, 3–20 ms per completion under the execution's lock, on P2b's random DAG.
	t.pre = nil
	t.p.later(stmt{fmt.Sprintf("satisfy dependencies in %q", t.ID()), satisfyDependenciesSQL, []any{t.ID(), tasks, counts}}, nil)
	return nil
}
