package database_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// migration is a goose SQL migration valid in both dialects.
func migration(up, down string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte("-- +goose Up\n" + up + "\n-- +goose Down\n" + down + "\n")}
}

// Two services' migrations. Neither is idempotent on its own (no IF NOT EXISTS, an INSERT), so
// applying one twice fails or shows.
var (
	alphaV1 = fstest.MapFS{
		"0001_widgets.sql": migration(
			"CREATE TABLE alpha_widgets (id integer PRIMARY KEY, name text NOT NULL);\nINSERT INTO alpha_widgets VALUES (1, 'first');",
			"DROP TABLE alpha_widgets;"),
		"0002_gadgets.sql": migration(
			"CREATE TABLE alpha_gadgets (id integer PRIMARY KEY);",
			"DROP TABLE alpha_gadgets;"),
	}
	alphaV2 = with(alphaV1, "0003_sprockets.sql", migration(
		"CREATE TABLE alpha_sprockets (id integer PRIMARY KEY);",
		"DROP TABLE alpha_sprockets;"))
	beta = fstest.MapFS{
		"0001_things.sql": migration(
			"CREATE TABLE beta_things (id integer PRIMARY KEY);\nINSERT INTO beta_things VALUES (7);",
			"DROP TABLE beta_things;"),
	}
	broken = with(alphaV1, "0003_broken.sql", migration("INSERT INTO no_such_table VALUES (1);", "SELECT 1;"))
)

func with(fsys fstest.MapFS, name string, f *fstest.MapFile) fstest.MapFS {
	out := fstest.MapFS{name: f}
	for k, v := range fsys {
		out[k] = v
	}
	return out
}

// migrator runs the migration functions of one dialect on one database.
type migrator struct {
	dialect database.Dialect
	db      *sql.DB
	migrate func(ctx context.Context, service string, fsys fstest.MapFS) ([]int64, error)
	status  func(ctx context.Context, service string, fsys fstest.MapFS) ([]database.MigrationStatus, error)
	pending func(ctx context.Context, service string, fsys fstest.MapFS) ([]int64, error)
}

func postgresMigrator(t *testing.T, url string) *migrator {
	t.Helper()
	pool, err := database.OpenPostgres(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return newPostgresMigrator(t, pool)
}

func newPostgresMigrator(t *testing.T, pool *pgxpool.Pool) *migrator {
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	return &migrator{
		dialect: database.DialectPostgres,
		db:      db,
		migrate: func(ctx context.Context, service string, fsys fstest.MapFS) ([]int64, error) {
			return database.MigratePostgres(ctx, pool, service, fsys)
		},
		status: func(ctx context.Context, service string, fsys fstest.MapFS) ([]database.MigrationStatus, error) {
			return database.StatusPostgres(ctx, pool, service, fsys)
		},
		pending: func(ctx context.Context, service string, fsys fstest.MapFS) ([]int64, error) {
			return database.PendingPostgres(ctx, pool, service, fsys)
		},
	}
}

func sqliteMigrator(t *testing.T, path string) *migrator {
	t.Helper()
	db, err := database.OpenSQLite(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return &migrator{
		dialect: database.DialectSQLite,
		db:      db,
		migrate: func(ctx context.Context, service string, fsys fstest.MapFS) ([]int64, error) {
			return database.MigrateSQLite(ctx, db, service, fsys)
		},
		status: func(ctx context.Context, service string, fsys fstest.MapFS) ([]database.MigrationStatus, error) {
			return database.StatusSQLite(ctx, db, service, fsys)
		},
		pending: func(ctx context.Context, service string, fsys fstest.MapFS) ([]int64, error) {
			return database.PendingSQLite(ctx, db, service, fsys)
		},
	}
}

// forEachDialect runs test in parallel subtests against a fresh Postgres database and a fresh
// SQLite file.
func forEachDialect(t *testing.T, test func(t *testing.T, m *migrator)) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, postgresMigrator(t, dbtest.Postgres(t)))
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t, sqliteMigrator(t, dbtest.SQLite(t)))
	})
}

func (m *migrator) count(t *testing.T, query string) int {
	t.Helper()
	var n int
	require.NoError(t, m.db.QueryRowContext(t.Context(), query).Scan(&n), query)
	return n
}

func (m *migrator) tableExists(t *testing.T, name string) bool {
	t.Helper()
	query := `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1`
	if m.dialect == database.DialectSQLite {
		query = `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`
	}
	var n int
	require.NoError(t, m.db.QueryRowContext(t.Context(), query, name).Scan(&n))
	return n == 1
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, m *migrator) {
		ctx := t.Context()

		status, err := m.status(ctx, "alpha", alphaV1)
		require.NoError(t, err)
		require.Equal(t, []database.MigrationStatus{
			{Version: 1, Name: "0001_widgets.sql"},
			{Version: 2, Name: "0002_gadgets.sql"},
		}, status)
		require.False(t, m.tableExists(t, "converge_alpha_migrations"), "a status query must not create the version table")

		applied, err := m.migrate(ctx, "alpha", alphaV1)
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, applied)

		// Idempotent: nothing to do the second time, and nothing ran again.
		applied, err = m.migrate(ctx, "alpha", alphaV1)
		require.NoError(t, err)
		require.Empty(t, applied)
		require.Equal(t, 1, m.count(t, "SELECT count(*) FROM alpha_widgets"))

		status, err = m.status(ctx, "alpha", alphaV1)
		require.NoError(t, err)
		for _, s := range status {
			require.True(t, s.Applied, "%s", s.Name)
			require.False(t, s.AppliedAt.IsZero(), "%s", s.Name)
		}
		require.True(t, m.tableExists(t, "converge_alpha_migrations"))
		require.False(t, m.tableExists(t, "goose_db_version"))

		// A new release brings a migration: only it is pending, only it is applied.
		pending, err := m.pending(ctx, "alpha", alphaV2)
		require.NoError(t, err)
		require.Equal(t, []int64{3}, pending)
		applied, err = m.migrate(ctx, "alpha", alphaV2)
		require.NoError(t, err)
		require.Equal(t, []int64{3}, applied)
		pending, err = m.pending(ctx, "alpha", alphaV2)
		require.NoError(t, err)
		require.Empty(t, pending)
	})
}

func TestMigrateFailure(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, m *migrator) {
		ctx := t.Context()
		applied, err := m.migrate(ctx, "alpha", broken)
		require.ErrorContains(t, err, "migrate alpha")
		require.ErrorContains(t, err, "0003_broken.sql")
		// What went before the broken migration stays applied; the broken one is not recorded.
		require.Equal(t, []int64{1, 2}, applied)
		pending, err := m.pending(ctx, "alpha", broken)
		require.NoError(t, err)
		require.Equal(t, []int64{3}, pending)
	})
}

// TestMigrateSharedDatabase migrates two services into one database: each sees only its own
// migrations.
func TestMigrateSharedDatabase(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, m *migrator) {
		ctx := t.Context()
		applied, err := m.migrate(ctx, "alpha", alphaV1)
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2}, applied)

		// beta's version 1 is not alpha's version 1.
		applied, err = m.migrate(ctx, "beta", beta)
		require.NoError(t, err)
		require.Equal(t, []int64{1}, applied)

		applied, err = m.migrate(ctx, "alpha", alphaV2)
		require.NoError(t, err)
		require.Equal(t, []int64{3}, applied)
		applied, err = m.migrate(ctx, "beta", beta)
		require.NoError(t, err)
		require.Empty(t, applied)

		// goose records a version 0 row in each table when it creates it.
		require.Equal(t, 4, m.count(t, "SELECT count(*) FROM converge_alpha_migrations"))
		require.Equal(t, 2, m.count(t, "SELECT count(*) FROM converge_beta_migrations"))
		require.Equal(t, 1, m.count(t, "SELECT count(*) FROM beta_things"))
	})
}

// TestMigrateSharedFile migrates two services into one SQLite file through two handles, as two
// services of the dev server do.
func TestMigrateSharedFile(t *testing.T) {
	t.Parallel()
	path := dbtest.SQLite(t)
	alpha, b := sqliteMigrator(t, path), sqliteMigrator(t, path)
	var wg sync.WaitGroup
	var alphaApplied, betaApplied []int64
	var alphaErr, betaErr error
	wg.Go(func() { alphaApplied, alphaErr = alpha.migrate(t.Context(), "alpha", alphaV2) })
	wg.Go(func() { betaApplied, betaErr = b.migrate(t.Context(), "beta", beta) })
	wg.Wait()
	require.NoError(t, alphaErr)
	require.NoError(t, betaErr)
	require.Equal(t, []int64{1, 2, 3}, alphaApplied)
	require.Equal(t, []int64{1}, betaApplied)
}

// TestMigratePostgresConcurrent starts five replicas of a service at once, each with its own
// pool: each pending migration is applied exactly once.
func TestMigratePostgresConcurrent(t *testing.T) {
	t.Parallel()
	url := dbtest.Postgres(t)
	const replicas = 5

	// The previous release applied 0001. (On a database without the version table goose's own
	// creation of it, retried after a second, would spread the replicas out in time.)
	first, err := database.OpenPostgres(t.Context(), url)
	require.NoError(t, err)
	defer first.Close()
	applied, err := database.MigratePostgres(t.Context(), first, "alpha", fstest.MapFS{"0001_widgets.sql": alphaV1["0001_widgets.sql"]})
	require.NoError(t, err)
	require.Equal(t, []int64{1}, applied)

	pools := make([]*pgxpool.Pool, replicas)
	for i := range pools {
		pool, err := database.OpenPostgres(t.Context(), url, database.WithService("alpha"))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		require.NoError(t, database.PingPostgres(t.Context(), pool))
		pools[i] = pool
	}

	start := make(chan struct{})
	results := make([][]int64, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i, pool := range pools {
		wg.Go(func() {
			<-start
			results[i], errs[i] = database.MigratePostgres(t.Context(), pool, "alpha", alphaV2)
		})
	}
	close(start)
	wg.Wait()

	var all []int64
	for i := range results {
		require.NoError(t, errs[i], "replica %d", i)
		all = append(all, results[i]...)
	}
	slices.Sort(all)
	require.Equal(t, []int64{2, 3}, all, "every pending migration applied by exactly one replica")

	m := newPostgresMigrator(t, pools[0])
	require.Equal(t, 1, m.count(t, "SELECT count(*) FROM alpha_widgets"))
	for _, v := range []int{1, 2, 3} {
		require.Equal(t, 1, m.count(t, fmt.Sprintf("SELECT count(*) FROM converge_alpha_migrations WHERE version_id = %d", v)))
	}
	// The lock connections were closed, not returned to the pools holding the lock. The server ends
	// a closed connection's backend (and frees its locks) shortly after the client hangs up.
	require.Eventually(t, func() bool {
		return m.count(t, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 0
	}, 10*time.Second, 10*time.Millisecond, "an advisory lock outlived its migration")
}

func TestMigrateInvalidService(t *testing.T) {
	t.Parallel()
	db, err := database.OpenSQLite(database.SQLiteMemory)
	require.NoError(t, err)
	defer db.Close()
	for _, service := range []string{"", "Alpha", "alpha-beta", "alpha; DROP TABLE x", "1alpha"} {
		_, err := database.MigrateSQLite(t.Context(), db, service, alphaV1)
		require.ErrorContains(t, err, "invalid service name", "%q", service)
	}
}

func TestVersionTableAndLockID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "converge_scheduler_migrations", database.VersionTable("scheduler"))
	require.Equal(t, database.MigrationLockID("scheduler"), database.MigrationLockID("scheduler"))
	require.NotEqual(t, database.MigrationLockID("scheduler"), database.MigrationLockID("registry"))
}
