package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The Postgres deployment's floor of a no-op task (--floor --mode postgres, issue 17): the least
// transaction a completion fused with the next claim must make in this design, on the
// Scheduler's own schema (a fresh database migrated by the real Scheduler, the executions
// started by it, then the Scheduler stopped), with the store's shape: BEGIN and the execution
// row's lock (FOR NO KEY UPDATE) with the next pending assignments read in one round trip, then
// the writes and COMMIT in one round trip: per request the completed assignment's UPDATE with its
// task's status folded in (its fencing token checked in the WHERE), the claimed next
// assignment's UPDATE with its task's status, one log row per completion (one INSERT for the
// transaction), the execution row's last_seq and count. Not written, as the store does: the
// assignments' other columns and detail JSON, the LEASE_GRANTED / TASK_STARTED /
// CHECKPOINT_CREATED entries, the knowledge outbox, pg_notify, savepoints of a group.
//
// Group commit as the store's (scheduler's updateGrouped): requests of one execution queue; one
// transaction at a time; it takes the queue (at most 32) once it holds the row lock, so what
// arrived during the lock's round trip commits with it; each request is answered after the
// commit.

// floorReq is one completion (complete may be "" for a first claim) waiting for its answer.
type floorReq struct {
	complete string // assignment to complete ("" = claim only)
	token    int64  // its fencing token
	instance string
	done     chan floorAns
}

// floorAns is a request's answer: the claimed next assignment ("" when none is pending).
type floorAns struct {
	next, task string
	token      int64
	err        error
}

// floorTx runs the floor's transactions of one execution on one connection.
type floorTx struct {
	conn      *pgx.Conn
	execution string
	taskList  string
	group     bool
	tokens    atomic.Int64
	mu        sync.Mutex
	tasks     map[string]string // assignment → task key, of the claims made
	queue     chan *floorReq
	txs, reqs atomic.Int64 // transactions committed and requests in them
}

func (f *floorTx) ids() (string, string)  { return f.execution, f.taskList }
func (f *floorTx) counts() (int64, int64) { return f.txs.Load(), f.reqs.Load() }
func (f *floorTx) close()                 { _ = f.conn.Close(context.Background()) }

// maxGroup is the store's bound on a grouped transaction's requests.
const maxGroup = 32

// takeQueued appends to reqs the requests waiting in queue, up to maxGroup in all, without
// waiting for more.
func takeQueued(queue chan *floorReq, reqs []*floorReq) []*floorReq {
	for len(reqs) < maxGroup {
		select {
		case r := <-queue:
			reqs = append(reqs, r)
		default:
			return reqs
		}
	}
	return reqs
}

func newFloorTx(ctx context.Context, url, execution string, group bool) (*floorTx, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	f := &floorTx{conn: conn, execution: execution, group: group, tasks: map[string]string{}, queue: make(chan *floorReq, 1024)}
	if err := conn.QueryRow(ctx, `SELECT task_list_id FROM task_list_execution_runs WHERE execution_id = $1`, execution).Scan(&f.taskList); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("execution %s: %w", execution, err)
	}
	f.tokens.Store(1000)
	return f, nil
}

// run serves the queue until ctx ends (group commit); without group, callers use do directly.
func (f *floorTx) run(ctx context.Context) {
	serveQueue(ctx, f.queue, func(first *floorReq) { f.tx(ctx, first, true) })
}

// serveQueue calls fn with each request that reaches queue first, one at a time, until ctx ends
// (fn takes those queued behind it, takeQueued).
func serveQueue(ctx context.Context, queue chan *floorReq, fn func(first *floorReq)) {
	for {
		select {
		case <-ctx.Done():
			return
		case first := <-queue:
			fn(first)
		}
	}
}

// do answers one request: through the queue when grouped, else in its own transaction (the
// caller's connection must then be its own).
func (f *floorTx) do(ctx context.Context, r *floorReq) floorAns {
	if !f.group {
		f.tx(ctx, r, false)
		return <-r.done
	}
	f.queue <- r
	return <-r.done
}

const (
	floorCompleteSQL = `WITH t AS (UPDATE tasks SET status = 'completed', updated_at = $3
		WHERE task_list_id = $4 AND task_key = $5 RETURNING 1)
	UPDATE wave_task_assignments SET status = 'completed', completed_at = $3, updated_at = $3
		WHERE assignment_id = $1 AND execution_id = $2 AND fencing_token = $6 AND status = 'assigned' AND EXISTS (SELECT FROM t)`
	floorClaimSQL = `WITH t AS (UPDATE tasks SET status = 'in_progress', updated_at = $3
		WHERE task_list_id = $4 AND task_key = $5 RETURNING 1)
	UPDATE wave_task_assignments SET status = 'assigned', instance_id = $6, fencing_token = $7,
		lease_expires_at = $3::timestamptz + interval '30 seconds', assigned_at = $3, updated_at = $3
		WHERE assignment_id = $1 AND execution_id = $2 AND status = 'pending' AND EXISTS (SELECT FROM t)`
	floorLogSQL = `INSERT INTO task_execution_log (execution_id, seq, task_key, instance_id,
	wave_number, event_type, message, context, created_at, source_time)
	SELECT $1, u.seq, u.task_key, u.instance_id, 1, 'task_completed', u.message, NULL, $2, $2
	FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[]) AS u(seq, task_key, instance_id, message)`
	floorExecSQL = `UPDATE task_list_execution_runs SET last_seq = $2, completed_tasks = completed_tasks + $3,
		updated_at = $4 WHERE execution_id = $1`
)

// tx runs one transaction for first and, grouped, the requests queued once it holds the lock.
func (f *floorTx) tx(ctx context.Context, first *floorReq, group bool) {
	reqs := []*floorReq{first}
	fail := func(err error) {
		_, _ = f.conn.Exec(context.WithoutCancel(ctx), "rollback")
		for _, r := range reqs {
			r.done <- floorAns{err: err}
		}
	}
	var (
		lastSeq int64
		now     time.Time
		pending []floorAns
	)
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(`SELECT last_seq, now() FROM task_list_execution_runs WHERE execution_id = $1 FOR NO KEY UPDATE`, f.execution).
		QueryRow(func(row pgx.Row) error { return row.Scan(&lastSeq, &now) })
	b.Queue(`SELECT assignment_id, task_key FROM wave_task_assignments
		WHERE execution_id = $1 AND wave_number = 1 AND status = 'pending' AND kind = 'task'
		ORDER BY position, assignment_id LIMIT $2`, f.execution, maxGroup).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var a floorAns
			if err := rows.Scan(&a.next, &a.task); err != nil {
				return err
			}
			pending = append(pending, a)
		}
		return rows.Err()
	})
	if err := f.conn.SendBatch(ctx, b).Close(); err != nil {
		fail(err)
		return
	}
	if group {
		reqs = takeQueued(f.queue, reqs)
	}
	var (
		seqs             []int64
		keys, instances  []string
		messages         []string
		answers          = make([]floorAns, len(reqs))
		completed, claim int
	)
	b = &pgx.Batch{}
	rowCheck := func(what string) func(pgconn.CommandTag) error {
		return func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("%s: %d rows", what, tag.RowsAffected())
			}
			return nil
		}
	}
	f.mu.Lock()
	for i, r := range reqs {
		if r.complete != "" {
			task := f.tasks[r.complete]
			delete(f.tasks, r.complete)
			completed++
			lastSeq++
			seqs, keys, instances = append(seqs, lastSeq), append(keys, task), append(instances, r.instance)
			messages = append(messages, "Task "+task+": true completed by "+r.instance)
			b.Queue(floorCompleteSQL, r.complete, f.execution, now, f.taskList, task, r.token).Exec(rowCheck("complete " + r.complete))
		}
		if claim < len(pending) {
			a := pending[claim]
			claim++
			a.token = f.tokens.Add(1)
			f.tasks[a.next] = a.task
			answers[i] = a
			b.Queue(floorClaimSQL, a.next, f.execution, now, f.taskList, a.task, r.instance, a.token).Exec(rowCheck("claim " + a.next))
		}
	}
	f.mu.Unlock()
	if completed > 0 {
		b.Queue(floorLogSQL, f.execution, now, seqs, keys, instances, messages)
		b.Queue(floorExecSQL, f.execution, lastSeq, completed, now)
	}
	b.Queue("commit")
	if err := f.conn.SendBatch(ctx, b).Close(); err != nil {
		fail(err)
		return
	}
	f.txs.Add(1)
	f.reqs.Add(int64(len(reqs)))
	for i, r := range reqs {
		r.done <- answers[i]
	}
}

// floorLoop runs one caller's tasks through f until nothing is left to claim: a claim, then
// per task work (the command, or nothing) and a completion fused with the next claim. It
// answers the tasks it completed.
func floorLoop(ctx context.Context, f *floorTx, instance string, work func() error) (int, error) {
	ans := f.do(ctx, &floorReq{instance: instance, done: make(chan floorAns, 1)})
	n := 0
	for ans.err == nil && ans.next != "" {
		if work != nil {
			if err := work(); err != nil {
				return n, err
			}
		}
		ans = f.do(ctx, &floorReq{complete: ans.next, token: ans.token, instance: instance, done: make(chan floorAns, 1)})
		n++
	}
	return n, ans.err
}

// floorConns opens the connections of floorPure: one grouped, else one per caller.
func floorConns(ctx context.Context, url, execution string, callers int, group bool) ([]*floorTx, error) {
	conns := callers
	if group {
		conns = 1
	}
	var fs []*floorTx
	for range conns {
		f, err := newFloorTx(ctx, url, execution, group)
		if err != nil {
			closeFloorConns(fs)
			return nil, err
		}
		fs = append(fs, f)
	}
	return fs, nil
}

func closeFloorConns(fs []*floorTx) {
	for _, f := range fs {
		_ = f.conn.Close(context.Background())
	}
}

// floorPure runs an execution's tasks with callers goroutines of this process on fs (from
// floorConns), each completing and claiming with no command and no gRPC: grouped through one
// connection's queue, or each on its own connection in its own transactions. It answers the
// transactions committed.
func floorPure(ctx context.Context, fs []*floorTx, callers int) (txs int64, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if fs[0].group {
		go fs[0].run(ctx)
	}
	// The tasks claimed on one connection are completed on it (its map); without group each
	// caller has its own.
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = floorLoop(ctx, fs[i%len(fs)], fmt.Sprintf("agent-%02d", i+1), nil)
		}()
	}
	wg.Wait()
	for _, f := range fs {
		txs += f.txs.Load()
	}
	return txs, errors.Join(errs...)
}
