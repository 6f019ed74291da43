package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	// The pure-Go SQLite driver.
	"modernc.org/sqlite"
)

// SQLiteMaxOpenConns bounds the connections a file database's pool opens; SQLiteMaxIdleConns
// is how many it keeps when idle.
const (
	SQLiteMaxOpenConns = 16
	SQLiteMaxIdleConns = 4
)

// SQLiteMemory is the path that makes [OpenSQLite] open a private in-memory database.
const SQLiteMemory = ":memory:"

// SQLiteBusyTimeout is how long a SQLite statement waits for another connection's write lock
// before failing with SQLITE_BUSY.
const SQLiteBusyTimeout = 5 * time.Second

// sqliteParams are the DSN parameters of every connection [OpenSQLite] opens.
//
//   - busy_timeout: wait for the write lock instead of failing at once.
//   - foreign_keys: SQLite leaves them off unless asked, per connection.
//   - journal_mode=WAL: readers do not block the writer nor the writer readers.
//   - synchronous=NORMAL: the recommended setting with WAL; a power loss can lose the last
//     transactions but never corrupts the file.
//   - _txlock=immediate: every transaction takes the write lock when it begins, so two
//     transactions that read then write never deadlock into SQLITE_BUSY (a deferred transaction
//     cannot wait for the lock when it upgrades from read to write).
var sqliteParams = "_pragma=" + fmt.Sprintf("busy_timeout(%d)", SQLiteBusyTimeout.Milliseconds()) +
	"&_pragma=foreign_keys(1)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=synchronous(NORMAL)" +
	"&_txlock=immediate"

// OpenSQLite opens the SQLite database at path with modernc.org/sqlite (no cgo), creating the
// file and its parent directories if needed, and checks that it can be used.
//
// Every connection runs in WAL mode with a busy timeout of [SQLiteBusyTimeout], foreign keys on,
// synchronous=NORMAL and transactions that take the write lock when they begin (BEGIN IMMEDIATE),
// and keeps the statements it ran prepared for its life (see stmtCacheConn).
//
// path [SQLiteMemory] (":memory:") opens a private in-memory database. SQLite gives each
// connection its own in-memory database, so the pool is limited to one connection that is never
// closed while the *sql.DB is open: the database lives exactly as long as the *sql.DB, and
// statements run one at a time. (The alternative, a named shared-cache database, brings
// shared-cache table locks that fail with SQLITE_LOCKED instead of waiting.) As with a file,
// code must not use the *sql.DB while it holds a transaction on it: with one connection that
// waits forever; with a file it would wait for the write lock it holds itself.
func OpenSQLite(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("database: SQLite path is empty")
	}
	memory := path == SQLiteMemory
	if !memory {
		// The driver takes parameters after '?', and "file:" names would be read as URIs.
		if strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") {
			return nil, fmt.Errorf("database: SQLite path %q: must be a plain file path (no '?', '#' or file: prefix)", path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("database: create directory for SQLite database %q: %w", path, err)
		}
	}
	base, err := sqlite.NewConnector(path + "?" + sqliteParams)
	if err != nil {
		return nil, fmt.Errorf("database: open SQLite database %q: %w", path, err)
	}
	db := sql.OpenDB(stmtCacheConnector{base: base})
	if memory {
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxIdleTime(0)
		db.SetConnMaxLifetime(0)
	} else {
		// Bounded: every connection is a file descriptor (two with the WAL) and a page cache, and
		// a crowd of callers (10,000 watch streams) must wait for one rather than open one each;
		// the connections a burst opened are closed again once idle.
		db.SetMaxOpenConns(SQLiteMaxOpenConns)
		db.SetMaxIdleConns(SQLiteMaxIdleConns)
		db.SetConnMaxIdleTime(time.Minute)
	}
	// Unlike Postgres, a local file is either usable now or misconfigured: fail fast.
	ctx, cancel := context.WithTimeout(context.Background(), SQLiteBusyTimeout+time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("database: open SQLite database %q: %w", path, err)
	}
	return db, nil
}

// SQLiteTimeLayout is the one text form of timestamps in SQLite: RFC 3339 in UTC with exactly
// three fractional digits, e.g. "2026-01-16T10:00:00.123Z". It is what
// strftime('%Y-%m-%dT%H:%M:%fZ', ...) produces, so values written by Go and by SQL compare and
// sort as the instants they name. Every timestamp column has a CHECK that rejects other forms.
const SQLiteTimeLayout = "2006-01-02T15:04:05.000Z"

// SQLiteNow is the SQL expression for the current time in [SQLiteTimeLayout], the counterpart of
// Postgres' now(). Leases and heartbeats use the database's clock, not the caller's. Add a
// modifier for offsets: strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+30 seconds').
const SQLiteNow = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

// FormatSQLiteTime formats t for a SQLite timestamp column. The value is truncated to the
// millisecond, SQLite's precision (Postgres keeps microseconds).
func FormatSQLiteTime(t time.Time) string {
	return t.UTC().Format(SQLiteTimeLayout)
}

// ParseSQLiteTime parses a SQLite timestamp column value written in [SQLiteTimeLayout].
func ParseSQLiteTime(s string) (time.Time, error) {
	t, err := time.Parse(SQLiteTimeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("database: SQLite timestamp %q is not in the form %s: %w", s, SQLiteTimeLayout, err)
	}
	return t, nil
}
