package database

import (
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// Option configures [OpenPostgres], the service handles ([NewPostgres], [NewSQLite]) and the
// migration functions. Each option says which of them honour it; the others ignore it.
type Option func(*options)

type options struct {
	service  string
	maxConns int32
	migrate  bool
	logger   *slog.Logger
	tracer   pgx.QueryTracer
	sessions *Sessions
}

func collectOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithService names the service the connection belongs to. [OpenPostgres] then reports the
// application_name "converge-<service>" to Postgres (visible in pg_stat_activity), unless the URL
// sets application_name itself. [NewPostgres] sets it from its service argument.
func WithService(service string) Option {
	return func(o *options) { o.service = service }
}

// WithMaxConns caps the size of the Postgres pool (default: pgxpool's default, the greater of 4
// and the number of CPUs). It can also be set with the pool_max_conns URL parameter. Honoured by
// [OpenPostgres] and [NewPostgres].
func WithMaxConns(n int32) Option {
	return func(o *options) { o.maxConns = n }
}

// WithMigrate makes [NewPostgres] and [NewSQLite] apply pending migrations before returning.
// With Postgres that needs the database to be up; a service that must start while Postgres is
// down should leave this off and call Migrate from its readiness loop instead.
func WithMigrate() Option {
	return func(o *options) { o.migrate = true }
}

// WithLogger sends migration progress (goose's "migration completed" records) to l. Without
// it migrations log nothing. Honoured by the migration functions and the handles.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.logger = l }
}

// WithTracer installs t as the pgx query tracer of every connection of the pool (it may also
// implement pgx.BatchTracer): benchmarks count the statements and round trips of a code path
// with it. Honoured by [OpenPostgres] and [NewPostgres].
func WithTracer(t pgx.QueryTracer) Option {
	return func(o *options) { o.tracer = t }
}
