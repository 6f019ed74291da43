package database

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// Dialect names a SQL dialect. Each service embeds one migration directory per dialect,
// migrations/<dialect>/NNNN_name.sql.
type Dialect string

const (
	// DialectPostgres is PostgreSQL (15 or later), through pgx.
	DialectPostgres Dialect = "postgres"
	// DialectSQLite is SQLite through modernc.org/sqlite.
	DialectSQLite Dialect = "sqlite"
)

// MigrationStatus is the state of one migration of a service in a database.
type MigrationStatus struct {
	// Version is the number the migration's file name starts with.
	Version int64
	// Name is the migration's file name, e.g. "0001_init.sql".
	Name string
	// Applied reports whether the migration has been applied.
	Applied bool
	// AppliedAt is when it was applied (zero if not applied).
	AppliedAt time.Time
}

// serviceName is what a service name may look like: it becomes part of a table name.
var serviceName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// VersionTable is the name of the table that records which migrations of service have been
// applied: converge_<service>_migrations. One table per service lets several services share a
// database without seeing each other's migrations.
func VersionTable(service string) string {
	return "converge_" + service + "_migrations"
}

// MigrationLockID is the key of the Postgres advisory lock held while service's migrations run:
// the 64-bit FNV-1a hash of "converge:migrate:<service>". Different services migrate
// concurrently; replicas of one service wait for each other.
func MigrationLockID(service string) int64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, "converge:migrate:"+service)
	return int64(h.Sum64())
}

func checkService(service string) error {
	if !serviceName.MatchString(service) {
		return fmt.Errorf("database: invalid service name %q: want lower case letters, digits and '_', starting with a letter", service)
	}
	return nil
}

// MigratePostgres applies the pending migrations of service found in fsys (the SQL files
// NNNN_name.sql at its root, with goose annotations) and returns the versions it applied, in
// order; none when the database is up to date.
//
// It holds a session-level advisory lock ([MigrationLockID]) on a connection of its own for the
// whole run, so replicas starting at once apply each migration exactly once: the first applies
// them, the others wait, then find nothing pending. Waiting lasts as long as ctx allows. The
// connection is closed at the end rather than returned to the pool, which releases the lock
// whatever happened. Each migration runs in its own transaction.
//
// Honours [WithLogger].
func MigratePostgres(ctx context.Context, pool *pgxpool.Pool, service string, fsys fs.FS, opts ...Option) ([]int64, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	// goose has a session locker too, but it polls pg_try_advisory_lock at intervals of at least
	// a second and it does not cover goose's creation of the version table, which first-start
	// replicas race on (and retry after another second). A blocking pg_advisory_lock around the
	// whole run waits exactly as long as needed.
	unlock, err := lockPostgres(ctx, pool, MigrationLockID(service))
	if err != nil {
		return nil, fmt.Errorf("database: migrate %s: %w", service, err)
	}
	defer unlock()

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrate(ctx, goose.DialectPostgres, db, service, fsys, collectOptions(opts))
}

// lockPostgres takes the session-level advisory lock id on a connection taken out of pool and
// returns the function that releases it by closing that connection.
func lockPostgres(ctx context.Context, pool *pgxpool.Pool, id int64) (unlock func(), err error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	// The lock belongs to the session; a connection returned to the pool would keep it if the
	// unlock failed. Hijacked, the connection is ours to close, and closing ends the session.
	conn := pc.Hijack()
	closeConn := func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		closeConn()
		return nil, fmt.Errorf("take advisory lock %d: %w", id, err)
	}
	return closeConn, nil
}

// sqliteMigrateMu serializes SQLite migrations within the process. SQLite databases are not
// shared between hosts, and the dev server runs every service in one process, so this is the
// SQLite counterpart of the Postgres advisory lock.
var sqliteMigrateMu sync.Mutex

// MigrateSQLite applies the pending migrations of service found in fsys to the SQLite database
// db and returns the versions it applied, in order. See [MigratePostgres]; migrations of one
// process are serialized by a mutex instead of an advisory lock.
//
// Honours [WithLogger].
func MigrateSQLite(ctx context.Context, db *sql.DB, service string, fsys fs.FS, opts ...Option) ([]int64, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	sqliteMigrateMu.Lock()
	defer sqliteMigrateMu.Unlock()
	return migrate(ctx, goose.DialectSQLite3, db, service, fsys, collectOptions(opts))
}

// StatusPostgres reports every migration of service in fsys and whether it has been applied. It
// only reads: it neither waits for a running migration nor creates the version table.
func StatusPostgres(ctx context.Context, pool *pgxpool.Pool, service string, fsys fs.FS) ([]MigrationStatus, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	var exists bool
	// The name is safe to quote this way: checkService allows [a-z0-9_] only.
	err := db.QueryRowContext(ctx, `SELECT to_regclass('"`+VersionTable(service)+`"') IS NOT NULL`).Scan(&exists)
	if err != nil {
		return nil, fmt.Errorf("database: migration status of %s: %w", service, err)
	}
	return status(ctx, goose.DialectPostgres, db, service, fsys, exists)
}

// StatusSQLite is [StatusPostgres] for a SQLite database.
func StatusSQLite(ctx context.Context, db *sql.DB, service string, fsys fs.FS) ([]MigrationStatus, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, VersionTable(service)).Scan(&n)
	if err != nil {
		return nil, fmt.Errorf("database: migration status of %s: %w", service, err)
	}
	return status(ctx, goose.DialectSQLite3, db, service, fsys, n > 0)
}

// PendingPostgres returns the versions of service's migrations in fsys that have not been
// applied yet, in order.
func PendingPostgres(ctx context.Context, pool *pgxpool.Pool, service string, fsys fs.FS) ([]int64, error) {
	st, err := StatusPostgres(ctx, pool, service, fsys)
	return pending(st), err
}

// PendingSQLite is [PendingPostgres] for a SQLite database.
func PendingSQLite(ctx context.Context, db *sql.DB, service string, fsys fs.FS) ([]int64, error) {
	st, err := StatusSQLite(ctx, db, service, fsys)
	return pending(st), err
}

func pending(st []MigrationStatus) []int64 {
	var versions []int64
	for _, m := range st {
		if !m.Applied {
			versions = append(versions, m.Version)
		}
	}
	return versions
}

// newProvider returns a goose provider for service's migrations, recorded in its own version
// table, logging to logger if not nil.
func newProvider(dialect goose.Dialect, db *sql.DB, service string, fsys fs.FS, logger *slog.Logger) (*goose.Provider, error) {
	if fsys == nil {
		return nil, errors.New("no migrations file system")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return goose.NewProvider(dialect, db, fsys,
		goose.WithTableName(VersionTable(service)),
		// Only the SQL files of fsys, never Go migrations registered globally by some package.
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger.With("service", service)),
	)
}

func migrate(ctx context.Context, dialect goose.Dialect, db *sql.DB, service string, fsys fs.FS, o options) ([]int64, error) {
	p, err := newProvider(dialect, db, service, fsys, o.logger)
	if err != nil {
		return nil, fmt.Errorf("database: migrate %s: %w", service, err)
	}
	results, err := p.Up(ctx)
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	if err != nil {
		// A *goose.PartialError lists the migrations applied before the failing one, which stay
		// applied, and names the failing one.
		var partial *goose.PartialError
		if errors.As(err, &partial) {
			for _, r := range partial.Applied {
				applied = append(applied, r.Source.Version)
			}
			return applied, fmt.Errorf("database: migrate %s: %s: %w", service, path.Base(partial.Failed.Source.Path), partial.Err)
		}
		return applied, fmt.Errorf("database: migrate %s: %w", service, err)
	}
	return applied, nil
}

func status(ctx context.Context, dialect goose.Dialect, db *sql.DB, service string, fsys fs.FS, tableExists bool) ([]MigrationStatus, error) {
	p, err := newProvider(dialect, db, service, fsys, nil)
	if err != nil {
		return nil, fmt.Errorf("database: migration status of %s: %w", service, err)
	}
	if !tableExists {
		// Nothing applied yet. goose would create the table to answer; a status query should not.
		var out []MigrationStatus
		for _, s := range p.ListSources() {
			out = append(out, MigrationStatus{Version: s.Version, Name: path.Base(s.Path)})
		}
		return out, nil
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("database: migration status of %s: %w", service, err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationStatus{
			Version:   s.Source.Version,
			Name:      path.Base(s.Source.Path),
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	return out, nil
}
