package database

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// Postgres is a service's handle on its Postgres database: the pool plus the service's name and
// migrations. A service's Postgres store embeds it, which gives the store Ping, Migrate,
// MigrationStatus and Close, and adds its queries on [Postgres.Pool].
type Postgres struct {
	pool       *pgxpool.Pool
	db         *sql.DB // database/sql view of pool, for goose and the conformance suites
	service    string
	migrations fs.FS
	logger     *slog.Logger
	closeOnce  sync.Once
}

// NewPostgres opens a lazy pool on url for service (application_name "converge-<service>") and,
// with [WithMigrate], applies the pending migrations of migrations, the service's
// migrations/postgres directory. Without WithMigrate it succeeds even if Postgres is down.
func NewPostgres(ctx context.Context, url, service string, migrations fs.FS, opts ...Option) (*Postgres, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	o := collectOptions(opts)
	pool, err := OpenPostgres(ctx, url, append([]Option{WithService(service)}, opts...)...)
	if err != nil {
		return nil, err
	}
	p := &Postgres{
		pool:       pool,
		db:         stdlib.OpenDBFromPool(pool),
		service:    service,
		migrations: migrations,
		logger:     o.logger,
	}
	if o.migrate {
		if err := p.Migrate(ctx); err != nil {
			_ = p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Pool returns the pgx pool, for the service's queries.
func (p *Postgres) Pool() *pgxpool.Pool { return p.pool }

// DB returns a database/sql view of the pool (same connections). Queries belong on
// [Postgres.Pool]; this is for tools and tests that speak database/sql, such as the
// conformance suites' raw schema checks.
func (p *Postgres) DB() *sql.DB { return p.db }

// Dialect returns [DialectPostgres].
func (p *Postgres) Dialect() Dialect { return DialectPostgres }

// Service returns the name of the service the database belongs to.
func (p *Postgres) Service() string { return p.service }

// Migrate applies the service's pending migrations (see [MigratePostgres]; the logger of
// [WithLogger] hears which). It is safe to call from several replicas at once, and again: a
// database that is up to date is left alone.
func (p *Postgres) Migrate(ctx context.Context) error {
	_, err := MigratePostgres(ctx, p.pool, p.service, p.migrations, WithLogger(p.logger))
	return err
}

// MigrationStatus reports each of the service's migrations and whether it has been applied, for
// `converge migrate --status`. It does not change the database.
func (p *Postgres) MigrationStatus(ctx context.Context) ([]MigrationStatus, error) {
	return StatusPostgres(ctx, p.pool, p.service, p.migrations)
}

// Ping reports whether Postgres can be reached (see [PingPostgres]). After Close it fails.
func (p *Postgres) Ping(ctx context.Context) error {
	return PingPostgres(ctx, p.pool)
}

// Close closes the pool, waiting for connections in use to be released. It may be called more
// than once.
func (p *Postgres) Close() error {
	p.closeOnce.Do(func() {
		_ = p.db.Close() // closes nothing of its own: the connections belong to the pool
		p.pool.Close()
	})
	return nil
}

// SQLite is a service's handle on its SQLite database: the *sql.DB plus the service's name and
// migrations. A service's SQLite store embeds it, as with [Postgres].
type SQLite struct {
	db         *sql.DB
	path       string
	service    string
	migrations fs.FS
	logger     *slog.Logger
	closeOnce  sync.Once
	closeErr   error
}

// NewSQLite opens the SQLite database at path (see [OpenSQLite]; ":memory:" for a private
// in-memory one) for service and, with [WithMigrate], applies the pending migrations of
// migrations, the service's migrations/sqlite directory.
func NewSQLite(ctx context.Context, path, service string, migrations fs.FS, opts ...Option) (*SQLite, error) {
	if err := checkService(service); err != nil {
		return nil, err
	}
	o := collectOptions(opts)
	db, err := OpenSQLite(path)
	if err != nil {
		return nil, err
	}
	s := &SQLite{db: db, path: path, service: service, migrations: migrations, logger: o.logger}
	if o.migrate {
		if err := s.Migrate(ctx); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	return s, nil
}

// DB returns the database, for the service's queries and for the conformance suites.
func (s *SQLite) DB() *sql.DB { return s.db }

// Dialect returns [DialectSQLite].
func (s *SQLite) Dialect() Dialect { return DialectSQLite }

// Service returns the name of the service the database belongs to.
func (s *SQLite) Service() string { return s.service }

// Path returns the path the database was opened with.
func (s *SQLite) Path() string { return s.path }

// Migrate applies the service's pending migrations (see [MigrateSQLite]).
func (s *SQLite) Migrate(ctx context.Context) error {
	_, err := MigrateSQLite(ctx, s.db, s.service, s.migrations, WithLogger(s.logger))
	return err
}

// MigrationStatus reports each of the service's migrations and whether it has been applied. It
// does not change the database.
func (s *SQLite) MigrationStatus(ctx context.Context) ([]MigrationStatus, error) {
	return StatusSQLite(ctx, s.db, s.service, s.migrations)
}

// Ping reports whether the database can be used. After Close it fails.
func (s *SQLite) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("database: ping SQLite %q: %w", s.path, err)
	}
	return nil
}

// Close closes the database. It may be called more than once.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}
