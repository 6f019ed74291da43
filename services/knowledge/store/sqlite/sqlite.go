// Package sqlite is the embedded SQLite backend of the Knowledge store.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// Store is the Knowledge store on SQLite. The embedded handle provides Ping, Close, Migrate,
// MigrationStatus and DB.
type Store struct {
	*database.SQLite
}

var _ store.Store = (*Store)(nil)

// New returns a Knowledge store on the SQLite database at path, created if missing;
// ":memory:" gives a private in-memory database (see [database.OpenSQLite]). Several services
// may share one file: each keeps to its own tables and version table. With
// [database.WithMigrate] pending migrations are applied first.
func New(ctx context.Context, path string, opts ...database.Option) (*Store, error) {
	db, err := database.NewSQLite(ctx, path, store.Service, store.Migrations(database.DialectSQLite), opts...)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: %w", err)
	}
	return &Store{SQLite: db}, nil
}

// columns are the columns of an [store.Item], in the order scanItem reads them, in a statement on
// knowledge_items unaliased (a SELECT or a RETURNING). The hit count is the item's own column
// plus its row of knowledge_item_hits (migration 0005).
const columns = `id, type, content, file_pattern, pattern_specificity, tags, confidence, decay_rank,
	source_execution_id, source_task_id, source_agent_id, evidence, ` + hitCount + `, confirm_count, refute_count,
	created_at, updated_at, last_confirmed_at, project, recorded_by, provisional, confirmed_by`

// hitCount is an item's hit count in a statement on knowledge_items unaliased.
const hitCount = `hit_count + COALESCE((SELECT h.hit_count FROM knowledge_item_hits h
		WHERE h.item_id = knowledge_items.id), 0)`

// candidateColumns are the columns of a [store.Candidate], all in knowledge_items_match_idx, in the
// order candidates reads them.
const candidateColumns = `id, file_pattern, confidence, decay_rank, pattern_specificity, last_confirmed_at,
	confirm_count + refute_count`

// rankOrder is the rank order of [store.Cursor].
const rankOrder = `decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC`

// Record implements [store.Store.Record]: an upsert whose conflict branch only counts the
// confirmation, then the confirmation itself, in one transaction (which holds SQLite's write
// lock from its start).
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
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		at := database.FormatSQLiteTime(r.Now)
		row := tx.QueryRowContext(ctx, `INSERT INTO knowledge_items (type, content, content_normalized, content_hash,
				file_pattern, pattern_extension, pattern_literal_prefix, pattern_specificity, tags, confidence,
				decay_rank, source_execution_id, source_task_id, source_agent_id, evidence,
				created_at, updated_at, last_confirmed_at, project, recorded_by, provisional)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (type, file_pattern, content_hash) DO UPDATE SET confirm_count = confirm_count + 1
			RETURNING `+columns,
			string(r.Type), r.Content, r.ContentNormalized, r.ContentHash,
			r.FilePattern, r.Bucket.Extension, r.Bucket.Prefix, r.Specificity, string(tags), r.Confidence,
			r.Rank, null(r.Source.ExecutionID), null(r.Source.TaskID), null(r.Source.AgentID), r.Evidence,
			at, at, at, r.Project, r.RecordedBy, r.Provisional)
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
	return item, created, nil
}

// Get implements [store.Store.Get].
func (s *Store) Get(ctx context.Context, id int64) (store.Item, error) {
	item, err := scanItem(s.DB().QueryRowContext(ctx, `SELECT `+columns+` FROM knowledge_items WHERE id = ?`, id))
	if err != nil {
		return store.Item{}, notFound(err, "get")
	}
	return item, nil
}

// List implements [store.Store.List].
func (s *Store) List(ctx context.Context, f store.ListFilter) ([]store.Item, error) {
	var args []any
	where := []string{"TRUE"}
	if f.Type != "" {
		where, args = append(where, "type = ?"), append(args, string(f.Type))
	}
	if f.FilePattern != "" {
		where, args = append(where, "file_pattern = ?"), append(args, f.FilePattern)
	}
	if f.Project != nil {
		where, args = append(where, "project = ?"), append(args, *f.Project)
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	q := `SELECT ` + columns + ` FROM knowledge_items WHERE ` + strings.Join(where, " AND ") + ` ORDER BY id DESC LIMIT ?`
	return s.query(ctx, "list", q, append(args, f.Limit)...)
}

// Candidates implements [store.Store.Candidates]. For a path it reads each of the path's buckets
// best first through knowledge_items_match_idx (one subquery per bucket, each stopping at Limit
// rows; without tag or text filters from the index alone) and merges them.
func (s *Store) Candidates(ctx context.Context, q store.CandidateQuery) ([]store.Candidate, error) {
	where, args := []string{"project = ?"}, []any{q.Project}
	if q.MinRank != math.MinInt64 {
		where, args = append(where, "decay_rank >= ?"), append(args, q.MinRank)
	}
	if c := q.After; c != nil {
		where = append(where, "(decay_rank, pattern_specificity, last_confirmed_at, id) < (?, ?, ?, ?)")
		args = append(args, c.Rank, c.Specificity, database.FormatSQLiteTime(c.LastConfirmedAt), c.ID)
	}
	if len(q.Types) > 0 {
		// The types as SQL literals, not `type IN (?, ?)`: with them bound SQLite re-prepared the
		// statement on every call (0.3–0.4 ms a query, issue 17, branch p17local2:
		// BenchmarkCandidatesMiss); a JSON array through json_each(?) did too.
		where = append(where, "type IN ("+typesSQL(q.Types)+")")
	}
	for _, tag := range q.Tags {
		where, args = append(where, "EXISTS (SELECT 1 FROM json_each(knowledge_items.tags) WHERE value = ?)"), append(args, tag)
	}
	if q.Text != "" {
		// FTSQuery is "" for text without a word: match nothing, as Postgres does.
		where = append(where, "id IN (SELECT rowid FROM knowledge_items_fts WHERE knowledge_items_fts MATCH ?)")
		args = append(args, orDefault(store.FTSQuery(q.Text), `""`))
	}

	if q.Path == "" {
		if q.Pattern != "" {
			where, args = append(where, "file_pattern = ?"), append(args, q.Pattern)
		}
		sql := `SELECT ` + candidateColumns + ` FROM knowledge_items WHERE ` + strings.Join(where, " AND ") +
			` ORDER BY ` + rankOrder + ` LIMIT ?`
		return s.candidates(ctx, sql, append(args, q.Limit)...)
	}

	cond := strings.Join(append([]string{"pattern_literal_prefix = ?", "pattern_extension = ?"}, where...), " AND ")
	buckets := store.PathBuckets(q.Path)
	selects := make([]string, len(buckets))
	var all []any
	for i, b := range buckets {
		selects[i] = `SELECT * FROM (SELECT ` + candidateColumns + ` FROM knowledge_items WHERE ` + cond +
			` ORDER BY ` + rankOrder + ` LIMIT ?)`
		all = append(append(append(all, b.Prefix, b.Extension), args...), q.Limit)
	}
	sql := strings.Join(selects, "\nUNION ALL\n") + `
		ORDER BY ` + rankOrder + ` LIMIT ?`
	return s.candidates(ctx, sql, append(all, q.Limit)...)
}

// candidates runs a query returning candidates.
func (s *Store) candidates(ctx context.Context, q string, args ...any) ([]store.Candidate, error) {
	rows, err := s.DB().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: candidates: %w", err)
	}
	defer rows.Close()
	cands := []store.Candidate{}
	for rows.Next() {
		var (
			c         store.Candidate
			confirmed sql.NullString
		)
		if err := rows.Scan(&c.ID, &c.FilePattern, &c.Confidence, &c.Rank, &c.Specificity, &confirmed, &c.Revision); err != nil {
			return nil, fmt.Errorf("knowledge store: candidates: %w", err)
		}
		if confirmed.Valid {
			if c.LastConfirmedAt, err = database.ParseSQLiteTime(confirmed.String); err != nil {
				return nil, fmt.Errorf("knowledge store: candidates: %w", err)
			}
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

// move counts a confirmation or refutation (count), then writes what apply makes of the item,
// in one transaction.
func (s *Store) move(ctx context.Context, op, count string, id int64, apply func(store.Item) store.Item) (store.Item, error) {
	var item store.Item
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		item, err = scanItem(tx.QueryRowContext(ctx, `UPDATE knowledge_items SET `+count+` WHERE id = ? RETURNING `+columns, id))
		if err != nil {
			return err
		}
		item, err = update(ctx, tx, apply(item))
		return err
	})
	if err != nil {
		return store.Item{}, notFound(err, op)
	}
	return item, nil
}

// update writes the fields a confirmation or refutation changes.
func update(ctx context.Context, tx *sql.Tx, it store.Item) (store.Item, error) {
	return scanItem(tx.QueryRowContext(ctx, `UPDATE knowledge_items
		SET confidence = ?, decay_rank = ?, last_confirmed_at = ?, updated_at = ?, evidence = ?, provisional = ?,
			confirmed_by = ?
		WHERE id = ? RETURNING `+columns,
		it.Confidence, it.Rank, database.FormatSQLiteTime(it.LastConfirmedAt), database.FormatSQLiteTime(it.UpdatedAt),
		it.Evidence, it.Provisional, it.ConfirmedBy, it.ID))
}

// Delete implements [store.Store.Delete].
func (s *Store) Delete(ctx context.Context, id int64) error {
	res, err := s.DB().ExecContext(ctx, `DELETE FROM knowledge_items WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("knowledge store: delete: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("knowledge store: delete: %w", err)
	} else if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// Answer implements [store.Store.Answer]: the hits are upserted into the narrow rows of
// knowledge_item_hits (never the items' own), then the items read, in one transaction. It reads
// every item; it holds none in memory.
func (s *Store) Answer(ctx context.Context, cands []store.Candidate) ([]store.Item, error) {
	if len(cands) == 0 {
		return []store.Item{}, nil
	}
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.ID
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: answer: %w", err)
	}
	var items []store.Item
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO knowledge_item_hits (item_id, hit_count)
				SELECT value, 1 FROM json_each(?) WHERE value IN (SELECT id FROM knowledge_items)
			ON CONFLICT (item_id) DO UPDATE SET hit_count = hit_count + 1`, string(list)); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+columns+` FROM knowledge_items
			WHERE id IN (SELECT value FROM json_each(?))`, string(list))
		if err != nil {
			return err
		}
		items, err = scanItems(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("knowledge store: answer: %w", err)
	}
	return items, nil
}

// FlushHits implements [store.Store.FlushHits]: Answer writes its hits as it counts them (one
// local write), so there is nothing to flush.
func (s *Store) FlushHits(context.Context) error { return nil }

// Preload implements [store.Store.Preload]: Answer reads every item, so there is nothing to hold.
func (s *Store) Preload(context.Context) error { return nil }

// inTx runs fn in a transaction (BEGIN IMMEDIATE: see [database.OpenSQLite]), committed if fn
// succeeds.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// query runs a query returning items.
func (s *Store) query(ctx context.Context, op, q string, args ...any) ([]store.Item, error) {
	rows, err := s.DB().QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: %s: %w", op, err)
	}
	items, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("knowledge store: %s: %w", op, err)
	}
	return items, nil
}

// scanItems reads the [columns] of every row, and closes rows.
func scanItems(rows *sql.Rows) ([]store.Item, error) {
	defer rows.Close()
	items := []store.Item{}
	for rows.Next() {
		it, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, rows.Err()
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanItem reads the [columns] of one row.
func scanItem(row scanner) (store.Item, error) {
	var (
		it                                store.Item
		typ, tags, createdAt, updatedAt   string
		execution, task, agent, confirmed sql.NullString
	)
	err := row.Scan(&it.ID, &typ, &it.Content, &it.FilePattern, &it.Specificity, &tags, &it.Confidence, &it.Rank,
		&execution, &task, &agent, &it.Evidence, &it.HitCount, &it.ConfirmCount, &it.RefuteCount,
		&createdAt, &updatedAt, &confirmed, &it.Project, &it.RecordedBy, &it.Provisional, &it.ConfirmedBy)
	if err != nil {
		return store.Item{}, err
	}
	it.Type = store.Type(typ)
	it.Source = store.Source{ExecutionID: execution.String, TaskID: task.String, AgentID: agent.String}
	if err := json.Unmarshal([]byte(tags), &it.Tags); err != nil {
		return store.Item{}, fmt.Errorf("tags of item %d: %w", it.ID, err)
	}
	if it.Tags == nil {
		it.Tags = []string{}
	}
	if it.CreatedAt, err = database.ParseSQLiteTime(createdAt); err != nil {
		return store.Item{}, err
	}
	if it.UpdatedAt, err = database.ParseSQLiteTime(updatedAt); err != nil {
		return store.Item{}, err
	}
	it.LastConfirmedAt = it.CreatedAt
	if confirmed.Valid {
		if it.LastConfirmedAt, err = database.ParseSQLiteTime(confirmed.String); err != nil {
			return store.Item{}, err
		}
	}
	return it, nil
}

// notFound turns "no row" into [store.ErrNotFound] and wraps other errors.
func notFound(err error, op string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	return fmt.Errorf("knowledge store: %s: %w", op, err)
}

// null stores "" as NULL.
func null(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// orDefault returns s, or def when s is "".
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// typesSQL is types as a list of SQL string literals.
func typesSQL(types []store.Type) string {
	lits := make([]string, len(types))
	for i, t := range types {
		lits[i] = "'" + strings.ReplaceAll(string(t), "'", "''") + "'"
	}
	return strings.Join(lits, ", ")
}
