package postgres

import (
	"fmt"
	"maps"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A grouped transaction's requests (the Scheduler's group commit) each run in a savepoint, and
// each one after the first reads its hinted rows in one round trip (ReadAhead).

// Savepoint runs fn after a SAVEPOINT, and undoes fn's changes when it fails. The SAVEPOINT is
// deferred like an update of a known row (it cannot fail for a reason fn could act on), so it
// costs no round trip of its own; a fn that fails before any of its statements was sent (a stale
// token found in a row already read) is undone by dropping what it queued, and only a fn that
// failed after a round trip sends ROLLBACK TO SAVEPOINT (with the next statement, or the
// commit). No RELEASE: a savepoint left open costs nothing until the commit (a grouped
// transaction's next request's savepoint nests in it; at most maxGroup of them), and the names
// are distinct, so a ROLLBACK TO still names the right one.
func (t *execTx) Savepoint(fn func() error) error {
	if err := t.Check(); err != nil {
		return err
	}
	t.savepoints++
	name := fmt.Sprintf("converge_group_%d", t.savepoints)
	saved := t.save()
	m := t.p.mark()
	floor := t.floor
	t.floor = m
	defer func() { t.floor = floor }()
	t.p.later(stmt{"savepoint", "SAVEPOINT " + name, nil}, nil)
	err := fn()
	if err == nil {
		return nil
	}
	t.restore(saved)
	if !t.p.dropSince(m) {
		t.p.later(stmt{"rollback to savepoint", "ROLLBACK TO SAVEPOINT " + name, nil}, nil)
	}
	return err
}

// ReadAhead reads assignment id, its wave and, when next is set, its wave's next pending
// assignment in one round trip (with the writes still deferred, which they therefore see), for
// the reads that follow, as the lock's batch does for the transaction's first request
// (store.AssignmentHint, store.NextPendingHint). A grouped transaction calls it for each request
// after the first, whose hints the lock's batch could not know: the request's three reads are
// then one round trip instead of three.
func (t *execTx) ReadAhead(id string, next bool) error {
	if err := t.Check(); err != nil {
		return err
	}
	if id == "" {
		return nil
	}
	if t.readAheadFromMemory(id, next) {
		return nil
	}
	b := &pgx.Batch{}
	pre := prefetch(b, t.ID(), id)
	n := prefetchNext(b, t.ID(), id, next, pre, nil)
	if err := t.p.send(t.ctx, b); err != nil {
		return fmt.Errorf("scheduler store: read ahead assignment %q: %w", id, err)
	}
	t.pre, t.next = pre, n.known()
	if pre.w != nil {
		t.knowWave(pre.w)
	}
	return nil
}

// txSaved is what Savepoint restores of an execTx when its fn fails.
type txSaved struct {
	exec                                     *schedulerv1.Execution
	logRows, logs                            int
	execRow                                  *store.ExecutionRow
	seqDirty                                 bool
	knownAssignments, knownWaves, knownTasks map[string]bool
}

func (t *execTx) save() txSaved {
	return txSaved{exec: proto.CloneOf(t.Exec), logRows: len(t.logRows), logs: len(t.logs), execRow: t.execRow, seqDirty: t.seqDirty,
		knownAssignments: maps.Clone(t.knownAssignments), knownWaves: maps.Clone(t.knownWaves),
		knownTasks: maps.Clone(t.knownTasks)}
}

func (t *execTx) restore(s txSaved) {
	t.Exec, t.logRows, t.execRow, t.seqDirty = s.exec, t.logRows[:s.logRows], s.execRow, s.seqDirty
	t.logs = t.logs[:s.logs]
	t.knownAssignments, t.knownWaves, t.knownTasks = s.knownAssignments, s.knownWaves, s.knownTasks
	// The reads made with the lock may have been used or changed by fn: read again.
	t.pre, t.next = nil, nil
	t.held, t.waves = nil, nil
}
