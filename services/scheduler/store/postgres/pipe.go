package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pipe is the connection of one UpdateExecution transaction with its deferred writes: the
// updates of rows the transaction has read (they exist and belong to the locked execution, so
// they cannot miss) wait and go out in the same round trip as the next statement, a read
// included (the read sees them: they are sent before it on the same connection). A transaction
// of k reads and w such writes makes k + 1 round trips instead of k + w + 1.
type pipe struct {
	conn    batcher
	pending []write
	sends   int // round trips sent: a mark is still unsent while sends has not moved
}

// mark is a position in the pending writes.
type mark struct{ sends, n int }

// mark returns the current position of the pending writes.
func (p *pipe) mark() mark { return mark{p.sends, len(p.pending)} }

// dropSince drops the writes queued after m when none of them was sent yet, and reports
// whether it could.
func (p *pipe) dropSince(m mark) bool {
	if p.sends != m.sends || len(p.pending) < m.n {
		return false
	}
	p.pending = p.pending[:m.n]
	return true
}

// write is a deferred statement; check, when set, judges its command tag.
type write struct {
	stmt
	check func(pgconn.CommandTag) error
	// task is the task key a deferred write of a task's rows names (execTx.SetTaskStatus folds
	// its task's status into the latest one when it is an assignment's update).
	task string
	// taskUpdate is how an assignment's update also sets its task's status (foldTask), when it
	// is one; folded once it does.
	taskUpdate func(status string) stmt
	folded     bool
}

// batcher is what a pipe needs of its connection.
type batcher interface {
	querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// later queues s until the next statement or the commit.
func (p *pipe) later(s stmt, check func(pgconn.CommandTag) error) {
	p.pending = append(p.pending, write{stmt: s, check: check})
}

// laterTask queues w (a write of task's rows) until the next statement or the commit.
func (p *pipe) laterTask(w write) { p.pending = append(p.pending, w) }

// foldTask makes the latest pending write of task, queued since m, also set the task's status,
// when it is an assignment's update that does not already; it reports whether it did. Only the
// latest write of the task may take it: the status then lands after every earlier write of the
// task and before none that set it too. Writes queued before m (another savepoint's) are left
// as they are, so dropSince(m) still drops exactly what was queued after m.
func (p *pipe) foldTask(m mark, task, status string) bool {
	lo := 0
	if p.sends == m.sends {
		lo = m.n
	}
	for i := len(p.pending) - 1; i >= lo; i-- {
		w := &p.pending[i]
		if w.task != task {
			continue
		}
		if w.taskUpdate == nil || w.folded {
			return false
		}
		w.stmt, w.folded = w.taskUpdate(status), true
		return true
	}
	return false
}

// batch sends the pending writes and then s (when s.sql is not empty) in one round trip, and
// returns the results positioned at s.
func (p *pipe) batch(ctx context.Context, s stmt) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	for _, w := range p.pending {
		b.Queue(w.sql, w.args...)
	}
	if s.sql != "" {
		b.Queue(s.sql, s.args...)
	}
	pending := p.pending
	p.pending = nil
	p.sends++
	br := p.conn.SendBatch(ctx, b)
	for _, w := range pending {
		tag, err := br.Exec()
		if err == nil && w.check != nil {
			err = w.check(tag)
		}
		if err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("%s: %w", w.what, err)
		}
	}
	return br, nil
}

// send sends the pending writes and then b's queries in one round trip, running every query's
// callback (a pending write's check included) as Close does.
func (p *pipe) send(ctx context.Context, b *pgx.Batch) error {
	all := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(p.pending)+len(b.QueuedQueries))}
	for _, w := range p.pending {
		q := all.Queue(w.sql, w.args...)
		if w.check != nil {
			q.Exec(func(tag pgconn.CommandTag) error {
				if err := w.check(tag); err != nil {
					return fmt.Errorf("%s: %w", w.what, err)
				}
				return nil
			})
		}
	}
	all.QueuedQueries = append(all.QueuedQueries, b.QueuedQueries...)
	p.pending = nil
	p.sends++
	return p.conn.SendBatch(ctx, all).Close()
}

func (p *pipe) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(p.pending) == 0 {
		p.sends++
		return p.conn.Exec(ctx, sql, args...)
	}
	br, err := p.batch(ctx, stmt{sql: sql, args: args})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (p *pipe) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if len(p.pending) == 0 {
		p.sends++
		return p.conn.Query(ctx, sql, args...)
	}
	br, err := p.batch(ctx, stmt{sql: sql, args: args})
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (p *pipe) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if len(p.pending) == 0 {
		p.sends++
		return p.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := p.Query(ctx, sql, args...)
	return &firstRow{rows: rows, err: err}
}

// flush sends the pending writes and then stmts in one round trip.
func (p *pipe) flush(ctx context.Context, stmts []stmt) error {
	for _, s := range stmts {
		p.pending = append(p.pending, write{stmt: s})
	}
	if len(p.pending) == 0 {
		return nil
	}
	br, err := p.batch(ctx, stmt{})
	if err != nil {
		return err
	}
	return br.Close()
}

// batchRows are the rows of a batch's last statement; the batch ends with them.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) end() {
	if !r.closed {
		r.closed = true
		r.Rows.Close()
		r.err = r.br.Close()
	}
}

func (r *batchRows) Next() bool {
	if r.closed {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.end()
	return false
}

func (r *batchRows) Close() { r.end() }

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow over Query: the first row, or pgx.ErrNoRows.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r *firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
