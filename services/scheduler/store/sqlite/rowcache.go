package sqlite

import (
	"context"
	"database/sql"
	"maps"
	"time"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The rows UpdateExecution reads are kept from one committed transaction to the next (rowCache):
// a completion reads its execution, the assignment it completes (which the previous transaction
// claimed and wrote) and its wave, three SELECTs and their decoding that the previous transaction
// already did. The kept rows are right while nothing but this store's own UpdateExecution wrote
// the database since its last commit, which each transaction checks once its write lock is held,
// with one statement on the connection it runs on:
//
//   - total_changes() counts the rows every INSERT, UPDATE and DELETE on that connection changed
//     since it opened (rolled back or not): any other write on it since the last transaction's end
//     (the in-memory database's single connection is everyone's) changes it;
//   - data_version changes when another connection (of this pool, of another pool or another
//     process on the same file) commits, and not for the connection's own commits. A private
//     in-memory database has no other connection, and its data_version is not read.
//
// So the rows are used only when the transaction runs on the connection the last one committed
// on, and both numbers are what that one left; anything else empties the cache, as does any
// failed transaction. Within a transaction, the rows it reads and writes are kept aside
// (txRows) and join the cache only when it commits; a write the transaction does not follow row
// by row (SatisfyDependencies) drops the rows it may have changed.

// rowCacheRows bounds the rows kept (the cache is emptied when it would hold more).
const rowCacheRows = 1 << 16

// waveKey names a wave by its execution and number, as ExecTx.Wave looks it up.
type waveKey struct {
	execution string
	number    int32
}

// rowCache is the rows the last committed UpdateExecution left, and the check that they are
// still the database's. Used under Store.writeMu only.
type rowCache struct {
	conn             any // the driver connection of the last commit (nil: nothing kept)
	changes, version int64
	executions       map[string]store.ExecutionRow
	assignments      map[string]store.AssignmentRow
	waves            map[waveKey]store.WaveRow
	// unmet is the ids of the assignment rows kept whose unmet_deps is above 0: the only rows a
	// SatisfyDependencies can change (a dependent not yet claimable), found without a walk of
	// every row kept.
	unmet map[string]struct{}
	hits  int // rows answered from the cache, for tests
}

// drop forgets every row.
func (c *rowCache) drop() {
	c.conn, c.executions, c.assignments, c.waves, c.unmet = nil, nil, nil, nil, nil
}

// txRows are the rows a transaction read or wrote, as they are in it.
type txRows struct {
	execution   store.ExecutionRow
	assignments map[string]store.AssignmentRow
	waves       map[waveKey]store.WaveRow
}

func (r txRows) clone() txRows {
	r.assignments, r.waves = maps.Clone(r.assignments), maps.Clone(r.waves)
	return r
}

// UpdateExecution's transaction runs on its connection with BEGIN IMMEDIATE, COMMIT and
// ROLLBACK as statements of their own instead of through database/sql's Tx: the driver prepares
// its BEGIN and COMMIT anew for every transaction (modernc.org/sqlite's tx.exec), where the
// connection's statement cache (platform/database) keeps these prepared like any other; and
// data_version is read with PRAGMA data_version, a statement the cache keeps, instead of the
// pragma_data_version table, whose every scan prepares that PRAGMA again. Together they were
// about a sixth of the store's CPU per completion (20-25 µs of 30-35 µs per transaction's
// begin and end on the bench machine). The same _txlock=immediate the pool's BeginTx uses.
const (
	beginSQL    = `BEGIN IMMEDIATE`
	commitSQL   = `COMMIT`
	rollbackSQL = `ROLLBACK`
)

// beginCached begins UpdateExecution's transaction on a connection of its own and checks whether
// the cache's rows are still the database's; it empties the cache when they may not be. The
// caller ends the transaction (commitCached, else rollbackConn) and then closes conn.
func (s *Store) beginCached(ctx context.Context) (*sql.Conn, error) {
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		return nil, err
	}
	var driverConn any
	if err := conn.Raw(func(c any) error { driverConn = c; return nil }); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, beginSQL); err != nil {
		_ = conn.Close()
		return nil, err
	}
	var changes, version int64
	if s.Path() != database.SQLiteMemory {
		// A private in-memory database is one connection that no other pool or process can
		// open (database.OpenSQLite): nothing else commits to it, so its data_version never
		// changes and is not read (one statement less per transaction).
		err = conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&version)
	}
	if err == nil {
		err = conn.QueryRowContext(ctx, `SELECT total_changes()`).Scan(&changes)
	}
	if err != nil {
		rollbackConn(conn)
		_ = conn.Close()
		return nil, err
	}
	c := &s.rows
	if c.conn != driverConn || c.changes != changes || c.version != version {
		c.drop()
		c.conn, c.version = driverConn, version
	}
	return conn, nil
}

// rollbackConn ends conn's transaction without its changes. It runs whatever the caller's
// context: the connection goes back to the pool after it. Its error is not kept, as database/sql's
// Tx.Rollback's is not (it fails only when no transaction is left, SQLite having ended it).
func rollbackConn(conn *sql.Conn) {
	_, _ = conn.ExecContext(context.Background(), rollbackSQL)
}

// commitCached commits t, keeping its rows in the cache. A failed COMMIT leaves the transaction to
// the caller's rollback (SQLite may have ended it already).
func (s *Store) commitCached(t *execTx) error {
	var changes int64
	err := t.tx.QueryRowContext(t.ctx, `SELECT total_changes()`).Scan(&changes)
	if err == nil {
		_, err = t.tx.ExecContext(t.ctx, commitSQL)
	}
	c := &s.rows
	if err != nil || c.conn == nil {
		c.drop()
		return err
	}
	c.changes = changes
	if len(c.assignments)+len(t.rows.assignments) > rowCacheRows || len(c.waves)+len(t.rows.waves) > rowCacheRows ||
		len(c.executions) >= rowCacheRows {
		c.executions, c.assignments, c.waves, c.unmet = nil, nil, nil, nil
	}
	c.executions = put(c.executions, t.ID(), t.rows.execution)
	for id, r := range t.rows.assignments {
		c.assignments = put(c.assignments, id, r)
		if r.UnmetDeps > 0 {
			c.unmet = put(c.unmet, id, struct{}{})
		} else {
			delete(c.unmet, id)
		}
	}
	for k, r := range t.rows.waves {
		c.waves = put(c.waves, k, r)
	}
	return nil
}

func put[K comparable, V any](m map[K]V, k K, v V) map[K]V {
	if m == nil {
		m = map[K]V{}
	}
	m[k] = v
	return m
}

// cachedExecution is the execution's row as the cache has it.
func (s *Store) cachedExecution(id string) (store.ExecutionRow, bool) {
	r, ok := s.rows.executions[id]
	if ok {
		s.rows.hits++
	}
	return r, ok
}

// cachedAssignment is assignment id of this transaction's execution as the transaction or the
// cache has it.
func (t *execTx) cachedAssignment(id string) (store.AssignmentRow, bool) {
	if r, ok := t.rows.assignments[id]; ok {
		return r, true
	}
	r, ok := t.cache.assignments[id]
	if !ok || r.ExecutionID != t.ID() {
		return store.AssignmentRow{}, false
	}
	t.cache.hits++
	return r, true
}

// cachedWave is wave n of this transaction's execution as the transaction or the cache has it.
func (t *execTx) cachedWave(n int32) (store.WaveRow, bool) {
	k := waveKey{t.ID(), n}
	if r, ok := t.rows.waves[k]; ok {
		return r, true
	}
	r, ok := t.cache.waves[k]
	if ok {
		t.cache.hits++
	}
	return r, ok
}

// keepAssignment keeps an assignment row as this transaction has it.
func (t *execTx) keepAssignment(r store.AssignmentRow) {
	t.rows.assignments = put(t.rows.assignments, r.ID, r)
}

// keepWave keeps a wave row (its placements left out, as ExecTx reads it) as this transaction
// has it.
func (t *execTx) keepWave(r store.WaveRow) {
	t.rows.waves = put(t.rows.waves, waveKey{t.ID(), r.WaveNumber}, r)
}

// wroteAssignment keeps the row of an assignment this transaction updated from r, the row it
// wrote: the columns PutAssignment writes from r, the others as the transaction knew them. An
// assignment it did not know is not kept.
func (t *execTx) wroteAssignment(r store.AssignmentRow) {
	base, ok := t.cachedAssignment(r.ID)
	if !ok {
		return
	}
	base.Status, base.InstanceID, base.Attempt, base.FencingToken = r.Status, r.InstanceID, r.Attempt, r.FencingToken
	base.LeaseExpireTime, base.AssignTime, base.CompleteTime = asStored(r.LeaseExpireTime), asStored(r.AssignTime), asStored(r.CompleteTime)
	base.LastReportSeq, base.Position, base.FinalIntegration = r.LastReportSeq, r.Position, r.FinalIntegration
	base.PreviousErrors, base.Merges, base.Detail, base.SessionID = r.PreviousErrors, r.Merges, r.Detail, r.SessionID
	t.keepAssignment(base)
}

// wroteWave keeps the row of a wave this transaction updated from r (see wroteAssignment).
func (t *execTx) wroteWave(r store.WaveRow) {
	base, ok := t.cachedWave(r.WaveNumber)
	if !ok || base.ID != r.ID {
		return
	}
	base.Status, base.TaskCount, base.CompletedCount, base.FailedCount = r.Status, r.TaskCount, r.CompletedCount, r.FailedCount
	base.SkippedCount, base.ActiveAgents, base.BaseCommit, base.IntegrationCommit = r.SkippedCount, r.ActiveAgents, r.BaseCommit, r.IntegrationCommit
	base.StartTime, base.EndTime = asStored(r.StartTime), asStored(r.EndTime)
	t.keepWave(base)
}

// wroteExecution keeps the execution's row as PutExecution wrote it at updated.
func (t *execTx) wroteExecution(r store.ExecutionRow, updated time.Time) {
	base := t.rows.execution
	base.Status, base.Outcome, base.TriggeredBy, base.PreviousExecutionID = r.Status, r.Outcome, r.TriggeredBy, r.PreviousExecutionID
	base.FeatureBuildID, base.TotalTasks, base.CompletedTasks, base.FailedTasks = r.FeatureBuildID, r.TotalTasks, r.CompletedTasks, r.FailedTasks
	base.SkippedTasks, base.RunningTasks, base.CurrentWave, base.WaveCount = r.SkippedTasks, r.RunningTasks, r.CurrentWave, r.WaveCount
	base.TotalAttempts, base.Detail, base.LastSeq = r.TotalAttempts, r.Detail, r.LastSeq
	base.StartTime, base.EndTime, base.UpdateTime = asStored(r.StartTime), asStored(r.EndTime), *asStored(&updated)
	t.rows.execution = base
}

// forgetUnmet forgets the assignment rows of this execution's tasks that SatisfyDependencies
// lowers the unmet_deps of (the rows of tasks whose unmet_deps is above 0), in the transaction's
// rows and in the cache's: their next read is the database's. Every other row kept is still the
// database's, so the completion that satisfies its dependents keeps the rows it and the next
// transaction read (the held assignment, the claimed one). Forgetting cache rows in the middle
// of a transaction is safe whether it commits or not: a row not kept is read again.
func (t *execTx) forgetUnmet(tasks []string) {
	var set map[string]bool // built when a row may be one of them (there are most often none)
	changed := func(r store.AssignmentRow) bool {
		if r.ExecutionID != t.ID() || r.UnmetDeps <= 0 || r.TaskKey == nil {
			return false
		}
		if set == nil {
			set = make(map[string]bool, len(tasks))
			for _, k := range tasks {
				set[k] = true
			}
		}
		return set[*r.TaskKey]
	}
	for id, r := range t.rows.assignments {
		if changed(r) {
			delete(t.rows.assignments, id)
		}
	}
	for id := range t.cache.unmet {
		if r, ok := t.cache.assignments[id]; !ok || changed(r) {
			delete(t.cache.assignments, id)
			delete(t.cache.unmet, id)
		}
	}
}

// asStored is a time as a read of the column it is written to answers it: at SQLite's
// precision (milliseconds, cut as FormatSQLiteTime cuts them), in UTC.
func asStored(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	s := t.UTC().Truncate(time.Millisecond)
	return &s
}
