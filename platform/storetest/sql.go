package storetest

import (
	"context"
	"database/sql"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
)

// SQLStore is what the schema checks need of a store backed by SQL. The stores built on
// [database.Postgres] and [database.SQLite] have it through the handle they embed.
type SQLStore interface {
	// DB is a database/sql handle on the store's database.
	DB() *sql.DB
	// Dialect is the SQL dialect of DB.
	Dialect() database.Dialect
	// Service is the service whose migrations the store applies.
	Service() string
	// Migrate applies pending migrations.
	Migrate(ctx context.Context) error
	// MigrationStatus lists the migrations and whether each is applied.
	MigrationStatus(ctx context.Context) ([]database.MigrationStatus, error)
}

// RequireSQL returns store as a [SQLStore], or skips the test: schema checks do not apply to a
// backend without SQL (Redis, in-process).
func RequireSQL(t *testing.T, store any) SQLStore {
	t.Helper()
	s, ok := store.(SQLStore)
	if !ok {
		t.Skipf("%T is not SQL-backed: no schema to check", store)
	}
	return s
}

// Rebind rewrites the ? placeholders of query into $1, $2, ... for Postgres, so that suites
// write each statement once. Question marks inside '...' literals and "..." identifiers are left
// alone.
func Rebind(d database.Dialect, query string) string {
	if d != database.DialectPostgres {
		return query
	}
	var b strings.Builder
	n := 0
	var quote rune // the quote we are inside, or 0
	for _, r := range query {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Exec runs one statement, written with ? placeholders, and fails the test if it fails.
func Exec(t *testing.T, s SQLStore, query string, args ...any) {
	t.Helper()
	_, err := s.DB().ExecContext(t.Context(), Rebind(s.Dialect(), query), args...)
	require.NoError(t, err, "exec %s", query)
}

// Stmt is a SQL statement with ? placeholders and its arguments.
type Stmt struct {
	// SQL is the statement; ? placeholders are rewritten for Postgres by [Rebind].
	SQL string
	// Args are the statement's arguments.
	Args []any
}

// S builds a [Stmt].
func S(query string, args ...any) Stmt {
	return Stmt{SQL: query, Args: args}
}

// Case is one row of a table-driven schema test: Setup statements that must succeed, then Stmt,
// which must succeed (Want [database.NoViolation]) or break the integrity rule Want names.
type Case struct {
	// Name names the case's subtest.
	Name string
	// Setup runs first; every statement must succeed.
	Setup []Stmt
	// Stmt is the statement under test.
	Stmt Stmt
	// Want is the violation Stmt must cause, or NoViolation if it must succeed.
	Want database.Violation
}

// RunCases runs each case as a subtest, in a transaction of its own that is rolled back at the
// end, so cases do not see each other's rows and share one database. Checking the kind of the
// violation, not just that the statement failed, keeps a typo in a statement from passing as a
// rejected row.
func RunCases(t *testing.T, s SQLStore, cases []Case) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			tx, err := s.DB().BeginTx(t.Context(), nil)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback() }()

			for i, st := range c.Setup {
				_, err := tx.ExecContext(t.Context(), Rebind(s.Dialect(), st.SQL), st.Args...)
				require.NoError(t, err, "setup statement %d: %s", i, st.SQL)
			}
			_, err = tx.ExecContext(t.Context(), Rebind(s.Dialect(), c.Stmt.SQL), c.Stmt.Args...)
			if c.Want == database.NoViolation {
				require.NoError(t, err, "%s", c.Stmt.SQL)
				return
			}
			require.Error(t, err, "want a %s violation from: %s", c.Want, c.Stmt.SQL)
			require.Equal(t, c.Want.String(), database.ViolationOf(err).String(), "error: %v", err)
		})
	}
}

// Schema is the tables a service expects, each with its exact set of columns.
type Schema map[string][]string

// versionTable matches the migration version tables of services.
var versionTable = regexp.MustCompile(`^converge_[a-z0-9_]+_migrations$`)

// RequireSchema checks that the database has exactly the tables of want, each with exactly its
// columns. Migration version tables and the shadow tables SQLite creates for virtual tables
// (FTS5) are not counted.
func RequireSchema(t *testing.T, s SQLStore, want Schema) {
	t.Helper()
	var wantTables []string
	for table := range want {
		wantTables = append(wantTables, table)
	}
	var tables []string
	for _, table := range QueryStrings(t, s, tablesQuery[s.Dialect()]) {
		if !versionTable.MatchString(table) {
			tables = append(tables, table)
		}
	}
	require.ElementsMatch(t, wantTables, tables, "tables")
	for table, columns := range want {
		require.ElementsMatch(t, columns, QueryStrings(t, s, columnsQuery[s.Dialect()], table), "columns of %s", table)
	}
}

var tablesQuery = map[database.Dialect]string{
	database.DialectPostgres: `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`,
	// pragma_table_list types shadow tables as 'shadow'; keep ordinary and virtual ones.
	database.DialectSQLite: `SELECT name FROM pragma_table_list
		WHERE schema = 'main' AND type IN ('table', 'virtual') AND name NOT LIKE 'sqlite_%'`,
}

var columnsQuery = map[database.Dialect]string{
	database.DialectPostgres: `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = ?`,
	database.DialectSQLite: `SELECT name FROM pragma_table_info(?)`,
}

// Index describes an index made by CREATE INDEX; the indexes behind PRIMARY KEY and UNIQUE
// constraints are checked through the constraints.
type Index struct {
	// Table is the indexed table.
	Table string
	// Unique is set for a CREATE UNIQUE INDEX.
	Unique bool
	// Partial is set for an index with a WHERE clause.
	Partial bool
}

// RequireIndexes checks that the database has exactly the indexes of want (by name), on the
// same tables, unique and partial alike. It keeps the dialects' migrations from drifting apart.
func RequireIndexes(t *testing.T, s SQLStore, want map[string]Index) {
	t.Helper()
	rows, err := s.DB().QueryContext(t.Context(), indexesQuery[s.Dialect()])
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]Index{}
	for rows.Next() {
		var name string
		var ix Index
		require.NoError(t, rows.Scan(&name, &ix.Table, &ix.Unique, &ix.Partial))
		got[name] = ix
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}

var indexesQuery = map[database.Dialect]string{
	database.DialectPostgres: `SELECT ic.relname, tc.relname, i.indisunique, i.indpred IS NOT NULL
		FROM pg_index i
		JOIN pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_class tc ON tc.oid = i.indrelid
		JOIN pg_namespace n ON n.oid = ic.relnamespace
		WHERE n.nspname = current_schema()
		AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`,
	// origin 'c': made by CREATE INDEX (not 'pk' or 'u', a constraint's).
	database.DialectSQLite: `SELECT il.name, m.name, il."unique", il.partial
		FROM sqlite_schema m, pragma_index_list(m.name) il
		WHERE m.type = 'table' AND il.origin = 'c'`,
}

// RequireMigrated checks the migrations of a new store: all applied, recorded in the service's
// own version table (not goose's default one), and a second Migrate is a no-op that records
// nothing more.
func RequireMigrated(t *testing.T, s SQLStore) {
	t.Helper()
	ctx := t.Context()
	before, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, before, "no migrations")
	for _, m := range before {
		require.True(t, m.Applied, "migration %s not applied", m.Name)
	}

	table := database.VersionTable(s.Service())
	countRows := func() int {
		var n int
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	rows := countRows()
	require.NoError(t, s.Migrate(ctx), "second migrate")
	require.NoError(t, s.Migrate(ctx), "third migrate")
	require.Equal(t, rows, countRows(), "migrating an up-to-date database recorded something")
	after, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after)

	tables := QueryStrings(t, s, tablesQuery[s.Dialect()])
	require.Contains(t, tables, table)
	require.NotContains(t, tables, "goose_db_version", "migrations must not use goose's default table")
}

// QueryStrings answers the one text column of query's rows (written with ? placeholders, rebound
// for the store's dialect), sorted.
func QueryStrings(t *testing.T, s SQLStore, query string, args ...any) []string {
	t.Helper()
	rows, err := s.DB().QueryContext(t.Context(), Rebind(s.Dialect(), query), args...)
	require.NoError(t, err, "%s", query)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	slices.Sort(out)
	return out
}

// SchemaSpec is what RunSchema holds a service's store to.
type SchemaSpec struct {
	// Tables and their columns, on every backend.
	Tables Schema
	// Indexes by name, on every backend.
	Indexes map[string]Index
	// Adjust, when set, edits copies of Tables and Indexes for one dialect (full-text search, for
	// one, takes a different form in each).
	Adjust func(d database.Dialect, tables Schema, indexes map[string]Index)
	// Cases are the constraint cases every backend must decide alike.
	Cases []Case
	// SQLiteCases run on SQLite only: Postgres parses any spelling of a timestamptz into an
	// instant, SQLite keeps text, so its CHECKs accept the canonical form only.
	SQLiteCases []Case
	// PostgresCases run on Postgres only: for a column one backend keeps where the other does not.
	PostgresCases []Case
}

// RunSchema runs the checks every service's store shares, as parallel subtests: ping and close,
// migrations applied and idempotent, the tables, columns and indexes of spec, and its constraint
// cases.
func RunSchema[S Pinger](t *testing.T, newStore func(t *testing.T) S, spec SchemaSpec) {
	t.Run("PingAndClose", func(t *testing.T) {
		t.Parallel()
		RequirePingAndClose(t, newStore)
	})
	t.Run("Migrations", func(t *testing.T) {
		t.Parallel()
		RequireMigrated(t, RequireSQL(t, newStore(t)))
	})
	t.Run("Schema", func(t *testing.T) {
		t.Parallel()
		s := RequireSQL(t, newStore(t))
		tables, indexes := maps.Clone(spec.Tables), maps.Clone(spec.Indexes)
		if spec.Adjust != nil {
			spec.Adjust(s.Dialect(), tables, indexes)
		}
		RequireSchema(t, s, tables)
		RequireIndexes(t, s, indexes)
	})
	t.Run("Constraints", func(t *testing.T) {
		t.Parallel()
		s := RequireSQL(t, newStore(t))
		cases := slices.Clone(spec.Cases)
		switch s.Dialect() {
		case database.DialectSQLite:
			cases = append(cases, spec.SQLiteCases...)
		case database.DialectPostgres:
			cases = append(cases, spec.PostgresCases...)
		}
		RunCases(t, s, cases)
	})
}
