// Package database holds what every converge service needs to keep its state in Postgres or in
// an embedded SQLite file: opening connections, applying the service's embedded SQL migrations,
// and telling constraint violations apart.
//
// # Services own their tables
//
// Each service (Scheduler, Registry, Knowledge, Verifier) owns a set of tables and never reads or
// writes another service's tables; services talk to each other only through gRPC. Several
// services may still share one Postgres database or one SQLite file (the all-in-one dev server
// does), so each service records its migrations in its own version table,
// converge_<service>_migrations (see [VersionTable]), and no table has a foreign key into
// another service's tables.
//
// # Postgres
//
// [OpenPostgres] returns a pgx pool that connects lazily: a service starts, reports NOT_SERVING
// while [PingPostgres] fails, and keeps retrying instead of crashing when Postgres is not up yet.
// [MigratePostgres] applies the migrations under a session-level advisory lock derived from the
// service name, so replicas that start at the same moment apply each migration exactly once.
//
// # SQLite
//
// [OpenSQLite] opens a file (or a private in-memory database) with modernc.org/sqlite, in WAL
// mode with a busy timeout, foreign keys on, synchronous=NORMAL and immediate write transactions.
// The SQLite schema mirrors the Postgres one:
//
//   - timestamps are TEXT in one canonical form, RFC 3339 in UTC with exactly three fractional
//     digits ("2026-01-16T10:00:00.000Z", see [SQLiteTimeLayout]); every timestamp column has a
//     CHECK that rejects any other spelling, so the text sorts and compares like the instant it
//     names. Use [FormatSQLiteTime] and [ParseSQLiteTime], and [SQLiteNow] in SQL.
//   - JSON is TEXT with a json_valid CHECK (plus the same json type CHECK as the jsonb column in
//     Postgres, e.g. "must be an array").
//   - booleans are INTEGER 0/1 with a CHECK, identities are INTEGER PRIMARY KEY AUTOINCREMENT,
//     and tables are STRICT so a value of the wrong type is an error as it is in Postgres.
//
// # Handles
//
// [Postgres] and [SQLite] bundle a connection with the service name and its migrations; each
// service's store backends embed one and add the service's queries.
package database
