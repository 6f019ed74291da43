package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/scheduler/store/postgres"
)

// Every transaction about an assignment reads, in its lock's batch, the execution's other held
// assignments and counts them. Those reads must visit the held rows only, not every assignment
// of the run: through an index of the execution's assignments (or of every held row of every
// execution) they visited O(tasks in the run) index entries and heap pages per completion, and
// Postgres's CPU per task grew with the run (P1b in bench/RESULTS.md: 24,607 + 10,000 index
// entries and 433 heap pages per read at the end of a 10,000-task fan-out).
func TestHeldReadsVisitOnlyHeldRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, held = 1000, 2
	url, conn := heldFixture(t, n, held, "ex", "ex2")
	// A transaction id newer than every one of the fixture's: once every snapshot is newer than
	// it, the rows the fixture's updates left behind are dead to all.
	var mark string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&mark))
	explain := func(c *pgx.Conn, sql string) []byte {
		t.Helper()
		var out []byte
		require.NoError(t, c.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, "ex", "ex/t0").Scan(&out))
		return out
	}
	for name, sql := range map[string]string{"read": postgres.HeldReadSQL, "count": postgres.HeldCountSQL} {
		// The reads run in every transaction: the first after a row stops being held may visit
		// its entry and mark it dead; later ones must not visit it. An entry is marked only when
		// its row is dead to every snapshot: to the measuring session's own (whose xmin is the
		// oldest transaction running in any database of the server, as the other tests' that run
		// beside this one) and to the other sessions' (an autovacuum ANALYZE of a table the
		// fixture filled; another test's DROP DATABASE). Wait until none is older than the fixture, then
		// measure on a new session (one that scanned under an older horizon keeps it until a new
		// transaction id moves its snapshots' xmin), and again, at most 6 times, if it still read
		// the dead entries.
		var out []byte
		var visited, pages float64
		for attempt := 0; ; attempt++ {
			waitSnapshotsNewerThan(t, conn, mark)
			c, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			explain(c, sql)
			out = explain(c, sql)
			require.NoError(t, c.Close(ctx))
			visited, pages = heldReadCost(t, out)
			if pages <= 8 || attempt == 5 {
				break
			}
		}
		require.LessOrEqual(t, visited, float64(2*held), "the held %s visits %v rows of a run with %d held:\n%s", name, visited, held, out)
		require.LessOrEqual(t, pages, float64(8), "the held %s reads %v pages for %d held rows:\n%s", name, pages, held, out)
	}
}

// heldFixture is a fresh migrated database and a connection to it, holding task list "tl" of n
// tasks and its two running executions "ex" and "ex2" (one wave each: two executions, so that an
// index of every held row of every execution finds the other's). Autovacuum is off for the
// assignments while the test runs (its database is its own): the index entries of the rows no
// longer held stay until a scan marks them dead, as in a run between two vacuums. In each
// execution of churn every task is leased then completed in turn (two updates, as a fan-out's
// claims and completions) but the last held ones, which agents hold: a fan-out near its end.
func heldFixture(t *testing.T, n, held int, churn ...string) (url string, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	s, url := migratedStore(t)
	tasks := taskKeys(n)
	oneWaveRun(t, s, "held", tasks...)
	oneWaveExecution(t, s, "ex2", tasks...)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `ALTER TABLE wave_task_assignments SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	batch := &pgx.Batch{}
	for _, ex := range churn {
		for i := range n {
			id := fmt.Sprintf("%s/t%d", ex, i)
			batch.Queue(`UPDATE wave_task_assignments SET status = 'assigned', instance_id = $2, lease_expires_at = now() + interval '1 hour'
				WHERE assignment_id = $1`, id, fmt.Sprintf("agent-%d", i%2))
			if i < n-held {
				batch.Queue(`UPDATE wave_task_assignments SET status = 'completed', lease_expires_at = NULL WHERE assignment_id = $1`, id)
			}
		}
	}
	require.NoError(t, conn.SendBatch(ctx, batch).Close())
	return url, conn
}

// heldReadCost is the rows the plan's scans visited and the pages the plan read.
func heldReadCost(t *testing.T, out []byte) (visited, pages float64) {
	t.Helper()
	plan := explained(t, out)
	plan.walk(func(p planNode) {
		// Rows a scan node produced and rows it read and dropped: what it visited.
		if p.RelationName != "" || p.IndexName != "" {
			visited += p.ActualRows + p.RowsRemovedByFilter + p.RowsRemovedByIndexRecheck
		}
	})
	return visited, plan.SharedHitBlocks + plan.SharedReadBlocks
}

// explained is the plan of one statement's EXPLAIN (FORMAT JSON).
func explained(t *testing.T, out []byte) planNode {
	t.Helper()
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan
}

// walk calls fn on p and every node under it.
func (p planNode) walk(fn func(planNode)) {
	fn(p)
	for _, c := range p.Plans {
		c.walk(fn)
	}
}

// olderSnapshots counts what keeps a row that died before the transaction id mark visible to
// some snapshot: conn's own new snapshots while a transaction that was running when mark was
// assigned still runs, and any other session's snapshot or transaction id older than mark, in
// any database of the server. Another database's sessions count too: a DROP DATABASE of
// another test's database (dbtest's cleanup, in the postgres database) held an older snapshot
// for seconds, and no entry of this database was marked dead meanwhile.
func olderSnapshots(t *testing.T, conn *pgx.Conn, mark string) int {
	t.Helper()
	var running bool
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT
		  pg_snapshot_xmin(pg_current_snapshot()) <= $1::xid8,
		  (SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
		      AND (age(backend_xmin) >= age(xid($1::xid8)) OR age(backend_xid) >= age(xid($1::xid8))))`, mark).Scan(&running, &n))
	if running {
		n++
	}
	return n
}

// waitSnapshotsNewerThan waits until no snapshot older than the transaction id mark remains
// (olderSnapshots).
func waitSnapshotsNewerThan(t *testing.T, conn *pgx.Conn, mark string) {
	t.Helper()
	require.Eventually(t, func() bool { return olderSnapshots(t, conn, mark) == 0 }, time.Minute, 10*time.Millisecond,
		"a snapshot older than the fixture was kept for a minute")
}

// planNode is the part of EXPLAIN (FORMAT JSON)'s nodes the test reads.
type planNode struct {
	NodeType                  string     `json:"Node Type"`
	RelationName              string     `json:"Relation Name"`
	IndexName                 string     `json:"Index Name"`
	ActualRows                float64    `json:"Actual Rows"`
	RowsRemovedByFilter       float64    `json:"Rows Removed by Filter"`
	RowsRemovedByIndexRecheck float64    `json:"Rows Removed by Index Recheck"`
	SharedHitBlocks           float64    `json:"Shared Hit Blocks"`
	SharedReadBlocks          float64    `json:"Shared Read Blocks"`
	Plans                     []planNode `json:"Plans"`
}
