package postgres

import (
	"slices"

	"github.com/jackc/pgx/v5"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A completion that leases the agent's next assignment in its own transaction (CompleteTask with
// claim_next) asks NextPending of its wave after the completion's reads: one more round trip
// while the execution's row is locked. With store.NextPendingHint the lock's batch reads it too,
// and NextPending answers from that read as long as nothing the transaction wrote can have
// changed the answer: every writer of an execution's assignments holds its row lock, so only the
// transaction's own writes can. Those that can are an assignment put back to pending (or moved
// within the pending ones), a write of the assignment read ahead, and an insert; each drops the
// read-ahead answer and NextPending queries as before.

// nextPending is the first pending assignment of a wave (integration first, then tasks in
// position order), read with the lock: a is nil when none was pending.
type nextPending struct {
	fetched bool // the lock's batch answered
	a       *store.Assignment
	wave    int32       // the wave it answers for: the hinted assignment's
	pre     *prefetched // the hinted assignment, read in the same batch (its wave)
}

// prefetchNext queues, after prefetch's reads in b, NextPending(nil kinds) of the wave of the
// hinted assignment, when the next-pending hint is on.
func prefetchNext(b *pgx.Batch, execution, hint string, on bool, pre *prefetched) *nextPending {
	if !on || hint == "" || pre == nil {
		return nil
	}
	n := &nextPending{pre: pre}
	const wave = `(SELECT h.wave_number FROM wave_task_assignments h WHERE h.assignment_id = $2 AND h.execution_id = $1)`
	b.Queue(`SELECT `+assignmentColumns+` FROM wave_task_assignments a WHERE a.assignment_id = COALESCE(
		(SELECT i.assignment_id FROM wave_task_assignments i WHERE i.wave_id =
			(SELECT w.wave_id FROM parallel_execution_waves w WHERE w.execution_id = $1 AND w.wave_number = `+wave+`)
			AND i.kind = 'integration' AND i.status = 'pending'),
		(SELECT p.assignment_id FROM wave_task_assignments p
			WHERE p.execution_id = $1 AND p.wave_number = `+wave+` AND p.status = 'pending' AND p.kind = 'task'
			ORDER BY p.position, p.assignment_id LIMIT 1))`, execution, hint).Query(func(rows pgx.Rows) error {
		n.fetched = true
		if rows.Next() {
			a, err := scanAssignment(rows)
			if err != nil {
				return err
			}
			n.a = a
		}
		return nil
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

// answer is NextPending(wave, kinds) from the read-ahead, and whether it can say.
func (n *nextPending) answer(wave int32, kinds []schedulerv1.AssignmentKind) (*store.Assignment, bool) {
	if n == nil || wave != n.wave {
		return nil, false
	}
	task := len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK)
	integration := len(kinds) == 0 || slices.Contains(kinds, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION)
	switch {
	case n.a == nil || (!task && !integration):
		return nil, true // nothing pending in the wave, or nothing asked for
	case n.a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION:
		if integration {
			return n.a, true
		}
		return nil, false // the first pending task was not read
	case task:
		return n.a, true
	default:
		return nil, true // a task came first: no integration is pending
	}
}

// after is what remains known once the transaction puts assignment a.
func (n *nextPending) after(a *store.Assignment) *nextPending {
	if n == nil || a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING ||
		(n.a != nil && n.a.GetId() == a.GetId()) {
		return nil
	}
	return n
}
