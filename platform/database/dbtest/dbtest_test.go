package dbtest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database/dbtest"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	dbtest.SkipUnit(t, "Postgres")
	var name string
	t.Run("database of its own", func(t *testing.T) {
		// Registered first, this cleanup runs last: the connection is still open when the
		// database is dropped, which WITH (FORCE) allows.
		var conn *pgx.Conn
		t.Cleanup(func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		})
		url := dbtest.Postgres(t)
		var err error
		conn, err = pgx.Connect(t.Context(), url)
		require.NoError(t, err)
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
		require.True(t, strings.HasPrefix(name, dbtest.DatabasePrefix), name)
		require.NotEqual(t, url, dbtest.Postgres(t), "two databases, two names")
	})

	// The subtest's cleanup dropped its database.
	conn, err := pgx.Connect(t.Context(), dbtest.ServerURL())
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var exists bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists))
	require.False(t, exists, "database %s left behind", name)
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	path := dbtest.SQLite(t)
	require.Equal(t, "converge.db", filepath.Base(path))
	_, err := os.Stat(filepath.Dir(path))
	require.NoError(t, err, "directory exists")
	require.NotEqual(t, path, dbtest.SQLite(t))
}

// BenchmarkPostgres measures creating a test database (they are dropped when it ends).
func BenchmarkPostgres(b *testing.B) {
	for b.Loop() {
		dbtest.Postgres(b)
	}
}
