package database

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// cacheOf returns the statement cache of conn's driver connection.
func cacheOf(t *testing.T, conn *sql.Conn) map[string]*cachedStmt {
	t.Helper()
	var stmts map[string]*cachedStmt
	require.NoError(t, conn.Raw(func(dc any) error {
		c, ok := dc.(*stmtCacheConn)
		require.True(t, ok, "driver connection %T", dc)
		stmts = c.stmts
		return nil
	}))
	return stmts
}

func TestSQLiteStatementCache(t *testing.T) {
	t.Parallel()
	for _, path := range []string{SQLiteMemory, filepath.Join(t.TempDir(), "cache.db")} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			db, err := OpenSQLite(path)
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			ctx := t.Context()
			conn, err := db.Conn(ctx)
			require.NoError(t, err)
			defer func() { _ = conn.Close() }()

			_, err = conn.ExecContext(ctx, `CREATE TABLE t (v INTEGER)`)
			require.NoError(t, err)
			const insert = `INSERT INTO t (v) VALUES (?)`
			_, err = conn.ExecContext(ctx, insert, 1)
			require.NoError(t, err)
			first := cacheOf(t, conn)[insert]
			require.NotNil(t, first, "a statement run is kept prepared")

			// Across transactions the statement is the same prepared one, with fresh arguments.
			for v := 2; v <= 3; v++ {
				tx, err := conn.BeginTx(ctx, nil)
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, insert, v)
				require.NoError(t, err)
				require.NoError(t, tx.Commit())
			}
			require.Same(t, first, cacheOf(t, conn)[insert])

			// A statement prepared in a transaction is the cached one, lent until it is closed:
			// meanwhile the same text runs on a statement of its own.
			const count = `SELECT count(*) FROM t WHERE v <= ?`
			for range 2 {
				tx, err := conn.BeginTx(ctx, nil)
				require.NoError(t, err)
				st, err := tx.PrepareContext(ctx, insert)
				require.NoError(t, err)
				require.True(t, cacheOf(t, conn)[insert].busy, "a prepared statement is lent")
				_, err = tx.ExecContext(ctx, insert, 10)
				require.NoError(t, err)
				_, err = st.ExecContext(ctx, 11)
				require.NoError(t, err)
				q, err := tx.PrepareContext(ctx, count)
				require.NoError(t, err)
				var n int
				require.NoError(t, q.QueryRowContext(ctx, 3).Scan(&n))
				require.Equal(t, 3, n)
				require.NoError(t, st.Close())
				require.NoError(t, q.Close())
				require.NoError(t, tx.Rollback())
			}
			require.Same(t, first, cacheOf(t, conn)[insert])
			require.False(t, first.busy, "a closed statement is given back")
			require.False(t, cacheOf(t, conn)[count].busy)

			// A query run again inside its own rows (busy) gets a statement of its own.
			const sel = `SELECT v FROM t WHERE v >= ? ORDER BY v`
			rows, err := conn.QueryContext(ctx, sel, 1)
			require.NoError(t, err)
			var outer, inner []int
			for rows.Next() {
				var v int
				require.NoError(t, rows.Scan(&v))
				outer = append(outer, v)
				var n int
				require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM (`+sel+`)`, v).Scan(&n))
				inner = append(inner, n)
				var w int
				nested, err := conn.QueryContext(ctx, sel, v)
				require.NoError(t, err)
				require.True(t, nested.Next())
				require.NoError(t, nested.Scan(&w))
				require.Equal(t, v, w)
				require.NoError(t, nested.Close())
			}
			require.NoError(t, rows.Err())
			require.NoError(t, rows.Close())
			require.Equal(t, []int{1, 2, 3}, outer)
			require.Equal(t, []int{3, 2, 1}, inner)
			require.False(t, cacheOf(t, conn)[sel].busy, "closed rows free their statement")

			// A schema change reaches a cached statement.
			const star = `SELECT * FROM t WHERE v = 1`
			cols := func() []string {
				r, err := conn.QueryContext(ctx, star)
				require.NoError(t, err)
				defer func() { _ = r.Close() }()
				c, err := r.Columns()
				require.NoError(t, err)
				return c
			}
			require.Equal(t, []string{"v"}, cols())
			_, err = conn.ExecContext(ctx, `ALTER TABLE t ADD COLUMN w TEXT`)
			require.NoError(t, err)
			require.Equal(t, []string{"v", "w"}, cols())

			// The cache is bounded: the least recently used statements make room.
			for i := range sqliteStmtCacheSize + 10 {
				var n int
				require.NoError(t, conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT %d + count(*) FROM t`, i)).Scan(&n))
				require.Equal(t, i+3, n)
			}
			stmts := cacheOf(t, conn)
			require.Len(t, stmts, sqliteStmtCacheSize)
			require.NotContains(t, stmts, insert)
			require.Contains(t, stmts, fmt.Sprintf(`SELECT %d + count(*) FROM t`, sqliteStmtCacheSize+9))
		})
	}
}

// BenchmarkSQLiteWriteTx is the floor of an embedded store's write transaction: BEGIN
// IMMEDIATE, n single-row UPDATEs by primary key (a 10-column row with two secondary indexes,
// like the Scheduler's assignment and wave rows) and COMMIT on a WAL file with
// synchronous=NORMAL, statements prepared once per connection.
//
//	go test -run '^$' -bench BenchmarkSQLiteWriteTx ./platform/database
func BenchmarkSQLiteWriteTx(b *testing.B) {
	for _, n := range []int{1, 5, 15} {
		b.Run(fmt.Sprintf("statements=%d", n), func(b *testing.B) {
			db, err := OpenSQLite(filepath.Join(b.TempDir(), "bench.db"))
			require.NoError(b, err)
			defer func() { _ = db.Close() }()
			ctx := b.Context()
			_, err = db.ExecContext(ctx, `CREATE TABLE r (id TEXT PRIMARY KEY, status TEXT NOT NULL, owner TEXT,
				attempt INTEGER NOT NULL, token INTEGER NOT NULL, wave INTEGER NOT NULL, position INTEGER NOT NULL,
				detail TEXT, updated_at TEXT NOT NULL, note TEXT)`)
			require.NoError(b, err)
			_, err = db.ExecContext(ctx, `CREATE INDEX r_status ON r (wave, status, position)`)
			require.NoError(b, err)
			_, err = db.ExecContext(ctx, `CREATE INDEX r_owner ON r (owner) WHERE owner IS NOT NULL`)
			require.NoError(b, err)
			const rows = 1000
			for i := range rows {
				_, err = db.ExecContext(ctx, `INSERT INTO r VALUES (?, 'pending', NULL, 0, 0, ?, ?, '{}', '', NULL)`,
					fmt.Sprintf("row-%06d", i), i/2, i)
				require.NoError(b, err)
			}
			cpu0 := processCPU()
			b.ResetTimer()
			defer func() {
				b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			}()
			for i := range b.N {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(b, err)
				for j := range n {
					_, err = tx.ExecContext(ctx, `UPDATE r SET status = ?, owner = ?, attempt = attempt + 1, token = token + 1,
						detail = ?, updated_at = ? WHERE id = ?`, "running", "agent-1", `{"k":"v"}`,
						"2026-01-01T00:00:00.000Z", fmt.Sprintf("row-%06d", (i*n+j)%rows))
					require.NoError(b, err)
				}
				require.NoError(b, tx.Commit())
			}
		})
	}
}

// processCPU is the user and system CPU time of the process so far.
func processCPU() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
