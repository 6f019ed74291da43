package database_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
)

func TestOpenSQLite(t *testing.T) {
	t.Parallel()
	// The parent directories do not exist yet.
	path := filepath.Join(t.TempDir(), "state", "dev", "converge.db")
	db, err := database.OpenSQLite(path)
	require.NoError(t, err)
	defer db.Close()

	_, err = os.Stat(path)
	require.NoError(t, err, "database file created")

	pragma := func(name string) string {
		var v string
		require.NoError(t, db.QueryRowContext(t.Context(), "PRAGMA "+name).Scan(&v), name)
		return v
	}
	require.Equal(t, "wal", pragma("journal_mode"))
	require.Equal(t, "1", pragma("foreign_keys"))
	require.Equal(t, "1", pragma("synchronous"), "NORMAL")
	require.Equal(t, "5000", pragma("busy_timeout"))

	// FTS5 and JSON are compiled in.
	_, err = db.ExecContext(t.Context(), `CREATE VIRTUAL TABLE docs USING fts5(body)`)
	require.NoError(t, err)
	var valid bool
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT json_valid('{"a": 1}')`).Scan(&valid))
	require.True(t, valid)
}

func TestOpenSQLiteBadPath(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", "file:x.db", "x.db?mode=ro"} {
		_, err := database.OpenSQLite(path)
		require.Error(t, err, "%q", path)
	}
	// A directory where the file should be.
	_, err := database.OpenSQLite(t.TempDir())
	require.Error(t, err)
}

func TestOpenSQLiteMemory(t *testing.T) {
	t.Parallel()
	open := func() *sql.DB {
		db, err := database.OpenSQLite(database.SQLiteMemory)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	a, b := open(), open()
	ctx := t.Context()

	_, err := a.ExecContext(ctx, `CREATE TABLE t (v INTEGER)`)
	require.NoError(t, err)
	// Separate statements, a transaction and an idle period all see the same database.
	tx, err := a.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	time.Sleep(10 * time.Millisecond) //nolint:forbidigo // the idle period is what is tested
	var n int
	require.NoError(t, a.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.Equal(t, 1, n)

	// b is another, private database.
	_, err = b.ExecContext(ctx, `SELECT count(*) FROM t`)
	require.ErrorContains(t, err, "no such table")
}

func TestSQLiteTime(t *testing.T) {
	t.Parallel()
	instant := time.Date(2026, 1, 16, 10, 0, 0, 123_456_789, time.FixedZone("CET", 3600))
	s := database.FormatSQLiteTime(instant)
	require.Equal(t, "2026-01-16T09:00:00.123Z", s)
	back, err := database.ParseSQLiteTime(s)
	require.NoError(t, err)
	require.True(t, back.Equal(instant.Truncate(time.Millisecond)))
	require.Equal(t, time.UTC, back.Location())

	_, err = database.ParseSQLiteTime("2026-01-16 09:00:00")
	require.ErrorContains(t, err, "not in the form")

	// SQLite's clock writes the same form, and it compares with Go's.
	db, err := database.OpenSQLite(database.SQLiteMemory)
	require.NoError(t, err)
	defer db.Close()
	var now string
	before := time.Now().Add(-time.Second)
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT "+database.SQLiteNow).Scan(&now))
	parsed, err := database.ParseSQLiteTime(now)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), parsed, 5*time.Second)
	require.Less(t, database.FormatSQLiteTime(before), now, "text order is time order")
}
