package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/converge-dev/converge/platform/database"
)

// The embedded deployment's floor of a no-op task with agent processes (--floor --mode sqlite,
// issue 17, P1 and P2b embedded with agent processes): the floor Scheduler process of
// floorproc.go on a private in-memory SQLite database, as `converge dev --in-memory` keeps its
// store, with the least a completion fused with the next claim writes, in the shape of the
// Postgres floor's transaction (floorpg.go): one transaction at a time (SQLite has one writer),
// taking the requests queued once it starts (at most maxGroup); per request the completed
// assignment's UPDATE (its fencing token checked in the WHERE) and its task's status, the
// claimed next assignment's UPDATE and its task's status; one log row per completion (one
// INSERT for the transaction), the execution row's last_seq and count. Not written, as the real
// store does: the assignments' other columns and detail, the LEASE_GRANTED / TASK_STARTED /
// CHECKPOINT_CREATED entries, the wave's counters, the knowledge outbox.

// floorSQLite runs the floor's transactions of one fan-out on an in-memory SQLite database.
type floorSQLite struct {
	db        *sql.DB
	tokens    atomic.Int64
	queue     chan *floorReq
	txs, reqs atomic.Int64
	lastSeq   int64 // the execution's, written by the one transaction at a time
}

const (
	floorSQLiteExecution = "exe-floor"
	floorSQLiteTaskList  = "tl-floor"
)

// newFloorSQLite makes the database with tasks pending assignments of one wave.
func newFloorSQLite(ctx context.Context, tasks int) (_ *floorSQLite, err error) {
	db, err := database.OpenSQLite(database.SQLiteMemory)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	stmts := []string{
		`CREATE TABLE tasks (task_list_id TEXT NOT NULL, task_key TEXT NOT NULL, status TEXT NOT NULL
			CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'skipped')), updated_at TEXT NOT NULL,
			PRIMARY KEY (task_list_id, task_key)) WITHOUT ROWID`,
		`CREATE TABLE assignments (assignment_id TEXT PRIMARY KEY, execution_id TEXT NOT NULL, wave_number INTEGER NOT NULL,
			task_key TEXT NOT NULL, position INTEGER NOT NULL, status TEXT NOT NULL
			CHECK (status IN ('pending', 'assigned', 'running', 'completed', 'failed', 'skipped', 'cancelled')),
			instance_id TEXT, fencing_token INTEGER NOT NULL DEFAULT 0, lease_expires_at TEXT, assigned_at TEXT,
			completed_at TEXT, updated_at TEXT NOT NULL)`,
		`CREATE INDEX assignments_pending ON assignments (execution_id, wave_number, position, assignment_id) WHERE status = 'pending'`,
		`CREATE TABLE log (execution_id TEXT NOT NULL, seq INTEGER NOT NULL, task_key TEXT, instance_id TEXT,
			wave_number INTEGER, event_type TEXT NOT NULL, message TEXT NOT NULL, created_at TEXT NOT NULL,
			PRIMARY KEY (execution_id, seq)) WITHOUT ROWID`,
		`CREATE TABLE executions (execution_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, completed_tasks INTEGER NOT NULL,
			updated_at TEXT NOT NULL)`,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return nil, fmt.Errorf("floor store: %w", err)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }() // after Commit: a no-op
	for i := range tasks {
		key := taskID(i)
		if _, err := tx.ExecContext(ctx, `INSERT INTO tasks VALUES (?, ?, 'pending', ?)`, floorSQLiteTaskList, key, now); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO assignments (assignment_id, execution_id, wave_number, task_key, position, status, updated_at)
			VALUES (?, ?, 1, ?, ?, 'pending', ?)`, fmt.Sprintf("asg-%06d", i), floorSQLiteExecution, key, i, now); err != nil {
			return nil, err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO executions VALUES (?, 0, 0, ?)`, floorSQLiteExecution, now); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	f := &floorSQLite{db: db, queue: make(chan *floorReq, 1024)}
	f.tokens.Store(1000)
	return f, nil
}

func (f *floorSQLite) ids() (string, string)  { return floorSQLiteExecution, floorSQLiteTaskList }
func (f *floorSQLite) counts() (int64, int64) { return f.txs.Load(), f.reqs.Load() }
func (f *floorSQLite) close()                 { _ = f.db.Close() }

func (f *floorSQLite) do(_ context.Context, r *floorReq) floorAns {
	f.queue <- r
	return <-r.done
}

// run serves the queue until ctx ends: one transaction at a time, each taking what queued.
func (f *floorSQLite) run(ctx context.Context) {
	serveQueue(ctx, f.queue, func(first *floorReq) {
		reqs := takeQueued(f.queue, []*floorReq{first})
		answers, err := f.tx(ctx, reqs)
		for i, r := range reqs {
			if err != nil {
				r.done <- floorAns{err: err}
				continue
			}
			r.done <- answers[i]
		}
	})
}

// tx runs one transaction for reqs and answers each one's claimed next assignment.
func (f *floorSQLite) tx(ctx context.Context, reqs []*floorReq) (answers []floorAns, err error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	rows, err := tx.QueryContext(ctx, `SELECT assignment_id, task_key FROM assignments
		WHERE execution_id = ? AND wave_number = 1 AND status = 'pending' ORDER BY position, assignment_id LIMIT ?`,
		floorSQLiteExecution, len(reqs))
	if err != nil {
		return nil, err
	}
	var pending []floorAns
	for rows.Next() {
		var a floorAns
		if err := rows.Scan(&a.next, &a.task); err != nil {
			_ = rows.Close()
			return nil, err
		}
		pending = append(pending, a)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	at, lease := now.Format(time.RFC3339Nano), now.Add(30*time.Second).Format(time.RFC3339Nano)
	one := func(what string, res sql.Result, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%s: %d rows", what, n)
		}
		return nil
	}
	answers = make([]floorAns, len(reqs))
	var (
		logSQL   strings.Builder
		logArgs  []any
		seq      = f.lastSeq
		complete int
		claim    int
	)
	for i, r := range reqs {
		if r.complete != "" {
			var task string
			if err := tx.QueryRowContext(ctx, `UPDATE assignments SET status = 'completed', completed_at = ?, updated_at = ?
				WHERE assignment_id = ? AND fencing_token = ? AND status = 'assigned' RETURNING task_key`,
				at, at, r.complete, r.token).Scan(&task); err != nil {
				return nil, fmt.Errorf("complete %s: %w", r.complete, err)
			}
			res, err := tx.ExecContext(ctx, `UPDATE tasks SET status = 'completed', updated_at = ? WHERE task_list_id = ? AND task_key = ?`,
				at, floorSQLiteTaskList, task)
			if err := one("task "+task, res, err); err != nil {
				return nil, err
			}
			seq++
			complete++
			if logArgs == nil {
				logSQL.WriteString(`INSERT INTO log (execution_id, seq, task_key, instance_id, wave_number, event_type, message, created_at) VALUES `)
			} else {
				logSQL.WriteString(", ")
			}
			logSQL.WriteString("(?, ?, ?, ?, 1, 'task_completed', ?, ?)")
			logArgs = append(logArgs, floorSQLiteExecution, seq, task, r.instance, "Task "+task+": true completed by "+r.instance, at)
		}
		if claim < len(pending) {
			a := pending[claim]
			claim++
			a.token = f.tokens.Add(1)
			res, err := tx.ExecContext(ctx, `UPDATE assignments SET status = 'assigned', instance_id = ?, fencing_token = ?,
				lease_expires_at = ?, assigned_at = ?, updated_at = ? WHERE assignment_id = ? AND status = 'pending'`,
				r.instance, a.token, lease, at, at, a.next)
			if err := one("claim "+a.next, res, err); err != nil {
				return nil, err
			}
			res, err = tx.ExecContext(ctx, `UPDATE tasks SET status = 'in_progress', updated_at = ? WHERE task_list_id = ? AND task_key = ?`,
				at, floorSQLiteTaskList, a.task)
			if err := one("task "+a.task, res, err); err != nil {
				return nil, err
			}
			answers[i] = a
		}
	}
	if complete > 0 {
		if _, err := tx.ExecContext(ctx, logSQL.String(), logArgs...); err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
		res, err := tx.ExecContext(ctx, `UPDATE executions SET last_seq = ?, completed_tasks = completed_tasks + ?, updated_at = ?
			WHERE execution_id = ?`, seq, complete, at, floorSQLiteExecution)
		if err := one("execution", res, err); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	f.lastSeq = seq
	f.txs.Add(1)
	f.reqs.Add(int64(len(reqs)))
	return answers, nil
}
