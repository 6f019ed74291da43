package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/converge-dev/converge/services/scheduler/store"
)

// Group commit. Every claim, report and completion of an execution takes its row lock and holds
// it through its durable commit (on Postgres the WAL fsync), so the agents of one run queue on
// that row, one commit after the other. On this replica, the requests of one execution that
// arrive while a transaction of it is running wait for it, and the next transaction applies
// all of them (at most maxGroup): the row locked once, each request in its own savepoint (a
// request that fails — a stale fencing token, nothing to claim — is undone alone, the others
// stay), one commit, then every caller gets its own answer. A request is answered only once
// its transaction committed, so no answer is less durable than before; a crash before the
// commit loses the requests of that transaction, none of which was answered (the agents retry
// them: a completion carries its fencing token and a retried one gets the same answer, a report
// its report_seq). The order of one caller's requests is kept (a caller waits for each answer),
// and requests apply in their order of arrival. A request alone (no transaction of its
// execution running on this replica) runs as before, without a savepoint.

// maxGroup is the most requests one transaction applies: Postgres keeps up to 64
// subtransactions of a transaction in shared memory (beyond that, every snapshot of every
// session gets slower), and a savepoint that wrote is one.
const maxGroup = 32

// groupTimeout bounds a grouped transaction: it runs for callers that may have gone (a request
// already taken into a transaction is applied even if its caller cancelled), so it does not
// take their deadlines.
const groupTimeout = time.Minute

// groups are the execution queues of group commit on this replica.
type groups struct {
	mu  sync.Mutex
	m   map[string]*groupQueue // execution id → its queue, while a transaction of it runs (a queue in m is running)
	set bool                   // WithGroupCommit was given: on says; else the store decides
	on  bool
}

// GroupCommitter is implemented by a store whose commits are worth sharing: the Postgres store
// (a durable commit is a WAL fsync while the execution's row stays locked). SQLite's commit is
// cheap and its transactions already serialise on one lock: there `BenchmarkFanout/sqlite`
// (1,000 tasks, 3 alternated pairs) took 8–15 % more CPU per task grouped, so embedded runs
// ungrouped unless WithGroupCommit(true).
type GroupCommitter interface {
	// GroupCommits reports whether the Scheduler should group its requests' transactions.
	GroupCommits() bool
}

// grouping reports whether requests of one execution share transactions on s.
func (s *Server) grouping() bool {
	if s.groups.set {
		return s.groups.on
	}
	gc, ok := s.store.(GroupCommitter)
	return ok && gc.GroupCommits()
}

// groupQueue is one execution's queue, in groups.m while one of its transactions runs here.
type groupQueue struct {
	waiting []*groupReq
}

// groupReq is one request waiting for (or in) a grouped transaction.
type groupReq struct {
	ctx  context.Context
	fn   func(r *runner) error
	tl   *store.TaskList
	idx  map[string]int
	wake chan struct{} // (1) answered, or asked to lead
	// Under groups.mu.
	lead, done bool
	// Set by the transaction.
	err error
}

// WithGroupCommit turns group commit on or off (default: on when the store is a
// GroupCommitter that says so, the Postgres store): off, every claim, report and completion is
// its own transaction, as is a request alone.
func WithGroupCommit(on bool) Option { return func(s *Server) { s.groups.set, s.groups.on = true, on } }

// updateGrouped is update for the requests of agents (claims, reports, completions): a request
// that arrives while a transaction of the same execution runs on this replica waits and runs in
// the next transaction with the others that waited.
func (s *Server) updateGrouped(ctx context.Context, id string, fn func(r *runner) error) error {
	if !s.grouping() {
		return s.update(ctx, id, fn)
	}
	tl, idx, err := s.listOfExecution(ctx, id)
	if err != nil {
		return err
	}
	req := &groupReq{ctx: ctx, fn: fn, tl: tl, idx: idx, wake: make(chan struct{}, 1)}
	g := &s.groups
	g.mu.Lock()
	if g.m == nil {
		g.m = map[string]*groupQueue{}
	}
	q := g.m[id]
	if q == nil {
		// No transaction of id runs here: this request leads the next one.
		q = &groupQueue{}
		g.m[id] = q
		req.lead = true
	}
	q.waiting = append(q.waiting, req)
	lead := req.lead
	g.mu.Unlock()
	if !lead {
		select {
		case <-req.wake:
		case <-ctx.Done():
			g.mu.Lock()
			if i := slices.Index(q.waiting, req); i >= 0 && !req.lead {
				q.waiting = slices.Delete(q.waiting, i, i+1)
				g.mu.Unlock()
				return ctx.Err()
			}
			g.mu.Unlock()
			<-req.wake // in a transaction already (its answer), or asked to lead
		}
		g.mu.Lock()
		done := req.done
		g.mu.Unlock()
		if done {
			return req.err
		}
	}
	s.runGroup(id, q)
	return req.err
}

// runGroup runs the next transaction of q (whose leader is the caller, first in q.waiting),
// answers its requests, and hands the lead to the first request that arrived meanwhile. The
// requests are taken from the queue once the transaction holds the execution's lock, not
// before: those that arrive while it waits for the lock (the other agents' answers of the last
// commit come back together) are in it too.
func (s *Server) runGroup(id string, q *groupQueue) {
	g := &s.groups
	var batch []*groupReq
	take := func() []*groupReq {
		if batch == nil { // once: Postgres may run the transaction's function again
			g.mu.Lock()
			n := min(len(q.waiting), maxGroup)
			batch = slices.Clone(q.waiting[:n])
			q.waiting = slices.Delete(q.waiting, 0, n)
			g.mu.Unlock()
		}
		return batch
	}
	// Answered and handed on whatever happens: a request's function that panics (the leader's
	// handler recovers) must not leave the others waiting and the queue running for ever.
	panicked := true
	defer func() {
		if panicked {
			for _, r := range take() { // the transaction rolled back: nobody's change committed
				r.err = errGroupPanic
			}
		}
		s.answerGroup(id, q, batch)
	}()
	s.applyGroup(id, batch0(q, g), take)
	panicked = false
}

// errGroupPanic answers the requests of a grouped transaction in which a request panicked.
var errGroupPanic = errors.New("scheduler: a request of the same grouped transaction failed unexpectedly; retry")

// answerGroup answers batch's requests and hands q's lead to the first request that arrived
// meanwhile, or ends q.
func (s *Server) answerGroup(id string, q *groupQueue, batch []*groupReq) {
	g := &s.groups
	g.mu.Lock()
	for _, r := range batch {
		r.done = true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	if len(q.waiting) > 0 {
		next := q.waiting[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		delete(g.m, id)
	}
	g.mu.Unlock()
}

// batch0 is the leader of q's next transaction (first in q.waiting).
func batch0(q *groupQueue, g *groups) *groupReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	return q.waiting[0]
}

// applyGroup runs, in one transaction, the requests take returns once it holds the execution's
// lock (lead among them), and sets each one's err.
func (s *Server) applyGroup(id string, lead *groupReq, take func() []*groupReq) {
	// The leader's context carries its read-ahead hints (store.WithAssignmentHint); the
	// transaction is every request's, so no caller's cancellation ends it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(lead.ctx), groupTimeout)
	defer cancel()
	var out ran
	err := s.store.UpdateExecution(ctx, id, func(tx store.ExecTx) error {
		batch := take()
		out = ran{} // fn runs again when Postgres retries the transaction
		if len(batch) == 1 {
			// Alone: as an ungrouped request, no savepoint.
			r := batch[0]
			var err error
			out, err = s.run(tx, r.tl, r.idx, r.fn)
			r.err = err
			return err
		}
		applied, async := 0, true
		ra, _ := tx.(readAheader)
		for i, r := range batch {
			gt := &groupTx{ExecTx: tx}
			var due ran
			r.err = tx.Savepoint(func() error {
				if i > 0 && ra != nil {
					// The lock's batch read the leader's assignment; this one's reads go in one
					// round trip, after the writes of the requests before it.
					if err := ra.ReadAhead(store.AssignmentHint(r.ctx), store.NextPendingHint(r.ctx)); err != nil {
						return err
					}
				}
				var err error
				due, err = s.run(gt, r.tl, r.idx, r.fn)
				return err
			})
			if r.err == nil {
				applied++
				async = async && gt.async
				out = out.merge(due)
			}
		}
		if applied > 0 && async {
			tx.CommitAsync() // every applied request may lose its commit (progress.go)
		}
		return nil
	})
	if err != nil {
		for _, r := range take() { // the transaction failed (or never ran): it is everyone's answer
			r.err = err
		}
	}
	s.afterCommit(id, err, out)
}

// readAheader is an ExecTx that can read a request's hinted rows (store.WithAssignmentHint,
// store.WithNextPendingHint) in one round trip once the transaction runs: the Postgres store's.
// Only the leader's hints ride in the lock's batch (the others are taken once the lock is held),
// so each other request of a grouped transaction reads its assignment, its wave and its wave's
// next pending assignment this way instead of one round trip each.
type readAheader interface {
	ReadAhead(assignmentID string, nextPending bool) error
}

// groupTx is the ExecTx of one request of a grouped transaction: its CommitAsync is the
// request's wish, which the transaction honours only when every applied request made it.
type groupTx struct {
	store.ExecTx
	async bool
}

func (t *groupTx) CommitAsync() { t.async = true }
