package postgres_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// On a large table without statistics (a database never analysed, or an execution started since
// the last autoanalyze) Postgres plans the held reads as a bitmap scan of migration 0010's
// index, which never marks the entries of rows no longer held dead: every read then visits them
// all and their heap pages (BenchmarkFanout at 100,000 tasks: 97 index entries read per task
// against 3 at 10,000). The lock's batch runs them between HeldPlanSQL and HeldPlanEndSQL, where the
// plan is a plain scan of that index.
func TestHeldReadsPlanAnIndexScanOnALargeTableWithoutStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, held = 1000, 2
	// Execution ex's tasks leased and completed in turn but the last held ones: the held index's
	// entries of the rows no longer held, as in a run.
	_, conn := heldFixture(t, n, held, "ex")
	// A run's worth of finished assignments of another execution: the table large, never
	// analysed.
	_, err := conn.Exec(ctx, `INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id, wave_number, kind,
		task_key, status, instance_id, attempt, position, assigned_at, completed_at)
		SELECT 'ex2/f' || i, 'ex2', 'ex2/w1', 1, 'task', 'f' || i, 'completed', 'agent-1', 1, $1 + i, now(), now()
		FROM generate_series(1, 100000) i`, n)
	require.NoError(t, err)

	// scans names the scan nodes of sql's plan, run in a transaction after the statements before.
	scans := func(sql string, before ...string) []string {
		t.Helper()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		for _, b := range before {
			_, err := tx.Exec(ctx, b)
			require.NoError(t, err)
		}
		var out []byte
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, "ex", "ex/t0").Scan(&out))
		var names []string
		explained(t, out).walk(func(p planNode) {
			if p.RelationName != "" || p.IndexName != "" {
				names = append(names, p.NodeType+" "+p.IndexName)
			}
		})
		return names
	}
	for name, sql := range map[string]string{"read": postgres.HeldReadSQL, "count": postgres.HeldCountSQL} {
		// The premise: left to itself, the planner picks the bitmap scan here.
		require.Contains(t, scans(sql), "Bitmap Index Scan wave_task_assignments_exec_held_idx",
			"the held %s's plan on a large table without statistics is no longer a bitmap scan: this test no longer shows what it guards against", name)
		require.Equal(t, []string{"Index Scan wave_task_assignments_exec_held_idx"}, scans(sql, postgres.HeldPlanSQL),
			"the held %s as the lock's batch runs it", name)
	}
	// The rest of the transaction plans as the server is set.
	var setting string
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, stmt := range []string{postgres.HeldPlanSQL, postgres.HeldPlanEndSQL} {
		_, err := tx.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	require.NoError(t, tx.QueryRow(ctx, `SHOW enable_bitmapscan`).Scan(&setting))
	require.Equal(t, "on", setting)
}

// A transaction about an assignment sends, in its lock's batch, the held reads between
// HeldPlanSQL and HeldPlanEndSQL, and nothing else between them but the next-pending read.
func TestLockBatchPlansHeldReadsWithoutBitmapScans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sqls := &statements{}
	s := tracedStore(t, sqls)
	oneWaveRun(t, s, "heldplan", "t0", "t1", "t2")
	sqls.count("") // forget the fixture's
	hinted := store.WithNextPendingHint(store.WithAssignmentHint(ctx, "ex/t0"))
	require.NoError(t, s.UpdateExecution(hinted, "ex", func(tx store.ExecTx) error {
		_, err := tx.Assignment("ex/t0")
		return err
	}))
	sqls.mu.Lock()
	sent := slices.Clone(sqls.sqls)
	sqls.mu.Unlock()
	norm := func(sql string) string { return strings.Join(strings.Fields(sql), " ") }
	at := func(sql string) int {
		t.Helper()
		i := slices.Index(sent, norm(sql))
		require.GreaterOrEqual(t, i, 0, "not sent: %s\nsent:\n%s", sql, strings.Join(sent, "\n"))
		return i
	}
	set, read, end := at(postgres.HeldPlanSQL), at(postgres.HeldReadSQL), at(postgres.HeldPlanEndSQL)
	require.Less(t, set, read)
	require.Less(t, read, end)
	for _, between := range sent[set+1 : end] {
		require.Truef(t, between == norm(postgres.HeldReadSQL) || strings.HasPrefix(between, "(SELECT"),
			"only the held reads and the next-pending read plan without bitmap scans, not: %s", between)
	}

	// Without a hint there is no held read, and no setting either.
	sqls.count("")
	require.NoError(t, s.UpdateExecution(ctx, "ex", func(tx store.ExecTx) error { return nil }))
	require.Zero(t, sqls.count("SET LOCAL enable_bitmapscan"))
}
