package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-dev/converge/services/knowledge/store"
)

// hits are the hits [Store.Answer] counted and [Store.FlushHits] has not yet written: a query
// answers with one read and no write, and the counts reach the table in one statement per flush
// (the service flushes every second, and the store on Close).
//
// Every item this store returns carries its stored hit count plus the hits of this process not
// yet written (pending, and a batch being written), so a process reads its own hits at once. The
// count is eventually exact: a hit is written once, by the flush that took it, and a flush that
// fails puts its batch back. Two approximations, both documented on [store.Store.FlushHits]: a read
// whose snapshot was taken just after a flush committed but that overlays before the flush
// forgot its batch counts that batch twice (a window of one round trip, once per flush); and
// another replica's unwritten hits are not seen until it flushes.
type hits struct {
	mu       sync.Mutex
	pending  map[int64]int64
	inflight map[int64]int64
	// gen counts the flushes that ended (answers.go).
	gen uint64
	// held are the items Answer read, to answer them again without reading them (answers.go).
	held *heldSet
	// flushing serialises flushes, so that a flush returns only once the hits counted before it
	// are in the table.
	flushing sync.Mutex
}

func newHits() *hits { return &hits{pending: map[int64]int64{}, held: newHeldSet(maxHeld)} }

// overlay adds the unwritten hits to each item's count.
func (h *hits) overlay(items ...*store.Item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, it := range items {
		it.HitCount += h.pending[it.ID] + h.inflight[it.ID]
	}
}

// forget drops the unwritten hits of a deleted item, and the item if held.
func (h *hits) forget(id int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pending, id)
	h.held.remove(id)
}

// FlushHits implements [store.Store.FlushHits]: one upsert adds every pending count to the rows of
// knowledge_item_hits, never to the items' own rows (migration 0005 says why), in id order (other
// replicas' flushes take the same rows in the same order, so no flush deadlocks), without waiting
// for its WAL to reach the disk (hits are statistics). On failure the batch goes back to pending,
// to be written by the next flush.
func (s *Store) FlushHits(ctx context.Context) error {
	h := s.hits
	h.flushing.Lock()
	defer h.flushing.Unlock()
	h.mu.Lock()
	batch := h.pending
	if len(batch) == 0 {
		h.mu.Unlock()
		return nil
	}
	h.pending, h.inflight = make(map[int64]int64, len(batch)), batch
	h.mu.Unlock()

	ids := make([]int64, 0, len(batch))
	for id := range batch {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ns := make([]int64, len(ids))
	for i, id := range ids {
		ns[i] = batch[id]
	}
	rows, err := s.writeHits(ctx, ids, ns)

	h.mu.Lock()
	defer h.mu.Unlock()
	h.inflight = nil
	h.gen++
	if err != nil {
		for id, n := range batch {
			h.pending[id] += n
		}
		return fmt.Errorf("knowledge store: flush hits: %w", err)
	}
	// The rows as this flush left them: every hit of this store on them, and the hits of the
	// others written before.
	for id, n := range rows {
		if e := h.held.get(id); e != nil {
			e.hitsRow, e.hitsKnown = n, true
		}
	}
	return nil
}

// writeHits adds ns[i] to the hit count of item ids[i] (ids ascending), in one transaction, and
// returns the rows' counts after it.
func (s *Store) writeHits(ctx context.Context, ids, ns []int64) (map[int64]int64, error) {
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		return nil, err
	}
	// The hits of an item deleted since are dropped (EXISTS); one deleted while this runs fails
	// the foreign key check, and the next flush drops them.
	rows, err := tx.Query(ctx, `INSERT INTO knowledge_item_hits AS h (item_id, hit_count)
			SELECT v.id, v.n FROM unnest($1::bigint[], $2::bigint[]) AS v(id, n)
			WHERE EXISTS (SELECT FROM knowledge_items k WHERE k.id = v.id)
			ORDER BY v.id
		ON CONFLICT (item_id) DO UPDATE SET hit_count = h.hit_count + EXCLUDED.hit_count
		RETURNING item_id, hit_count`, ids, ns)
	if err != nil {
		return nil, err
	}
	counts := make(map[int64]int64, len(ids))
	var id, n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error { counts[id] = n; return nil }); err != nil {
		return nil, err
	}
	return counts, tx.Commit(ctx)
}

// closeFlushTimeout bounds the flush of Close.
const closeFlushTimeout = 10 * time.Second

// Close writes the pending hits, then releases the store's connections. It may be called more
// than once.
func (s *Store) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
	defer cancel()
	flushErr := s.FlushHits(ctx)
	if err := s.Postgres.Close(); err != nil {
		return err
	}
	return flushErr
}
