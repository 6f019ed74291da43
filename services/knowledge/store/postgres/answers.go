package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/converge-dev/converge/services/knowledge/store"
)

// answerColumns are the [columns] with the item's own hit count only, then its hits row.
const answerColumns = `id, type, content, file_pattern, pattern_specificity, tags, confidence, decay_rank,
	source_execution_id, source_task_id, source_agent_id, evidence, hit_count, confirm_count,
	refute_count, created_at, updated_at, last_confirmed_at, project, recorded_by, provisional, confirmed_by, ` + hitsRow

// Answer implements [store.Store.Answer]: no write (the hits are counted in memory and written by
// [Store.FlushHits], hits.go), and no read of an item held at the candidate's revision with its
// hits row known; the others are read by primary key in one statement, and held.
//
// A held item is exact but for the hits of others: its revision (confirmations plus
// refutations, in the candidates' index since migration 0006) changes with every change of the
// item, and this store's own hits are all counted. Another replica's hits reach it when this
// store's next flush of a hit on it returns the row (so within a flush interval of an answer), and
// hits that a replica of a release before migration 0005 counts in the item's own column when the
// item is next read.
func (s *Store) Answer(ctx context.Context, cands []store.Candidate) ([]store.Item, error) {
	if len(cands) == 0 {
		return []store.Item{}, nil
	}
	h := s.hits
	items := make([]store.Item, 0, len(cands))
	var read []int64
	h.mu.Lock()
	for _, c := range cands {
		h.held.answered(c.ID)
		e := h.held.get(c.ID)
		if e == nil || !e.hitsKnown || e.item.Revision() != c.Revision {
			read = append(read, c.ID)
			continue
		}
		h.held.touch(e)
		it := e.item
		it.Tags = slices.Clone(it.Tags) // the caller's own, as a read's would be
		h.pending[it.ID]++
		it.HitCount += e.hitsRow + h.pending[it.ID] + h.inflight[it.ID]
		items = append(items, it)
	}
	gen, flushing := h.gen, h.inflight != nil
	h.mu.Unlock()
	if len(read) == 0 {
		return items, nil
	}
	s.reads.Add(1)

	rows, err := s.Pool().Query(ctx, `SELECT `+answerColumns+` FROM knowledge_items WHERE id = ANY($1)`, read)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: answer: %w", err)
	}
	type answered struct {
		item    store.Item
		hitsRow int64
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (answered, error) {
		var a answered
		var err error
		a.item, err = scanItem(row, &a.hitsRow)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("knowledge store: answer: %w", err)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	// The hits row read is this store's flushed hits exactly if no flush of this store was
	// writing or ended while the statement ran.
	exact := !flushing && h.inflight == nil && h.gen == gen
	for _, a := range got {
		it := a.item
		h.hold(it, a.hitsRow, exact)
		h.pending[it.ID]++
		it.HitCount += a.hitsRow + h.pending[it.ID] + h.inflight[it.ID]
		items = append(items, it)
	}
	return items, nil
}

// Preload implements [store.Store.Preload]: one statement reads the items with most rows in
// knowledge_item_hits, as many as may be protected (held.go), and holds those not held yet as
// protected, after those held, the most hit first. The hits table has no index on its count
// (one would stop its per-second updates being HOT): the statement scans it (~35 MB at 1M items).
func (s *Store) Preload(ctx context.Context) error {
	h := s.hits
	h.mu.Lock()
	gen, flushing, limit := h.gen, h.inflight != nil, h.held.protectedLimit
	h.mu.Unlock()
	rows, err := s.Pool().Query(ctx, `SELECT `+answerColumns+` FROM
			(SELECT item_id AS hot_id, hit_count AS hot_hits FROM knowledge_item_hits
				ORDER BY hit_count DESC LIMIT $1) AS hot
			JOIN knowledge_items ON knowledge_items.id = hot.hot_id
		ORDER BY hot.hot_hits DESC, knowledge_items.id`, limit)
	if err != nil {
		return fmt.Errorf("knowledge store: preload: %w", err)
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (held, error) {
		var e held
		var err error
		e.item, err = scanItem(row, &e.hitsRow)
		return e, err
	})
	if err != nil {
		return fmt.Errorf("knowledge store: preload: %w", err)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	// As in Answer: the hits rows read are exact if no flush of this store wrote meanwhile.
	exact := !flushing && h.inflight == nil && h.gen == gen
	for _, e := range got {
		if h.held.get(e.item.ID) != nil {
			continue
		}
		if !h.held.addProtected(e.item.ID, &held{item: e.item, hitsRow: e.hitsRow, hitsKnown: exact}) {
			break
		}
	}
	return nil
}

// AnswerReads returns how many calls of [Store.Answer] read items from the table (the others
// answered every item from memory): what bench/knowledge splits the queries' times by.
func (s *Store) AnswerReads() int64 { return s.reads.Load() }

// hold holds it (its own hit count only) as answered now, unless a later revision is held;
// hitsRow is its hits row as read, which replaces the known one if exact. Called with h.mu held.
func (h *hits) hold(it store.Item, hitsRow int64, exact bool) {
	e := h.held.get(it.ID)
	if e != nil && e.item.Revision() > it.Revision() {
		h.held.touch(e)
		return
	}
	if e == nil {
		e = &held{item: it}
		if !h.held.add(it.ID, e) {
			return
		}
	} else {
		h.held.touch(e)
	}
	e.item = it
	if exact {
		e.hitsRow, e.hitsKnown = hitsRow, true
	}
}
