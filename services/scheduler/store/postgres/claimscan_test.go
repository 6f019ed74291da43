package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// A strict claim reads the first pending task of its wave in claim order (position, then id).
// On an index of (execution, wave, position) alone, the statistics of a table just filled (a run's
// assignments inserted moments before, as every run starts) made Postgres sort every pending row
// of the wave to answer one: 500 rows read per claim halfway through a 1,000-task wave, an O(wave)
// step per claim. The claimable index holds the whole order (migration 0011): each read stops at
// the first pending task, under a custom or a generic plan, whatever the statistics.
func TestClaimReadsStopAtTheFirstPendingTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, url := migratedStore(t)
	const n = 1000
	oneWaveRun(t, s, "claims", taskKeys(n)...)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	// No ANALYZE: the statistics stay those of the table before the run's rows, as in a run's
	// first claims. The first half is claimed.
	_, err = conn.Exec(ctx, `ALTER TABLE wave_task_assignments SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	batch := &pgx.Batch{}
	for i := range n / 2 {
		batch.Queue(`UPDATE wave_task_assignments SET status = 'assigned', instance_id = 'agent-1', lease_expires_at = now() + interval '1 hour'
			WHERE assignment_id = $1`, fmt.Sprintf("ex/t%d", i))
	}
	require.NoError(t, conn.SendBatch(ctx, batch).Close())

	reads := map[string]string{
		"NextPending": `SELECT p.assignment_id FROM wave_task_assignments p WHERE p.assignment_id = ` + postgres.NextPendingTaskSQL,
		"read-ahead":  postgres.PrefetchNextSQL("1"),
		"read-ahead of two agents": postgres.PrefetchNextSQL(`LEAST(1 + (SELECT count(*) FROM wave_task_assignments c
			WHERE c.execution_id = $1 AND c.status IN ('assigned', 'running') AND c.assignment_id <> $2), 2)`),
	}
	args := map[string][]any{"NextPending": {"ex", int32(1)}, "read-ahead": {"ex", "ex/t999"}, "read-ahead of two agents": {"ex", "ex/t999"}}
	for name, sql := range reads {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			_, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode)
			require.NoError(t, err)
			var out []byte
			require.NoError(t, conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args[name]...).Scan(&out))
			var pending float64 // rows the claimable index answered
			explained(t, out).walk(func(p planNode) {
				if p.IndexName == "wave_task_assignments_claimable_idx" {
					pending += p.ActualRows
				}
			})
			require.Positive(t, pending, "%s (%s) did not read the claimable index:\n%s", name, mode, out)
			require.LessOrEqual(t, pending, float64(2), "%s (%s) read %v pending rows of the wave to answer one:\n%s", name, mode, pending, out)
		}
	}
}
