// Package dbtest gives each test a database of its own: a fresh Postgres database on the test
// server, or a SQLite file in the test's temporary directory.
//
// Tests that need Postgres fail (never skip) when it cannot be reached: a suite that silently
// skips its Postgres half would pass while testing half of what it claims. Only -short (`make
// unit`) skips them, on purpose.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-dev/converge/platform/database"
)

// EnvPostgresURL names the environment variable holding the URL of the Postgres server tests
// use. Its user must be allowed to create databases.
const EnvPostgresURL = "CONVERGE_TEST_POSTGRES_URL"

// DefaultPostgresURL is the test server when [EnvPostgresURL] is not set: a local Postgres with
// trust authentication.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// DatabasePrefix starts the name of every database [Postgres] creates.
const DatabasePrefix = "converge_t_"

// ServerURL returns the URL of the test Postgres server: $CONVERGE_TEST_POSTGRES_URL or
// [DefaultPostgresURL].
func ServerURL() string {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// admin is the pool on the server's maintenance database that creates and drops test
// databases, shared by all tests of the binary.
var admin = sync.OnceValues(func() (*pgxpool.Pool, error) {
	return database.OpenPostgres(context.Background(), ServerURL(), database.WithService("dbtest"), database.WithMaxConns(4))
})

// Postgres creates an empty database named converge_t_<random> on the test server and returns
// its URL. The database is dropped, WITH (FORCE), when t and its subtests end, after the
// cleanups registered later (such as closing a store opened on it). Creating one takes a few
// tens of milliseconds. The test fails if Postgres cannot be reached.
func Postgres(t testing.TB) string {
	t.Helper()
	SkipUnit(t, "Postgres")
	serverURL := ServerURL()
	pool, err := admin()
	if err != nil {
		t.Fatalf("dbtest: test Postgres URL (%s): %v", EnvPostgresURL, err)
	}
	name := DatabasePrefix + randomHex(8)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Identifiers cannot be parameters; name is ours and safe, quoted anyway.
	if _, err := pool.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("dbtest: cannot create a test database on the Postgres server at %s: %v\n"+
			"Tests need a Postgres server whose user may create databases; start one or point %s at one.",
			database.RedactURL(serverURL), err, EnvPostgresURL)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: drop test database %s: %v", name, err)
		}
	})

	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("dbtest: %s is not a URL: %v", EnvPostgresURL, err)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// SkipUnit skips t under `go test -short` (`make unit`: the tests that need neither Postgres nor
// Redis), naming what it needs; `make test` runs it. Outside -short a test that needs a service
// fails when it cannot reach it, never skips.
func SkipUnit(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: skipped by -short (make unit); make test runs it", needs)
	}
}

// SQLite returns the path of a SQLite database file (not yet created) in t's temporary
// directory, removed when t ends.
func SQLite(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "converge.db")
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("dbtest: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// SQL opens a plain database/sql handle on a test database — a Postgres URL from [Postgres] or
// a SQLite path from [SQLite] — for statements behind a store's back (a table dropped under it,
// a row edited by hand). It is closed when t ends.
func SQL(t testing.TB, dialect database.Dialect, dsn string) *sql.DB {
	t.Helper()
	var (
		db  *sql.DB
		err error
	)
	switch dialect {
	case database.DialectPostgres:
		db, err = sql.Open("pgx", dsn)
	case database.DialectSQLite:
		db, err = database.OpenSQLite(dsn)
	default:
		t.Fatalf("dbtest: no dialect %v", dialect)
	}
	if err != nil {
		t.Fatalf("dbtest: open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Opener is a store backend's constructor, as every service's store/postgres.New and
// store/sqlite.New are: dsn is a Postgres URL or a SQLite path.
type Opener[T io.Closer] func(ctx context.Context, dsn string, opts ...database.Option) (T, error)

// ForEachDialect runs test once per dialect, as parallel subtests, each on a fresh test
// database: st is a migrated store opened by pg or lite (and closed when the subtest ends),
// as the store interface S the test takes; db reaches the same database with plain SQL, for
// statements behind the store's back.
func ForEachDialect[S any, P, L io.Closer](t *testing.T, pg Opener[P], lite Opener[L], test func(t *testing.T, dialect database.Dialect, st S, db *sql.DB)) {
	t.Helper()
	run := func(dialect database.Dialect, open func(t *testing.T, dsn string) (any, error), dsn func(t testing.TB) string) {
		t.Run(string(dialect), func(t *testing.T) {
			t.Parallel()
			d := dsn(t)
			opened, err := open(t, d)
			if err != nil {
				t.Fatalf("dbtest: open a %s store: %v", dialect, err)
			}
			t.Cleanup(func() { _ = opened.(io.Closer).Close() })
			st, ok := opened.(S)
			if !ok {
				t.Fatalf("dbtest: a %T is not a %T", opened, st)
			}
			test(t, dialect, st, SQL(t, dialect, d))
		})
	}
	run(database.DialectPostgres, func(t *testing.T, dsn string) (any, error) { return pg(t.Context(), dsn, database.WithMigrate()) }, Postgres)
	run(database.DialectSQLite, func(t *testing.T, dsn string) (any, error) { return lite(t.Context(), dsn, database.WithMigrate()) }, SQLite)
}
