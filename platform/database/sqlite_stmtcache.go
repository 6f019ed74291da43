package database

import (
	"context"
	"database/sql/driver"
	"reflect"
)

// sqliteStmtCacheSize bounds the prepared statements one SQLite connection keeps. A service
// runs a few dozen distinct statements; queries built with a variable number of placeholders
// add more, and the oldest idle statement makes room for a new one.
const sqliteStmtCacheSize = 256

// stmtCacheConnector wraps the SQLite driver's connector so that every connection keeps the
// statements it ran prepared (see stmtCacheConn).
type stmtCacheConnector struct {
	base driver.Connector
}

func (c stmtCacheConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.base.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newStmtCacheConn(conn), nil
}

func (c stmtCacheConnector) Driver() driver.Driver { return c.base.Driver() }

// sqliteConn is what the modernc.org/sqlite connection provides and stmtCacheConn forwards.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// stmtCacheConn is one SQLite connection that keeps the statements it ran prepared, keyed by
// their text, for the connection's life. database/sql prepares a statement per Exec or Query
// outside a *sql.Stmt, and a *sql.Stmt cannot be prepared through the *sql.DB while a
// transaction holds the in-memory database's single connection: without the cache SQLite parsed
// and planned every statement of every transaction again (sqlite3Prepare, a third of the
// Scheduler's CPU per task in BenchmarkFanout). database/sql uses a connection from one
// goroutine at a time, so the cache needs no lock; a statement whose rows are still open is
// busy, and a second use of its text meanwhile (a query nested in another's rows) prepares a
// statement of its own.
type stmtCacheConn struct {
	sqliteConn
	stmts map[string]*cachedStmt
	// tick orders the statements by last use, for eviction.
	tick uint64
}

type cachedStmt struct {
	stmt interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	}
	busy     bool
	lastUsed uint64
}

// newStmtCacheConn wraps conn, or returns it unchanged if it lacks a method the cache needs.
func newStmtCacheConn(conn driver.Conn) driver.Conn {
	sc, ok := conn.(sqliteConn)
	if !ok {
		return conn
	}
	return &stmtCacheConn{sqliteConn: sc, stmts: make(map[string]*cachedStmt)}
}

// cached returns the idle prepared statement of query, preparing it if needed, or nil (with
// no error) when the cached one is busy or the driver's statement cannot be used directly.
func (c *stmtCacheConn) cached(ctx context.Context, query string) (*cachedStmt, error) {
	c.tick++
	if s, ok := c.stmts[query]; ok {
		if s.busy {
			return nil, nil
		}
		s.lastUsed = c.tick
		return s, nil
	}
	ds, err := c.sqliteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	st, ok := ds.(interface {
		driver.Stmt
		driver.StmtExecContext
		driver.StmtQueryContext
	})
	if !ok {
		_ = ds.Close()
		return nil, nil
	}
	if len(c.stmts) >= sqliteStmtCacheSize {
		c.evict()
	}
	s := &cachedStmt{stmt: st, lastUsed: c.tick}
	c.stmts[query] = s
	return s, nil
}

// evict closes the least recently used idle statement.
func (c *stmtCacheConn) evict() {
	var (
		oldest string
		found  bool
		at     uint64
	)
	for q, s := range c.stmts {
		if !s.busy && (!found || s.lastUsed < at) {
			oldest, at, found = q, s.lastUsed, true
		}
	}
	if found {
		_ = c.stmts[oldest].stmt.Close()
		delete(c.stmts, oldest)
	}
}

func (c *stmtCacheConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	s, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	return s.stmt.ExecContext(ctx, args)
}

func (c *stmtCacheConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	s, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	rows, err := s.stmt.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	s.busy = true
	return &cachedRows{Rows: rows, done: func() { s.busy = false }}, nil
}

// PrepareContext lends the cached statement of query (busy until the caller closes it and its
// rows), so that a statement prepared per transaction (a loop of inserts) is parsed once.
func (c *stmtCacheConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.cached(ctx, query)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return c.sqliteConn.PrepareContext(ctx, query)
	}
	s.busy = true
	return &lentStmt{s: s}, nil
}

// Prepare is PrepareContext without a context.
func (c *stmtCacheConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// Close finalizes the cached statements, then closes the connection.
func (c *stmtCacheConn) Close() error {
	for q, s := range c.stmts {
		_ = s.stmt.Close()
		delete(c.stmts, q)
	}
	return c.sqliteConn.Close()
}

// lentStmt is a cached statement lent by PrepareContext: closing it (and the rows it returned)
// gives it back instead of finalizing it.
type lentStmt struct {
	s      *cachedStmt
	rows   int
	closed bool
}

func (l *lentStmt) release() {
	if l.closed && l.rows == 0 {
		l.s.busy = false
	}
}

func (l *lentStmt) Close() error {
	if !l.closed {
		l.closed = true
		l.release()
	}
	return nil
}

func (l *lentStmt) NumInput() int { return l.s.stmt.NumInput() }

func (l *lentStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return l.s.stmt.ExecContext(ctx, args)
}

func (l *lentStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := l.s.stmt.QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	l.rows++
	return &cachedRows{Rows: rows, done: func() { l.rows--; l.release() }}, nil
}

// Exec is ExecContext without a context (driver.Stmt requires it; database/sql calls ExecContext).
func (l *lentStmt) Exec(args []driver.Value) (driver.Result, error) {
	return l.ExecContext(context.Background(), namedValues(args))
}

// Query is QueryContext without a context (driver.Stmt requires it; database/sql calls QueryContext).
func (l *lentStmt) Query(args []driver.Value) (driver.Rows, error) {
	return l.QueryContext(context.Background(), namedValues(args))
}

func namedValues(args []driver.Value) []driver.NamedValue {
	named := make([]driver.NamedValue, len(args))
	for i, v := range args {
		named[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return named
}

// cachedRows are the rows of a cached statement, which is busy until they are closed (done).
// It forwards the column-type methods of the driver's rows.
type cachedRows struct {
	driver.Rows
	done func()
}

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	if r.done != nil {
		r.done()
		r.done = nil
	}
	return err
}

func (r *cachedRows) ColumnTypeDatabaseTypeName(index int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(index)
	}
	return ""
}

func (r *cachedRows) ColumnTypeLength(index int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(index)
	}
	return 0, false
}

func (r *cachedRows) ColumnTypeNullable(index int) (bool, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return t.ColumnTypeNullable(index)
	}
	return false, false
}

func (r *cachedRows) ColumnTypePrecisionScale(index int) (int64, int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(index)
	}
	return 0, 0, false
}

func (r *cachedRows) ColumnTypeScanType(index int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(index)
	}
	return reflect.TypeFor[any]()
}
