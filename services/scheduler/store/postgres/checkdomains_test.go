package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	platformstoretest "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// hotTables are the tables a task's transactions write: migration 0013 moved their one-column
// CHECK constraints into domains.
var hotTables = []string{"tasks", "task_list_execution_runs", "parallel_execution_waves", "wave_task_assignments", "task_execution_log"}

// TestCheckDomainsKeepTheRules: migration 0013 turns the one-column CHECK constraints of the
// tables a task writes into domains, which Postgres plans once per connection instead of once per
// statement, and checks only where a statement assigns the column. What it must not change: the
// rules themselves (the conformance suite's constraint cases run on the migrated schema), the
// indexes (their predicates still match the queries: TestHeldReadsVisitOnlyHeldRows), and the
// rows. Its Down gives back 0011's constraints and indexes exactly, and Up again the domains.
func TestCheckDomainsKeepTheRules(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	before := schemaAt(t, 11)
	s, _ := migratedStore(t)
	oneWaveRun(t, s, "domains", taskKeys(3)...)
	after := readSchema(t, s)

	// Only the primary keys' non-empty rules are still one-column table CHECKs: other tables'
	// foreign keys reference those columns.
	require.ElementsMatch(t, []string{
		"parallel_execution_waves_wave_id_check",
		"task_list_execution_runs_execution_id_check",
		"wave_task_assignments_assignment_id_check",
	}, platformstoretest.QueryStrings(t, s, `SELECT conname FROM pg_constraint
		WHERE contype = 'c' AND cardinality(conkey) = 1 AND conrelid::regclass::text = ANY (?)`, hotTables))
	// Every other one-column rule of 0011 is its column's domain now (that each still refuses what
	// it did is the conformance suite's constraint cases); one domain's condition, word for word.
	var domains int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE ty.typtype = 'd' AND a.attrelid::regclass::text = ANY ($1) AND NOT a.attisdropped`, hotTables).Scan(&domains))
	require.Equal(t, 55, domains, "columns of the hot tables typed by a domain")
	require.Equal(t, []string{`CHECK ((VALUE = ANY (ARRAY['pending'::text, 'assigned'::text, 'running'::text, 'completed'::text, 'failed'::text, 'skipped'::text, 'cancelled'::text])))`},
		platformstoretest.QueryStrings(t, s, `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_type ty ON ty.oid = c.contypid
		WHERE ty.typname = 'scheduler_assignment_status'`))
	// The other constraints are all still there (the multi-column ones now read a domain
	// column through its base type, `(status)::text`), and so is every index.
	require.Len(t, after.constraints, len(before.constraints)-domains)
	require.Subset(t, names(before.constraints), names(after.constraints))
	require.Len(t, after.indexes, len(before.indexes))

	// Down: 0011's constraints and indexes exactly, and the rows kept.
	p := provider(t, s)
	_, err := p.DownTo(ctx, 11)
	require.NoError(t, err)
	down := readSchema(t, s)
	require.Equal(t, before.constraints, down.constraints)
	require.Equal(t, before.indexes, down.indexes)
	require.Equal(t, []string{"ex/t0", "ex/t1", "ex/t2"},
		platformstoretest.QueryStrings(t, s, `SELECT assignment_id FROM wave_task_assignments`))
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, after, readSchema(t, s))

	// A rule of a domain still refuses as a CHECK did, on an UPDATE too.
	_, err = s.DB().ExecContext(ctx, `UPDATE wave_task_assignments SET unmet_deps = -1 WHERE assignment_id = 'ex/t0'`)
	require.Equal(t, database.CheckViolation, database.ViolationOf(err), "%v", err)
}

// schemaDump is a database's constraints and indexes, as Postgres prints them.
type schemaDump struct{ constraints, indexes []string }

func readSchema(t *testing.T, s platformstoretest.SQLStore) schemaDump {
	t.Helper()
	return schemaDump{
		constraints: platformstoretest.QueryStrings(t, s, `SELECT conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
			FROM pg_constraint WHERE connamespace = current_schema()::regnamespace AND conrelid <> 0`),
		indexes: platformstoretest.QueryStrings(t, s, `SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
			WHERE c.relnamespace = current_schema()::regnamespace`),
	}
}

// schemaAt is the schema of a fresh database migrated up to version.
func schemaAt(t *testing.T, version int64) schemaDump {
	t.Helper()
	s, err := postgres.New(context.Background(), dbtest.Postgres(t))
	require.NoError(t, err)
	defer s.Close()
	_, err = provider(t, s).UpTo(t.Context(), version)
	require.NoError(t, err)
	return readSchema(t, s)
}

// provider is goose on the Scheduler's Postgres migrations of s's database.
func provider(t *testing.T, s platformstoretest.SQLStore) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, s.DB(), store.Migrations(database.DialectPostgres),
		goose.WithTableName(database.VersionTable(s.Service())), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p
}

// names are the first two words of each line: a constraint's table and name.
func names(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		f := strings.Fields(l)
		out[i] = f[0] + " " + f[1]
	}
	return out
}
