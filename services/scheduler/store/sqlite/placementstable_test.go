package sqlite

import (
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	platformstoretest "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// TestWavePlacementsTableKeepsThePlacements: migration 0012 moves a wave's placements (its detail)
// out of the wave row, which every claim and completion updates, into a table of their own. A
// database's existing placements are carried over (a wave without any gets no row), the runs
// read back as before, a deleted run takes its waves' placements with it, and the migration's
// Down puts them back into the wave rows.
func TestWavePlacementsTableKeepsThePlacements(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const placements = `{"placements":[{"taskId":"t1","reason":"PLACEMENT_REASON_DEPENDENCY_LEVEL","message":"no dependencies"}]}`
	s := storeFrom(t, "0012",
		`INSERT INTO task_lists (id, name) VALUES ('tl', 'l')`,
		`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, wave_count) VALUES ('ex1', 'tl', 1, 2)`,
		`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count, detail)
			VALUES ('ex1/w1', 'ex1', 1, 1, '`+placements+`')`,
		`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count) VALUES ('ex1/w2', 'ex1', 2, 0)`,
	)

	columns := platformstoretest.QueryStrings(t, s, `SELECT name FROM pragma_table_info('parallel_execution_waves') WHERE name = 'detail'`)
	require.Empty(t, columns, "the wave rows keep no detail column")
	moved := platformstoretest.QueryStrings(t, s, `SELECT wave_id || ' ' || detail FROM parallel_execution_wave_placements ORDER BY wave_id`)
	require.Equal(t, []string{"ex1/w1 " + placements}, moved, "only the wave with placements has a row")

	_, waves, err := s.GetExecution(ctx, "ex1")
	require.NoError(t, err)
	require.Len(t, waves, 2)
	require.Len(t, waves[0].GetPlacements(), 1)
	require.Equal(t, "t1", waves[0].GetPlacements()[0].GetTaskId())
	require.Equal(t, "no dependencies", waves[0].GetPlacements()[0].GetMessage())
	require.Empty(t, waves[1].GetPlacements())

	// Down: the placements go back into the wave rows.
	p, err := goose.NewProvider(goose.DialectSQLite3, s.DB(), store.Migrations(database.DialectSQLite),
		goose.WithTableName(database.VersionTable(store.Service)), goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, 11)
	require.NoError(t, err)
	var w1, w2 string
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT detail FROM parallel_execution_waves WHERE wave_id = 'ex1/w1'`).Scan(&w1))
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT detail FROM parallel_execution_waves WHERE wave_id = 'ex1/w2'`).Scan(&w2))
	require.Equal(t, placements, w1)
	require.Equal(t, "{}", w2)
	_, err = p.Up(ctx)
	require.NoError(t, err)

	// A deleted run takes its waves' placements with it (ON DELETE CASCADE, through the waves).
	_, err = s.DB().ExecContext(ctx, `DELETE FROM task_list_execution_runs WHERE execution_id = 'ex1'`)
	require.NoError(t, err)
	var left int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*) FROM parallel_execution_wave_placements`).Scan(&left))
	require.Zero(t, left)
}
