package postgres

import (
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A grouped transaction's second request (the other agent's completion or report, taken from
// the queue once the leader holds the lock) used to read its assignment, its wave and its wave's
// next pending assignment in a round trip of its own (ReadAhead), under the execution's lock.
// The lock's batch now also reads what that request will ask for, whichever agent sends it: the
// execution's other held assignments (an agent completes or reports only what it holds), and
// the wave's first two pending tasks (nextPending); the transaction keeps its waves as it writes
// them. ReadAhead then answers from memory when it can. Every writer of an execution's
// assignments and waves holds its row lock, so only the transaction's own writes can change
// these rows: a held assignment it writes is forgotten, a wave it writes is kept as written, and
// a failed savepoint forgets them all.

// heldReadLimit bounds the held assignments the lock's batch reads (a grouped transaction
// applies at most 32 requests).
const heldReadLimit = 32

// heldWhere selects (as alias c) execution $1's held assignments other than $2 without unmet
// dependencies.
func heldWhere(c string) string {
	return c + `.execution_id = $1 AND ` + c + `.status IN ('assigned', 'running') AND ` + c + `.unmet_deps = 0 AND ` +
		c + `.assignment_id <> $2`
}

// heldReadSQL reads execution $1's held assignments other than $2 (prefetchHeld's read). Its
// plan must visit only held rows (migration 0010's index): it runs in every lock's batch.
var heldReadSQL = `SELECT ` + assignmentColumns + ` FROM wave_task_assignments a
		WHERE ` + heldWhere("a") + ` LIMIT ` + strconv.Itoa(heldReadLimit)

// heldCountSQL counts what heldReadSQL reads (with no limit), for prefetchNext's limit.
var heldCountSQL = `SELECT count(*) FROM wave_task_assignments c WHERE ` + heldWhere("c")

// heldPlanSQL and heldPlanEndSQL surround the held reads in the lock's batch (heldReadSQL, and
// heldCountSQL inside prefetchNextHeldSQL): between them Postgres plans no bitmap scan. Their plan
// must be a plain scan of migration 0010's index, which marks the entries of rows no longer held
// dead as it passes them, so that the next read skips them. A bitmap scan of the same index never
// marks them: each read then returns every entry of the rows held since the index page was last
// cleaned (about 100) and visits their heap pages. Postgres picks the bitmap scan where the table
// is large and has no statistics yet: in a database never analysed (autovacuum off, as on this
// project's CI Postgres) from about 100,000 assignments, and in any database for a large execution
// started since the table's last autoanalyze. BenchmarkFanout at 100,000 tasks (10 executions):
// the held index's entries read per task 97 against 3 at 10,000, the assignments' heap blocks per
// task 68 against 23, Postgres's CPU per task 0.51–0.56 ms against 0.46. SET LOCAL ends with the
// transaction; the second statement gives the rest of it the server's setting back. Both ride in
// the lock's batch: no round trip.
const (
	heldPlanSQL    = `SET LOCAL enable_bitmapscan = off`
	heldPlanEndSQL = `SET LOCAL enable_bitmapscan TO DEFAULT`
)

// prefetchHeld queues, after the lock in b, the execution's held assignments other than hint,
// when there is a hint (a request about an assignment: a group's other requests are likely
// the other agents' about theirs). Only rows without unmet dependencies: SatisfyDependencies
// writes the others.
func prefetchHeld(b *pgx.Batch, execution, hint string) map[string]*store.Assignment {
	if hint == "" {
		return nil
	}
	held := map[string]*store.Assignment{}
	b.Queue(heldReadSQL, execution, hint).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			a, err := scanAssignment(rows)
			if err != nil {
				return err
			}
			held[a.GetId()] = a
		}
		return rows.Err()
	})
	return held
}

// readAheadFromMemory answers ReadAhead(id, next) from what the transaction knows, and whether
// it could: the assignment read with the lock and not written since, its wave as read or
// written, and (next) its wave's next pending assignment.
func (t *execTx) readAheadFromMemory(id string, next bool) bool {
	a := t.held[id]
	if a == nil {
		return false
	}
	w := t.waveByNumber(a.GetWaveNumber())
	if w == nil {
		return false
	}
	if next {
		if _, ok := t.next.answer(a.GetWaveNumber(), nil); !ok {
			return false
		}
	}
	delete(t.held, id) // given to the caller, who may change it
	t.pre = &prefetched{a: a, w: proto.CloneOf(w)}
	return true
}

// waveByNumber is wave n as the transaction knows it (read with the lock, or written), or nil.
func (t *execTx) waveByNumber(n int32) *schedulerv1.Wave {
	for _, w := range t.waves {
		if w.GetWaveNumber() == n {
			return w
		}
	}
	return nil
}

// knowWave keeps w, read with the lock, as the transaction's copy of its row.
func (t *execTx) knowWave(w *schedulerv1.Wave) {
	if w == nil {
		return
	}
	if t.waves == nil {
		t.waves = map[string]*schedulerv1.Wave{}
	}
	t.waves[w.GetId()] = proto.CloneOf(w)
}

// wroteWave updates the transaction's copy of wave r's row (when it has one) to what PutWave
// wrote: its columns as Postgres stores them (timestamps in microseconds), the rest as read.
func (t *execTx) wroteWave(r store.WaveRow) {
	old := t.waves[r.ID]
	if old == nil {
		return
	}
	r.ExecutionID, r.WaveNumber, r.Detail = old.GetExecutionId(), old.GetWaveNumber(), "{}"
	r.StartTime, r.EndTime = micros(r.StartTime), micros(r.EndTime)
	w, err := store.DecodeWave(r)
	if err != nil {
		delete(t.waves, r.ID)
		return
	}
	t.waves[r.ID] = w
}

// cloneAssignment is a deep copy of a.
func cloneAssignment(a *store.Assignment) *store.Assignment {
	c := *a
	c.Assignment = proto.CloneOf(a.Assignment)
	c.PreviousErrors = cloneAll(a.PreviousErrors)
	c.Merges = cloneAll(a.Merges)
	return &c
}

func cloneAll[M proto.Message](list []M) []M {
	if list == nil {
		return nil
	}
	out := make([]M, len(list))
	for i, m := range list {
		out[i] = proto.CloneOf(m)
	}
	return out
}

// micros is t as a timestamptz column keeps it (pgx sends microseconds, truncated).
func micros(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := t.Truncate(time.Microsecond).UTC()
	return &v
}
