// Package postgres is the Postgres backend of the Knowledge store.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// Store is the Knowledge store on Postgres. The embedded handle provides Ping, Close,
// Migrate, MigrationStatus, Pool and DB.
type Store struct {
	*database.Postgres
	hits *hits
	// reads counts the calls of Answer that read the table (answers.go).
	reads atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New returns a Knowledge store on the Postgres database at url. The pool connects lazily,
// so New succeeds while Postgres is down (Ping tells when it is up) unless
// [database.WithMigrate] asks it to apply pending migrations first. See
// [database.NewPostgres] for the other options.
func New(ctx context.Context, url string, opts ...database.Option) (*Store, error) {
	db, err := database.NewPostgres(ctx, url, store.Service, store.Migrations(database.DialectPostgres), opts...)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: %w", err)
	}
	return &Store{Postgres: db, hits: newHits()}, nil
}

// columns are the columns of an [store.Item], in the order scanItem reads them, in a statement on
// knowledge_items unaliased (a SELECT or a RETURNING). The hit count is the item's own column
// plus its row of knowledge_item_hits (migration 0005).
const columns = `id, type, content, file_pattern, pattern_specificity, tags, confidence, decay_rank,
	source_execution_id, source_task_id, source_agent_id, evidence, hit_count + ` + hitsRow + `, confirm_count,
	refute_count, created_at, updated_at, last_confirmed_at, project, recorded_by, provisional, confirmed_by`

// hitsRow is an item's count in knowledge_item_hits in a statement on knowledge_items unaliased.
const hitsRow = `COALESCE((SELECT h.hit_count FROM knowledge_item_hits h WHERE h.item_id = knowledge_items.id), 0)`

// candidateColumns are the columns of a [store.Candidate], all in knowledge_items_match_idx
// (the counts of the revision since migration 0006; the pattern as its bucket prefix and the rest
// after it since migration 0007), in the order candidates reads them.
const candidateColumns = `id, pattern_literal_prefix, pattern_rest, confidence, decay_rank, pattern_specificity,
	last_confirmed_at, confirm_count + refute_count`

// rankOrder is the rank order of [store.Cursor].
const rankOrder = `decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC`

// Record implements [store.Store.Record]: an upsert whose conflict branch only counts the
// confirmation, which locks the twin, then the confirmation itself in the same transaction.
func (s *Store) Record(ctx context.Context, it store.NewItem, now time.Time) (store.Item, bool, error) {
	r := store.NewRow(it, now)
	tags, err := json.Marshal(r.Tags)
	if err != nil {
		return store.Item{}, false, fmt.Errorf("knowledge store: tags: %w", err)
	}
	var (
		item    store.Item
		created bool
	)
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `INSERT INTO knowledge_items (type, content, content_normalized, content_hash,
				file_pattern, pattern_extension, pattern_literal_prefix, pattern_specificity, tags, confidence,
				decay_rank, source_execution_id, source_task_id, source_agent_id, evidence,
				created_at, updated_at, last_confirmed_at, project, recorded_by, provisional)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $16, $16, $17, $18, $19)
			ON CONFLICT (type, file_pattern, content_hash)
				DO UPDATE SET confirm_count = knowledge_items.confirm_count + 1
			RETURNING `+columns,
			string(r.Type), r.Content, r.ContentNormalized, r.ContentHash,
			r.FilePattern, r.Bucket.Extension, r.Bucket.Prefix, r.Specificity, string(tags), r.Confidence,
			r.Rank, null(r.Source.ExecutionID), null(r.Source.TaskID), null(r.Source.AgentID), r.Evidence,
			r.Now, r.Project, r.RecordedBy, r.Provisional)
		var err error
		if item, err = scanItem(row); err != nil {
			return err
		}
		// A new row has never been confirmed; the twin's count was just raised.
		if created = item.ConfirmCount == 0; created {
			return nil
		}
		item, err = update(ctx, tx, store.Confirmed(item, r.Evidence, r.RecordedBy, now))
		return err
	})
	if err != nil {
		return store.Item{}, false, fmt.Errorf("knowledge store: record: %w", err)
	}
	s.hits.overlay(&item)
	return item, created, nil
}

// Get implements [store.Store.Get].
func (s *Store) Get(ctx context.Context, id int64) (store.Item, error) {
	item, err := scanItem(s.Pool().QueryRow(ctx, `SELECT `+columns+` FROM knowledge_items WHERE id = $1`, id))
	if err != nil {
		return store.Item{}, notFound(err, "get")
	}
	s.hits.overlay(&item)
	return item, nil
}

// List implements [store.Store.List].
func (s *Store) List(ctx context.Context, f store.ListFilter) ([]store.Item, error) {
	var a args
	where := []string{"TRUE"}
	if f.Type != "" {
		where = append(where, "type = "+a.add(string(f.Type)))
	}
	if f.FilePattern != "" {
		where = append(where, "file_pattern = "+a.add(f.FilePattern))
	}
	if f.Project != nil {
		where = append(where, "project = "+a.add(*f.Project))
	}
	if f.BeforeID > 0 {
		where = append(where, "id < "+a.add(f.BeforeID))
	}
	q := `SELECT ` + columns + ` FROM knowledge_items WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY id DESC LIMIT ` + a.add(f.Limit)
	items, err := s.query(ctx, "list", q, a...)
	for i := range items {
		s.hits.overlay(&items[i])
	}
	return items, err
}

// Candidates implements [store.Store.Candidates]. For a path it reads each of the path's buckets
// best first through knowledge_items_match_idx (a LATERAL subquery per bucket, each stopping at
// Limit rows; without tag or text filters an index-only scan) and merges them.
func (s *Store) Candidates(ctx context.Context, q store.CandidateQuery) ([]store.Candidate, error) {
	var a args
	where := []string{"project = " + a.add(q.Project)}
	if q.MinRank != math.MinInt64 {
		where = append(where, "decay_rank >= "+a.add(q.MinRank))
	}
	if c := q.After; c != nil {
		where = append(where, fmt.Sprintf("(decay_rank, pattern_specificity, last_confirmed_at, id) < (%s, %s, %s, %s)",
			a.add(c.Rank), a.add(c.Specificity), a.add(c.LastConfirmedAt), a.add(c.ID)))
	}
	if len(q.Types) > 0 {
		types := make([]string, len(q.Types))
		for i, t := range q.Types {
			types[i] = string(t)
		}
		where = append(where, "type = ANY("+a.add(types)+"::text[])")
	}
	if len(q.Tags) > 0 {
		tags, err := json.Marshal(q.Tags)
		if err != nil {
			return nil, fmt.Errorf("knowledge store: tags: %w", err)
		}
		where = append(where, "tags @> "+a.add(string(tags))+"::jsonb")
	}
	if q.Text != "" {
		where = append(where, "search @@ plainto_tsquery('english', "+a.add(q.Text)+")")
	}
	limit := a.add(q.Limit)

	if q.Path == "" {
		if q.Pattern != "" {
			where = append(where, "file_pattern = "+a.add(q.Pattern))
		}
		sql := `SELECT ` + candidateColumns + ` FROM knowledge_items WHERE ` + strings.Join(where, " AND ") +
			` ORDER BY ` + rankOrder + ` LIMIT ` + limit
		return s.candidates(ctx, sql, q.Limit, a...)
	}
	buckets := store.PathBuckets(q.Path)
	prefixes, exts := make([]string, len(buckets)), make([]string, len(buckets))
	for i, b := range buckets {
		prefixes[i], exts[i] = b.Prefix, b.Extension
	}
	cond := append([]string{"pattern_literal_prefix = b.prefix", "pattern_extension = b.ext"}, where...)
	sql := `SELECT k.* FROM unnest(` + a.add(prefixes) + `::text[], ` + a.add(exts) + `::text[]) AS b(prefix, ext)
		CROSS JOIN LATERAL (
			SELECT ` + candidateColumns + ` FROM knowledge_items WHERE ` + strings.Join(cond, " AND ") + `
			ORDER BY ` + rankOrder + ` LIMIT ` + limit + `
		) k
		ORDER BY ` + rankOrder + ` LIMIT ` + limit
	return s.candidates(ctx, sql, q.Limit, a...)
}

// candidates runs a query returning candidates.
func (s *Store) candidates(ctx context.Context, sql string, limit int, args ...any) ([]store.Candidate, error) {
	rows, err := s.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: candidates: %w", err)
	}
	defer rows.Close()
	// One set of scan targets for every row, not one per row (each row's would escape to the heap
	// through Scan's arguments), and nullable columns as pgtype values, not pointers pgx would
	// allocate: a query reads up to its limit and a quarter of candidates (bench/PROFILE.md, p17p4).
	var (
		c             store.Candidate
		prefix        string
		rest          pgtype.Text
		lastConfirmed pgtype.Timestamptz
		cands         = make([]store.Candidate, 0, min(limit, 64))
	)
	dest := []any{&c.ID, &prefix, &rest, &c.Confidence, &c.Rank, &c.Specificity, &lastConfirmed, &c.Revision}
	for rows.Next() {
		c = store.Candidate{}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("knowledge store: candidates: %w", err)
		}
		if lastConfirmed.Valid {
			c.LastConfirmedAt = lastConfirmed.Time.UTC()
		}
		var restp *string
		if rest.Valid {
			restp = &rest.String
		}
		var err error
		if c.FilePattern, err = store.JoinPattern(prefix, restp); err != nil {
			return nil, fmt.Errorf("knowledge store: candidates: %w", err)
		}
		cands = append(cands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("knowledge store: candidates: %w", err)
	}
	return cands, nil
}

// Confirm implements [store.Store.Confirm].
func (s *Store) Confirm(ctx context.Context, id int64, evidence, by string, now time.Time) (store.Item, error) {
	return s.move(ctx, "confirm", `confirm_count = confirm_count + 1`, id, func(it store.Item) store.Item {
		return store.Confirmed(it, evidence, by, now)
	})
}

// Refute implements [store.Store.Refute].
func (s *Store) Refute(ctx context.Context, id int64, reason string, now time.Time) (store.Item, error) {
	return s.move(ctx, "refute", `refute_count = refute_count + 1`, id, func(it store.Item) store.Item {
		return store.Refuted(it, reason, now)
	})
}

// move counts a confirmation or refutation (count, which also locks the row), then writes what
// apply makes of the item, in one transaction.
func (s *Store) move(ctx context.Context, op, count string, id int64, apply func(store.Item) store.Item) (store.Item, error) {
	var item store.Item
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		var err error
		item, err = scanItem(tx.QueryRow(ctx, `UPDATE knowledge_items SET `+count+` WHERE id = $1 RETURNING `+columns, id))
		if err != nil {
			return err
		}
		item, err = update(ctx, tx, apply(item))
		return err
	})
	if err != nil {
		return store.Item{}, notFound(err, op)
	}
	s.hits.overlay(&item)
	return item, nil
}

// update writes the fields a confirmation or refutation changes.
func update(ctx context.Context, tx pgx.Tx, it store.Item) (store.Item, error) {
	return scanItem(tx.QueryRow(ctx, `UPDATE knowledge_items
		SET confidence = $2, decay_rank = $3, last_confirmed_at = $4, updated_at = $5, evidence = $6,
			provisional = $7, confirmed_by = $8
		WHERE id = $1 RETURNING `+columns,
		it.ID, it.Confidence, it.Rank, it.LastConfirmedAt, it.UpdatedAt, it.Evidence, it.Provisional, it.ConfirmedBy))
}

// Delete implements [store.Store.Delete].
func (s *Store) Delete(ctx context.Context, id int64) error {
	tag, err := s.Pool().Exec(ctx, `DELETE FROM knowledge_items WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("knowledge store: delete: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	s.hits.forget(id)
	return nil
}

// query runs a query returning items.
func (s *Store) query(ctx context.Context, op, sql string, args ...any) ([]store.Item, error) {
	rows, err := s.Pool().Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: %s: %w", op, err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Item, error) { return scanItem(row) })
	if err != nil {
		return nil, fmt.Errorf("knowledge store: %s: %w", op, err)
	}
	return items, nil
}

// scanItem reads the [columns] of one row, then into more, the columns after them.
func scanItem(row pgx.Row, more ...any) (store.Item, error) {
	var (
		it                      store.Item
		typ                     string
		execution, task, agent  pgtype.Text // not *string: pgx would allocate each pointer
		lastConfirmed           pgtype.Timestamptz
		createdAt, updatedAt    time.Time
		confirmCount, refuteCnt int32
	)
	err := row.Scan(append([]any{&it.ID, &typ, &it.Content, &it.FilePattern, &it.Specificity, &it.Tags, &it.Confidence,
		&it.Rank, &execution, &task, &agent, &it.Evidence, &it.HitCount, &confirmCount, &refuteCnt,
		&createdAt, &updatedAt, &lastConfirmed, &it.Project, &it.RecordedBy, &it.Provisional, &it.ConfirmedBy}, more...)...)
	if err != nil {
		return store.Item{}, err
	}
	it.Type = store.Type(typ)
	it.Source = store.Source{ExecutionID: execution.String, TaskID: task.String, AgentID: agent.String}
	it.ConfirmCount, it.RefuteCount = int64(confirmCount), int64(refuteCnt)
	it.CreatedAt, it.UpdatedAt = createdAt.UTC(), updatedAt.UTC()
	it.LastConfirmedAt = it.CreatedAt
	if lastConfirmed.Valid {
		it.LastConfirmedAt = lastConfirmed.Time.UTC()
	}
	if it.Tags == nil {
		it.Tags = []string{}
	}
	return it, nil
}

// notFound turns "no row" into [store.ErrNotFound] and wraps other errors.
func notFound(err error, op string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return fmt.Errorf("knowledge store: %s: %w", op, err)
}

// args collects the arguments of a query built piece by piece.
type args []any

// add appends v and returns its placeholder.
func (a *args) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// null stores "" as NULL.
func null(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
