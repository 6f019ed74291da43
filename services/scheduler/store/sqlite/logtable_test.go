package sqlite

import (
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	platformstoretest "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// migrationsBefore is the Scheduler's SQLite migrations numbered below version.
func migrationsBefore(t *testing.T, version string) fs.FS {
	t.Helper()
	all := store.Migrations(database.DialectSQLite)
	names, err := fs.Glob(all, "*.sql")
	require.NoError(t, err)
	out := fstest.MapFS{}
	for _, n := range names {
		if n < version {
			b, err := fs.ReadFile(all, n)
			require.NoError(t, err)
			out[n] = &fstest.MapFile{Data: b}
		}
	}
	return out
}

// storeFrom is a store opened (and so migrated to the newest version) on a database that was
// migrated to the versions below version and then given the rows of seed: a migration's test of
// what it does to a database's existing rows.
func storeFrom(t *testing.T, version string, seed ...string) *Store {
	t.Helper()
	ctx := t.Context()
	path := dbtest.SQLite(t)
	db, err := database.OpenSQLite(path)
	require.NoError(t, err)
	_, err = database.MigrateSQLite(ctx, db, store.Service, migrationsBefore(t, version))
	require.NoError(t, err)
	for _, stmt := range seed {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, db.Close())
	s, err := New(ctx, path, database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestLogTableWithoutRowidKeepsTheLog: migration 0010 stores the execution log clustered on
// (execution_id, seq) (one B-tree insert less per entry) and carries a database's existing
// entries over, every column and index as before.
func TestLogTableWithoutRowidKeepsTheLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storeFrom(t, "0010",
		`INSERT INTO task_lists (id, name) VALUES ('tl', 'l')`,
		`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, last_seq) VALUES ('ex1', 'tl', 1, 3)`,
		`INSERT INTO task_execution_log (execution_id, seq, event_type, message, created_at)
			VALUES ('ex1', 1, 'execution_started', 'started', '2026-01-16T10:00:00.000Z')`,
		`INSERT INTO task_execution_log (execution_id, seq, task_key, wave_number, instance_id, event_type, message,
			context, created_at, source_time) VALUES ('ex1', 2, 't1', 1, 'agent-1', 'task_started', 'go', '{}',
			'2026-01-16T10:00:01.000Z', '2026-01-16T10:00:00.500Z')`,
		`INSERT INTO task_execution_log (execution_id, seq, task_key, wave_number, instance_id, event_type, message,
			context, created_at) VALUES ('ex1', 3, 't1', 1, 'agent-1', 'task_failed', 'boom',
			'{"error": {"code": "TIMEOUT"}}', '2026-01-16T10:00:02.000Z')`,
	)

	var ddl string
	require.NoError(t, s.DB().QueryRowContext(ctx,
		`SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'task_execution_log'`).Scan(&ddl))
	require.Contains(t, ddl, "WITHOUT ROWID")
	indexes := platformstoretest.QueryStrings(t, s,
		`SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'task_execution_log' AND sql IS NOT NULL ORDER BY name`)
	require.Equal(t, []string{"idx_exec_log_created_at", "idx_exec_log_errors", "idx_exec_log_task"}, indexes)

	entries, _, last, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex1", Limit: 10})
	require.NoError(t, err)
	require.EqualValues(t, 3, last)
	require.Len(t, entries, 3)
	var got []string
	for _, e := range entries {
		got = append(got, strings.Join([]string{e.GetEventType().String(), e.GetTaskId(), e.GetInstanceId(), e.GetMessage(),
			e.GetTime().AsTime().Format(database.SQLiteTimeLayout)}, " "))
	}
	require.Equal(t, []string{
		"EVENT_TYPE_EXECUTION_STARTED   started 2026-01-16T10:00:00.000Z",
		"EVENT_TYPE_TASK_STARTED t1 agent-1 go 2026-01-16T10:00:01.000Z",
		"EVENT_TYPE_TASK_FAILED t1 agent-1 boom 2026-01-16T10:00:02.000Z",
	}, got)
	require.EqualValues(t, 1, entries[1].GetWaveNumber())
	require.NotNil(t, entries[1].GetSourceTime())
	require.Equal(t, "2026-01-16T10:00:00.500Z", entries[1].GetSourceTime().AsTime().Format(database.SQLiteTimeLayout))

	errorsOnly, _, _, err := s.ReadLog(ctx, store.LogQuery{ExecutionID: "ex1", Limit: 10,
		EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_FAILED}})
	require.NoError(t, err)
	require.Len(t, errorsOnly, 1)
	require.EqualValues(t, 3, errorsOnly[0].GetSeq())
}
