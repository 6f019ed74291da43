package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// UpdateExecution runs fn in a transaction that holds SQLite's write lock from its start
// (BEGIN IMMEDIATE, see database.OpenSQLite): writers wait for each other, so fn is never run
// twice.
func (s *Store) UpdateExecution(ctx context.Context, id string, fn func(tx store.ExecTx) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	committed := false
	defer func() {
		if !committed {
			s.rows.drop()
		}
	}()
	tx, err := s.beginCached(ctx)
	if err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	defer func() { _ = tx.Close() }()
	defer func() {
		if !committed {
			rollbackConn(tx)
		}
	}()
	// The transaction's statements run without ctx's cancellation: the driver would start a
	// goroutine per statement to interrupt it (twenty a task), for statements that each read or
	// write a few rows by key. ctx still ends the transaction: once ctx is done it is not
	// committed but rolled back.
	parent := ctx
	ctx = context.WithoutCancel(ctx)
	row, cached := s.cachedExecution(id)
	var e *schedulerv1.Execution
	if cached {
		e, err = store.DecodeExecution(row)
	} else {
		row, e, err = scanExecutionRow(tx.QueryRowContext(ctx, `SELECT `+executionColumns+` FROM task_list_execution_runs r
		WHERE r.execution_id = ?`, id))
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("execution %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	etx := &execTx{ctx: ctx, tx: tx, TxState: store.TxState{Exec: e, At: now()}, storedSeq: e.GetLastSeq(),
		storedExec: executionValuesOf(row), cache: &s.rows, rows: txRows{execution: row}}
	err = fn(etx)
	etx.Done = true
	if err != nil {
		return err
	}
	if err := etx.flushTaskStatuses(); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	if err := etx.flushLog(); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: append to the log: %w", id, err)
	}
	if err := parent.Err(); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: %w", id, err)
	}
	if err := s.commitCached(etx); err != nil {
		return fmt.Errorf("scheduler store: update execution %q: commit: %w", id, err)
	}
	committed = true
	return nil
}

// execTx is the ExecTx of one UpdateExecution.
type execTx struct {
	ctx context.Context
	tx  *sql.Conn // in the transaction UpdateExecution began on it
	store.TxState
	// logRows are the entries Append numbered, stored by flushLog before the commit in one
	// statement; storedSeq is the execution row's last_seq as written in this transaction.
	logRows   []store.LogRow
	storedSeq int64
	// stored are the assignment rows read or written in this transaction, as they are in it;
	// storedExec is the execution's row (but for last_seq, see storedSeq).
	stored     map[string]assignmentValues
	storedExec executionValues
	// storedWaves are the wave rows read or written in this transaction, by wave id, as they are
	// in it (see PutWave).
	storedWaves map[string]waveValues
	// knownTasks are the tasks of the task assignments read in this transaction: they exist (a
	// stored list never changes), so SetTaskStatus cannot miss them and defers their statuses to
	// taskStatuses, written by flushTaskStatuses in one statement.
	knownTasks   map[string]bool
	taskStatuses []taskStatus
	savepoints   int // Savepoint's calls, for its names
	// rows are the rows this transaction read or wrote, for the cache of rows kept across
	// transactions (rowcache.go) once it commits.
	rows  txRows
	cache *rowCache
}

// taskStatus is a status SetTaskStatus deferred.
type taskStatus struct{ task, status string }

// Savepoint runs fn between SAVEPOINT and RELEASE; when fn fails, ROLLBACK TO SAVEPOINT undoes
// its rows and the transaction's own record of them (deferred log rows and task statuses, the
// rows as stored) goes back to what it was before fn.
func (t *execTx) Savepoint(fn func() error) error {
	if err := t.Check(); err != nil {
		return err
	}
	t.savepoints++
	name := fmt.Sprintf("converge_group_%d", t.savepoints)
	if _, err := t.tx.ExecContext(t.ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("scheduler store: savepoint: %w", err)
	}
	saved := *t
	saved.Exec = proto.CloneOf(t.Exec)
	saved.stored, saved.storedWaves, saved.knownTasks = maps.Clone(t.stored), maps.Clone(t.storedWaves), maps.Clone(t.knownTasks)
	saved.taskStatuses, saved.logRows = slices.Clone(t.taskStatuses), slices.Clone(t.logRows)
	saved.rows = t.rows.clone()
	err := fn()
	if err == nil {
		if _, err := t.tx.ExecContext(t.ctx, "RELEASE "+name); err != nil {
			return fmt.Errorf("scheduler store: release savepoint: %w", err)
		}
		return nil
	}
	saved.savepoints = t.savepoints
	*t = saved
	for _, undo := range []string{"ROLLBACK TO ", "RELEASE "} {
		if _, rerr := t.tx.ExecContext(t.ctx, undo+name); rerr != nil {
			return errors.Join(err, fmt.Errorf("scheduler store: rollback to savepoint: %w", rerr))
		}
	}
	return err
}

// flushLog stores the entries Append numbered and the execution's last_seq, if PutExecution
// did not already write it: a transaction that logs k entries runs one or two statements for
// them instead of 2k.
func (t *execTx) flushLog() error {
	if len(t.logRows) > 0 {
		if err := insertLogRows(t.ctx, t.tx, t.logRows); err != nil {
			return err
		}
		t.logRows = nil
	}
	if last := t.Exec.GetLastSeq(); last != t.storedSeq {
		if _, err := t.tx.ExecContext(t.ctx, `UPDATE task_list_execution_runs SET last_seq = ? WHERE execution_id = ?`, last, t.ID()); err != nil {
			return err
		}
		t.storedSeq = last
		t.rows.execution.LastSeq = last
	}
	return nil
}

func (t *execTx) PutExecution(e *schedulerv1.Execution) error {
	r, err := t.ExecutionRow(e)
	if err != nil {
		return err
	}
	values := executionValuesOf(r)
	stored := t.storedExec
	stored[len(stored)-1] = t.storedSeq // last_seq as flushLog may have written it
	query, args := changedUpdate("task_list_execution_runs", executionSet[:], stored[:], values[:],
		"updated_at = ? WHERE execution_id = ?", ts(t.At), r.ID)
	if _, err := t.tx.ExecContext(t.ctx, query, args...); err != nil {
		return fmt.Errorf("scheduler store: put execution %q: %w", t.ID(), err)
	}
	t.storedSeq, t.storedExec = r.LastSeq, values
	detail := t.rows.execution.Detail
	t.wroteExecution(r, t.At)
	if r.Detail == detail {
		// t.Exec holds the detail of the row as it was (decoded from it, or kept here the same
		// way), which is r's: only its columns change, and the detail is not decoded again.
		return store.SetExecutionColumns(t.Exec, r)
	}
	if t.Exec, err = store.DecodeExecution(r); err != nil {
		return err
	}
	return nil
}

func (t *execTx) Waves() ([]*schedulerv1.Wave, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(t.ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = ? ORDER BY w.wave_number`, t.ID())
	waves, err := collect(rows, err, t.scanWave)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: waves of %q: %w", t.ID(), err)
	}
	return waves, nil
}

func (t *execTx) Wave(n int32) (*schedulerv1.Wave, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if r, ok := t.cachedWave(n); ok {
		t.rememberWave(r.ID, waveValuesOf(r))
		return store.DecodeWave(r)
	}
	w, err := t.scanWave(t.tx.QueryRowContext(t.ctx, `SELECT `+waveCountColumns+` FROM parallel_execution_waves w
		WHERE w.execution_id = ? AND w.wave_number = ?`, t.ID(), n))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("wave %d of execution %q: %w", n, t.ID(), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler store: wave %d of %q: %w", n, t.ID(), err)
	}
	return w, nil
}

// PutWave writes the columns of w that differ from the row as this transaction has it (all of
// them for a wave it has not read), and nothing when none does: a claim and a completion change a
// counter or two of their wave, and SQLite checks the CHECKs and maintains the status index of
// every column an UPDATE names.
func (t *execTx) PutWave(w *schedulerv1.Wave) error {
	if err := t.Check(); err != nil {
		return err
	}
	r, err := store.EncodeWave(w)
	if err != nil {
		return err
	}
	values := waveValuesOf(r)
	stored, ok := t.storedWaves[r.ID]
	if ok && stored == values {
		return nil // read in this transaction, so the row is there; nothing to write
	}
	var old []any
	if ok {
		old = stored[:]
	}
	query, args := changedUpdate("parallel_execution_waves", waveSet[:], old, values[:],
		"WHERE wave_id = ? AND execution_id = ?", r.ID, t.ID())
	res, err := t.tx.ExecContext(t.ctx, query, args...)
	if err != nil {
		return fmt.Errorf("scheduler store: put wave %q: %w", w.GetId(), err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("wave %q of execution %q: %w", w.GetId(), t.ID(), store.ErrNotFound), err)
	}
	t.rememberWave(r.ID, values)
	t.wroteWave(r)
	return nil
}

// rememberWave keeps the values of a wave row as the transaction has it (see PutWave).
func (t *execTx) rememberWave(id string, values waveValues) {
	if t.storedWaves == nil {
		t.storedWaves = map[string]waveValues{}
	}
	t.storedWaves[id] = values
}

// scanWave reads a wave row and remembers it.
func (t *execTx) scanWave(row scanner) (*schedulerv1.Wave, error) {
	r, w, err := scanWaveRow(row)
	if err != nil {
		return nil, err
	}
	t.rememberWave(r.ID, waveValuesOf(r))
	t.keepWave(r)
	return w, nil
}

func (t *execTx) Assignment(id string) (*store.Assignment, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if r, ok := t.cachedAssignment(id); ok {
		t.rememberRow(r)
		return store.DecodeAssignment(r)
	}
	a, err := t.scanAssignment(t.tx.QueryRowContext(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = ? AND a.execution_id = ?`, id, t.ID()))
	if errors.Is(err, sql.ErrNoRows) {
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
	var args []any
	if len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION) {
		picks = append(picks, `(SELECT i.assignment_id FROM wave_task_assignments i WHERE i.wave_id =
			(SELECT w.wave_id FROM parallel_execution_waves w WHERE w.execution_id = ? AND w.wave_number = ?)
			AND i.kind = 'integration' AND i.status = 'pending')`)
		args = append(args, t.ID(), waveNumber)
	}
	if len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK) {
		picks = append(picks, `(SELECT p.assignment_id FROM wave_task_assignments p INDEXED BY wave_task_assignments_claimable_idx
			WHERE p.execution_id = ? AND p.wave_number = ? AND p.status = 'pending' AND p.kind = 'task'
			ORDER BY p.position, p.assignment_id LIMIT 1)`)
		args = append(args, t.ID(), waveNumber)
	}
	if len(picks) == 0 {
		return nil, nil
	}
	pick := picks[0]
	if len(picks) == 2 {
		pick = "COALESCE(" + picks[0] + ", " + picks[1] + ")"
	}
	a, err := t.scanAssignment(t.tx.QueryRowContext(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a
		WHERE a.assignment_id = `+pick, args...))
	if errors.Is(err, sql.ErrNoRows) {
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
	rows, err := t.tx.QueryContext(t.ctx, `SELECT `+assignmentColumns+` FROM wave_task_assignments a INDEXED BY wave_task_assignments_eager_idx
		WHERE a.execution_id = ? AND a.status = 'pending' AND a.ready_wave IS NOT NULL AND a.ready_wave <= ? AND a.wave_number > ? AND a.unmet_deps = 0
		ORDER BY a.position, a.wave_number, a.assignment_id LIMIT ?`, t.ID(), currentWave, currentWave, limit)
	list, err := collect(rows, err, t.scanAssignment)
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
	res, err := t.tx.ExecContext(t.ctx, insertAssignmentSQL+` ON CONFLICT DO NOTHING`, assignmentArgs(r, t.At)...)
	if err != nil {
		return fmt.Errorf("scheduler store: insert assignment %q: %w", r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("scheduler store: insert assignment %q: %w", r.ID, err)
	} else if n == 0 {
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
	values := assignmentValuesOf(r)
	var stored *assignmentValues
	if v, ok := t.stored[r.ID]; ok {
		stored = &v
	}
	query, args := assignmentUpdate(stored, values, ts(t.At), r.ID, t.ID())
	res, err := t.tx.ExecContext(t.ctx, query, args...)
	if err != nil {
		return fmt.Errorf("scheduler store: put assignment %q: %w", r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("assignment %q of execution %q: %w", r.ID, t.ID(), store.ErrNotFound), err)
	}
	t.remember(r.ID, values)
	t.wroteAssignment(r)
	return nil
}

// flushTaskStatuses writes the statuses SetTaskStatus deferred: a completion and the claim fused
// with it set two tasks' statuses in one statement instead of two.
func (t *execTx) flushTaskStatuses() error {
	if len(t.taskStatuses) == 0 {
		return nil
	}
	list := t.taskStatuses
	t.taskStatuses = nil
	query := `UPDATE tasks SET status = ?, updated_at = ? WHERE task_list_id = ? AND task_key = ?`
	args := []any{list[0].status, ts(t.At), t.Exec.GetTaskListId(), list[0].task}
	if len(list) > 1 {
		var b strings.Builder
		args = make([]any, 0, 3*len(list)+2)
		b.WriteString(`UPDATE tasks SET status = CASE task_key`)
		for _, st := range list {
			b.WriteString(` WHEN ? THEN ?`)
			args = append(args, st.task, st.status)
		}
		b.WriteString(` END, updated_at = ? WHERE task_list_id = ? AND task_key IN (?`)
		b.WriteString(strings.Repeat(`, ?`, len(list)-1))
		b.WriteString(`)`)
		args = append(args, ts(t.At), t.Exec.GetTaskListId())
		for _, st := range list {
			args = append(args, st.task)
		}
		query = b.String()
	}
	res, err := t.tx.ExecContext(t.ctx, query, args...)
	if err != nil {
		return fmt.Errorf("set the status of %d tasks: %w", len(list), err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(list)) {
		return errors.Join(fmt.Errorf("tasks of task list %q: %d of %d: %w", t.Exec.GetTaskListId(), n, len(list), store.ErrNotFound), err)
	}
	return nil
}

// remember keeps the values of an assignment row as the transaction has it (see PutAssignment).
func (t *execTx) remember(id string, values assignmentValues) {
	if t.stored == nil {
		t.stored = map[string]assignmentValues{}
	}
	t.stored[id] = values
}

// scanAssignment reads an assignment row and remembers it.
func (t *execTx) scanAssignment(row scanner) (*store.Assignment, error) {
	r, a, err := scanAssignmentRow(row)
	if err != nil {
		return nil, err
	}
	t.rememberRow(r)
	t.keepAssignment(r)
	return a, nil
}

// rememberRow remembers an assignment row the transaction read (see remember and knownTasks).
func (t *execTx) rememberRow(r store.AssignmentRow) {
	t.remember(r.ID, assignmentValuesOf(r))
	if r.Kind == "task" && r.TaskKey != nil {
		if t.knownTasks == nil {
			t.knownTasks = map[string]bool{}
		}
		t.knownTasks[*r.TaskKey] = true
	}
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
	// Stored at the end of the transaction (flushLog): nothing in it reads the log.
	t.logRows = append(t.logRows, rows...)
	t.Exec.LastSeq = rows[len(rows)-1].Seq
	store.SetEntries(entries, rows)
	return nil
}

func (t *execTx) PutCheckpoint(c *commonv1.Checkpoint, assignmentID string, attempt int32) error {
	if err := t.Check(); err != nil {
		return err
	}
	if assignmentID != "" {
		var found bool
		err := t.tx.QueryRowContext(t.ctx, `SELECT true FROM wave_task_assignments WHERE assignment_id = ? AND execution_id = ?`,
			assignmentID, t.ID()).Scan(&found)
		if errors.Is(err, sql.ErrNoRows) {
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
	res, err := t.tx.ExecContext(t.ctx, `INSERT INTO checkpoints (checkpoint_id, execution_id, task_key, assignment_id,
		attempt, instance_id, git_ref, files, metadata, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		r.ID, t.ID(), r.TaskKey, r.AssignmentID, r.Attempt, r.InstanceID, r.GitRef, r.Files, r.Metadata, ts(t.At))
	if err != nil {
		return fmt.Errorf("scheduler store: put checkpoint %q: %w", r.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("scheduler store: put checkpoint %q: %w", r.ID, err)
	} else if n == 0 {
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
	if t.knownTasks[taskID] {
		for i := range t.taskStatuses {
			if t.taskStatuses[i].task == taskID {
				t.taskStatuses[i].status = name
				return nil
			}
		}
		t.taskStatuses = append(t.taskStatuses, taskStatus{taskID, name})
		return nil
	}
	res, err := t.tx.ExecContext(t.ctx, `UPDATE tasks SET status = ?, updated_at = ? WHERE task_list_id = ? AND task_key = ?`,
		name, ts(t.At), t.Exec.GetTaskListId(), taskID)
	if err != nil {
		return fmt.Errorf("scheduler store: set status of task %q: %w", taskID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("task %q of task list %q: %w", taskID, t.Exec.GetTaskListId(), store.ErrNotFound), err)
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
	t.forgetUnmet(tasks) // unmet_deps of rows of these tasks change below
	// One statement per distinct count (a completion names each dependent once: one statement),
	// the tasks as a JSON array: one statement text, prepared once per connection, instead of a
	// statement per dependent.
	for len(tasks) > 0 {
		n := counts[0]
		var these, rest []string
		var restCounts []int32
		for i, task := range tasks {
			if counts[i] == n {
				these = append(these, task)
			} else {
				rest, restCounts = append(rest, task), append(restCounts, counts[i])
			}
		}
		list, err := json.Marshal(these)
		if err != nil {
			return fmt.Errorf("scheduler store: satisfy dependencies in %q: %w", t.ID(), err)
		}
		if _, err := t.tx.ExecContext(t.ctx, `UPDATE wave_task_assignments SET unmet_deps = max(unmet_deps - ?, 0)
			WHERE execution_id = ? AND task_key IN (SELECT value FROM json_each(?)) AND unmet_deps > 0`, n, t.ID(), string(list)); err != nil {
			return fmt.Errorf("scheduler store: satisfy dependencies in %q: %w", t.ID(), err)
		}
		tasks, counts = rest, restCounts
	}
	return nil
}
