package sqlite

import (
	"regexp"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	platformstoretest "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// constantList is `IN (` followed by at least three constants: the lists SQLite checks by
// building an ephemeral table each time.
var constantList = regexp.MustCompile(`(?i)\bIN\s*\(\s*(?:'[^']*'|\d+)\s*,\s*(?:'[^']*'|\d+)\s*,`)

// tableTexts are the CREATE statements of the Scheduler's tables in h's database, by name.
func tableTexts(t *testing.T, h platformstoretest.SQLStore) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, row := range platformstoretest.QueryStrings(t, h, `SELECT name || char(10) || sql FROM sqlite_schema WHERE type = 'table' AND sql IS NOT NULL`) {
		name, text, _ := strings.Cut(row, "\n")
		out[name] = text
	}
	return out
}

// TestCheckListsAsComparisons: migration 0013 rewrites the CHECK constraints' lists of three or
// more values as chains of comparisons, in the tables' stored CREATE statements. What it must
// keep: the rows (a CHECK is not stored with them), the file's integrity, every rule (the
// conformance suite's constraint cases run on the migrated schema; here a value outside a list
// is still refused, and a NULL still passes), and the indexes. A connection of the pool that read
// the schema before the migration reads it again before its next statement (the schema cookie
// moved). Down gives back 0012's texts byte for byte, and Up again the comparisons.
func TestCheckListsAsComparisons(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := dbtest.SQLite(t)
	at12, err := database.NewSQLite(ctx, path, store.Service, migrationsBefore(t, "0013"), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = at12.Close() })
	db := at12.DB()
	for _, stmt := range []string{
		`INSERT INTO task_lists (id, name) VALUES ('tl', 'l')`,
		`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, last_seq) VALUES ('ex1', 'tl', 1, 1)`,
		`INSERT INTO task_execution_log (execution_id, seq, event_type, message, created_at)
			VALUES ('ex1', 1, 'execution_started', 'started', '2026-01-16T10:00:00.000Z')`,
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	before := tableTexts(t, at12)
	indexes := `SELECT name || ': ' || sql FROM sqlite_schema WHERE type = 'index' AND sql IS NOT NULL`
	indexesBefore := platformstoretest.QueryStrings(t, at12, indexes)
	var lists int
	for _, text := range before {
		lists += len(constantList.FindAllString(text, -1))
	}
	require.Equal(t, 15, lists, "the lists of three or more constants in 0012's tables")

	// A connection that has read the schema before the migration, and holds on to it.
	old, err := db.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = old.Close() }()
	var n int
	require.NoError(t, old.QueryRowContext(ctx, `SELECT count(*) FROM task_execution_log`).Scan(&n))
	require.Equal(t, 1, n)

	s, err := New(ctx, path, database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	after := tableTexts(t, s)
	require.Len(t, after, len(before))
	for name, text := range after {
		require.Empty(t, constantList.FindAllString(text, -1), "table %s still checks a list of constants", name)
	}
	require.Contains(t, after["task_execution_log"], `(event_type = 'task_started'`)
	require.Equal(t, indexesBefore, platformstoretest.QueryStrings(t, s, indexes),
		"the indexes are untouched")
	require.Equal(t, []string{"ok"}, platformstoretest.QueryStrings(t, s, `PRAGMA integrity_check`))
	require.Equal(t, []string{"execution_started"}, platformstoretest.QueryStrings(t, s, `SELECT event_type FROM task_execution_log`))

	// The rules hold, on a new connection and on the one that read the old schema: a value
	// outside the list is refused by the new check (SQLite's message quotes its text), a value
	// in it and a NULL pass.
	for name, exec := range map[string]func(string) error{
		"pool": func(q string) error { _, err := s.DB().ExecContext(ctx, q); return err },
		"old":  func(q string) error { _, err := old.ExecContext(ctx, q); return err },
	} {
		err := exec(`INSERT INTO task_execution_log (execution_id, seq, event_type, message) VALUES ('ex1', 9, 'task_exploded', 'x')`)
		require.Error(t, err, name)
		require.Equal(t, database.CheckViolation, database.ViolationOf(err), "%s: %v", name, err)
		require.Contains(t, err.Error(), "OR event_type = 'task_completed'", "%s reads the new check", name)
		err = exec(`UPDATE task_list_execution_runs SET outcome = 'won' WHERE execution_id = 'ex1'`)
		require.Equal(t, database.CheckViolation, database.ViolationOf(err), "%s: %v", name, err)
		require.NoError(t, exec(`UPDATE task_list_execution_runs SET outcome = NULL, triggered_by = 'retry' WHERE execution_id = 'ex1'`), name)
	}
	_, err = s.DB().ExecContext(ctx, `INSERT INTO task_execution_log (execution_id, seq, event_type, message) VALUES ('ex1', 2, 'agent_escalated', 'x')`)
	require.NoError(t, err)

	// Down: 0012's texts exactly; Up: the comparisons again.
	p, err := goose.NewProvider(goose.DialectSQLite3, s.DB(), store.Migrations(database.DialectSQLite),
		goose.WithTableName(database.VersionTable(store.Service)), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 12)
	require.NoError(t, err)
	require.Equal(t, before, tableTexts(t, s))
	require.Equal(t, []string{"ok"}, platformstoretest.QueryStrings(t, s, `PRAGMA integrity_check`))
	_, err = p.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, after, tableTexts(t, s))
}
