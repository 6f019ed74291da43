package database_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// redisReply stands for go-redis' redis.Error (the Registry's tests check the real client).
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// TestIsUnavailableClassifies: the errors of a store that cannot answer are recognised; bugs,
// integrity violations and the caller's own context are not.
func TestIsUnavailableClassifies(t *testing.T) {
	t.Parallel()
	yes := []error{
		database.ErrUnavailable,
		&database.UnavailableError{Err: errors.New("x")},
		fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}),
		&pgconn.PgError{Code: "08006"},
		&pgconn.PgError{Code: "53300", Message: "too many connections"},
		&pgconn.PgError{Code: "40001"},
		errors.New("closed pool"),
		sql.ErrConnDone,
		errors.New("sql: database is closed"),
		redisReply("LOADING Redis is loading the dataset in memory"),
		redisReply("READONLY You can't write against a read only replica."),
		errors.New("redis: client is closed"),
		errors.New("redis: connection pool timeout"),
	}
	for _, err := range yes {
		require.True(t, database.IsUnavailable(err), "%v", err)
		require.ErrorIs(t, database.MarkUnavailable(err), database.ErrUnavailable, "%v", err)
	}
	no := []error{
		nil,
		errors.New("boom"),
		&pgconn.PgError{Code: "42P01", Message: `relation "x" does not exist`},
		&pgconn.PgError{Code: "23505"},
		redisReply("ERR unknown command"),
		context.Canceled,
		context.DeadlineExceeded,
		fmt.Errorf("query: %w", context.DeadlineExceeded),
	}
	for _, err := range no {
		require.False(t, database.IsUnavailable(err), "%v", err)
		require.Equal(t, err, database.MarkUnavailable(err))
	}
}

// TestIsUnavailablePostgres provokes real outages: a server that refuses connections, a
// connect that runs out of time, a closed pool, a connection the server terminated (admin
// shutdown, 57P01); and a real bug (a missing table) that is not one.
func TestIsUnavailablePostgres(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	// Nothing listens on port 1.
	refused, err := database.OpenPostgres(ctx, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
	if err == nil {
		err = refused.Ping(ctx)
		refused.Close()
	}
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "refused: %v", err)

	// A connect that cannot finish before its deadline (a non-routable address).
	shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = pgconn.Connect(shortCtx, "postgres://postgres@10.255.255.1:5432/postgres?sslmode=disable")
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "connect deadline: %v", err)

	url := dbtest.Postgres(t)
	pool, err := database.OpenPostgres(ctx, url)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT * FROM no_such_table")
	require.Error(t, err)
	require.False(t, database.IsUnavailable(err), "a missing table is a bug, not an outage: %v", err)

	// The server terminates the session: the next statement on it fails with 57P01.
	conn, err := pgconn.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var pid uint32 = conn.PID()
	_, err = pool.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(pid))
	require.NoError(t, err)
	err = conn.Exec(ctx, "SELECT 1").Close()
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "terminated: %v", err)

	pool.Close()
	_, err = pool.Exec(ctx, "SELECT 1")
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "closed pool: %v", err)
}

// TestIsUnavailableSQLite: a closed database, a file that cannot be opened and a write lock held
// past the busy timeout are outages; a missing table is not.
func TestIsUnavailableSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := dbtest.SQLite(t)
	db, err := database.OpenSQLite(path)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "SELECT * FROM no_such_table")
	require.Error(t, err)
	require.False(t, database.IsUnavailable(err), "%v", err)

	// Another connection holds the write lock longer than the busy timeout.
	_, err = db.ExecContext(ctx, "CREATE TABLE t (n integer)")
	require.NoError(t, err)
	other, err := database.OpenSQLite(path)
	require.NoError(t, err)
	defer other.Close()
	tx, err := other.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, "INSERT INTO t VALUES (2)")
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "busy: %v", err)
	require.NoError(t, tx.Rollback())

	require.NoError(t, db.Close())
	_, err = db.ExecContext(ctx, "SELECT 1")
	require.True(t, database.IsUnavailable(err), "closed: %v", err)

	// A directory where the file should be cannot be opened as a database.
	dir := filepath.Join(t.TempDir(), "dir.db")
	require.NoError(t, os.Mkdir(dir, 0o700))
	_, err = database.OpenSQLite(dir)
	require.Error(t, err)
	require.True(t, database.IsUnavailable(err), "cannot open: %v", err)
}
