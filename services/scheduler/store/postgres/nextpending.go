package postgres

import (
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A completion that leases the agent's next assignment in its own transaction (CompleteTask with
// claim_next) asks NextPending of its wave after the completion's reads: one more round trip
// while the execution's row is locked. With store.NextPendingHint the lock's batch reads it too,
// and NextPending answers from that read as long as nothing the transaction wrote can have
// changed the answer: every writer of an execution's assignments holds its row lock, so only the
// transaction's own writes can. An assignment put back to pending (or moved within the pending
// ones) and an insert drop the read-ahead answer, and NextPending queries as before; a pending
// assignment read ahead and then taken (leased, completed) leaves it, and the next one read
// answers (a grouped transaction's next request), until those read are all taken.

// nextPending is the start of a wave's pending assignments (its pending integration, then its
// first pending tasks in position order), read with the lock and kept up to date with the
// transaction's own writes of them.
type nextPending struct {
	fetched bool                // the lock's batch answered
	integ   *store.Assignment   // the wave's pending integration, nil when none
	tasks   []*store.Assignment // its first pending tasks, in claim order
	full    bool                // as many tasks as asked for were read: more may be pending after them
	wave    int32               // the wave it answers for: the hinted assignment's
	pre     *prefetched         // the hinted assignment, read in the same batch (its wave)
}

// prefetchNextSQL reads the wave of assignment $2 (of execution $1): its pending integration,
// then its first pending tasks in claim order, at most limit (an SQL expression) of them.
func prefetchNextSQL(limit string) string {
	const wave = `(SELECT h.wave_number FROM wave_task_assignments h WHERE h.assignment_id = $2 AND h.execution_id = $1)`
	return `(SELECT ` + assignmentColumns + ` FROM wave_task_assignments a WHERE a.assignment_id =
		(SELECT i.assignment_id FROM wave_task_assignments i WHERE i.wave_id =
			(SELECT w.wave_id FROM parallel_execution_waves w WHERE w.execution_id = $1 AND w.wave_number = ` + wave + `)
			AND i.kind = 'integration' AND i.status = 'pending'))
		UNION ALL
		(SELECT ` + assignmentColumns + ` FROM wave_task_assignments a
			WHERE a.execution_id = $1 AND a.wave_number = ` + wave + ` AND a.status = 'pending' AND a.kind = 'task'
			ORDER BY a.position, a.assignment_id LIMIT ` + limit + `)`
}

// The read-ahead's two texts, built once: the start of the wave for the leader alone, and with one
// more task for each other held assignment of the execution (at most heldReadLimit more).
var (
	prefetchNextOneSQL  = prefetchNextSQL("1")
	prefetchNextHeldSQL = prefetchNextSQL(`LEAST(1 + (` + heldCountSQL + `), ` + strconv.Itoa(1+heldReadLimit) + `)`)
)

// prefetchNext queues, after prefetch's reads in b, the start of the pending assignments of the
// wave of the hinted assignment, when the next-pending hint is on: its pending integration and
// its first pending task, for the leader's NextPending, and one more task for each other
// assignment of the execution an agent holds (prefetchHeld's, queued before it in b: that
// agent's fused completion may join the leader's transaction and lease the next one, ReadAhead
// then answering its reads from memory), or just one when held is nil.
func prefetchNext(b *pgx.Batch, execution, hint string, on bool, pre *prefetched, held map[string]*store.Assignment) *nextPending {
	if !on || hint == "" || pre == nil {
		return nil
	}
	n := &nextPending{pre: pre}
	query := prefetchNextOneSQL
	if held != nil {
		query = prefetchNextHeldSQL
	}
	b.Queue(query, execution, hint).Query(func(rows pgx.Rows) error {
		n.fetched = true
		for rows.Next() {
			a, err := scanAssignment(rows)
			if err != nil {
				return err
			}
			if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION {
				n.integ = a
			} else {
				n.tasks = append(n.tasks, a)
			}
		}
		asked := 1
		if held != nil {
			asked += len(held) // read before: its callback ran
		}
		n.full = len(n.tasks) >= asked
		return rows.Err()
	})
	return n
}

// known answers n once the batch was read and the hinted assignment found (whose wave n answers
// for), else nil.
func (n *nextPending) known() *nextPending {
	if n == nil || !n.fetched || n.pre == nil || n.pre.a == nil {
		return nil
	}
	n.wave, n.pre = n.pre.a.GetWaveNumber(), nil
	return n
}

// answer is NextPending(wave, kinds) from the read-ahead, and whether it can say. The answer is
// a copy: the caller may change it (n keeps its row until the transaction writes it).
func (n *nextPending) answer(wave int32, kinds []schedulerv1.AssignmentKind) (*store.Assignment, bool) {
	if n == nil || wave != n.wave {
		return nil, false
	}
	task := len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK)
	integration := len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION)
	switch {
	case integration && n.integ != nil:
		return cloneAssignment(n.integ), true
	case !task:
		return nil, true // no integration pending, and no task asked for
	case len(n.tasks) > 0:
		return cloneAssignment(n.tasks[0]), true
	case n.full:
		return nil, false // the tasks read were all taken: the next one was not read
	default:
		return nil, true // nothing pending in the wave
	}
}

// after is what remains known once the transaction puts assignment a: an assignment put to
// pending may come first, so nothing is; one of those read, now taken (leased, completed…), is
// no longer pending.
func (n *nextPending) after(a *store.Assignment) *nextPending {
	if n == nil || a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING {
		return nil
	}
	if n.integ != nil && n.integ.GetId() == a.GetId() {
		n.integ = nil
	}
	n.tasks = slices.DeleteFunc(n.tasks, func(p *store.Assignment) bool { return p.GetId() == a.GetId() })
	return n
}
