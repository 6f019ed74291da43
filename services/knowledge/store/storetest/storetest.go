// Package storetest is the conformance suite of the Knowledge store: every backend of
// store.Store runs it (see ../conformance_test.go) and must pass it unchanged.
package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// Run runs the suite against the stores newStore returns, each new, empty and migrated: the
// schema (tables, indexes, constraints, full-text index), then the behaviour of every method.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	harness.RunSchema(t, newStore, harness.SchemaSpec{
		Tables:  schema,
		Indexes: indexes,
		// Full text search takes a different form in each dialect; the Postgres match index holds a
		// pattern's rest after its bucket prefix, a generated column (migration 0007).
		Adjust: func(d database.Dialect, tables harness.Schema, idx map[string]harness.Index) {
			switch d {
			case database.DialectPostgres:
				tables["knowledge_items"] = append(slices.Clone(tables["knowledge_items"]), "search", "pattern_rest")
				idx["knowledge_items_search_idx"] = harness.Index{Table: "knowledge_items"}
			case database.DialectSQLite:
				tables["knowledge_items_fts"] = []string{"content", "tags"}
			}
		},
		Cases: constraintCases,
		SQLiteCases: []harness.Case{{
			Name:  "timestamp not in canonical form",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE knowledge_items SET last_confirmed_at = '2026-01-16T10:00:00Z'`),
			Want:  database.CheckViolation,
		}},
	})
	t.Run("FullTextSearch", func(t *testing.T) {
		t.Parallel()
		testFullTextSearch(t, harness.RequireSQL(t, newStore(t)))
	})
	runItems(t, newStore)
	runScope(t, newStore)
	runPreload(t, newStore)
}

// indexes are the Knowledge's CREATE INDEX indexes, without the full-text search ones.
var indexes = map[string]harness.Index{
	"knowledge_items_match_idx":        {Table: "knowledge_items"},
	"knowledge_items_project_rank_idx": {Table: "knowledge_items"},
	"knowledge_items_rank_idx":         {Table: "knowledge_items"},
	"knowledge_items_pattern_idx":      {Table: "knowledge_items"},
	"knowledge_items_type_idx":         {Table: "knowledge_items"},
}

// schema is every Knowledge table with exactly its columns, without the full-text search parts.
var schema = harness.Schema{
	"knowledge_items": {
		"id", "type", "content", "content_normalized", "content_hash", "file_pattern",
		"pattern_extension", "pattern_literal_prefix", "pattern_specificity", "tags", "confidence",
		"source_execution_id", "source_task_id", "source_agent_id", "evidence", "hit_count",
		"confirm_count", "refute_count", "created_at", "updated_at", "last_confirmed_at", "decay_rank",
		"project", "recorded_by", "provisional", "confirmed_by",
	},
	"knowledge_item_hits": {"item_id", "hit_count"},
}

// hash is what the store writes to content_hash.
func hash(normalized string) string {
	sum := sha256.Sum256([]byte(normalized))
	return hex.EncodeToString(sum[:])
}

// item inserts a knowledge item with the given type, pattern and content.
func item(typ, pattern, content string) harness.Stmt {
	return itemWith(typ, pattern, content, "", "")
}

// itemWith inserts a knowledge item with one more column and its value.
func itemWith(typ, pattern, content, column, value string) harness.Stmt {
	columns, values := "", ""
	if column != "" {
		columns, values = ", "+column, ", "+value
	}
	return harness.S(`INSERT INTO knowledge_items (type, content, content_normalized, content_hash, file_pattern`+columns+`)
		VALUES (?, ?, ?, ?, ?`+values+`)`, typ, content, content, hash(content), pattern)
}

// fixtures is one gotcha about SQL files.
var fixtures = []harness.Stmt{item("gotcha", "*.sql", "use IF NOT EXISTS")}

// constraintCases are the rows the Knowledge schema must accept and reject, identically on every
// SQL backend.
var constraintCases = []harness.Case{
	{
		Name: "item with every column",
		Stmt: harness.S(`INSERT INTO knowledge_items (type, content, content_normalized, content_hash, file_pattern,
			pattern_extension, pattern_literal_prefix, pattern_specificity, tags, confidence, source_execution_id,
			source_task_id, source_agent_id, evidence, hit_count, confirm_count, refute_count, created_at,
			updated_at, last_confirmed_at)
			VALUES ('pattern', 'Routes return JSON', 'routes return json', ?, 'server/routes/*.ts', 'ts',
			'server/routes/', 15, '["api", "express"]', 0.85, 'ex1', '1.2', 'a1', 'task 1.2 passed', 3, 2, 0,
			'2026-01-16T10:00:00.000Z', '2026-01-16T10:00:00.000Z', '2026-01-16T11:00:00.000Z')`, hash("routes return json")),
	},
	{
		Name: "confidence 1.5",
		Stmt: itemWith("gotcha", "*.sql", "x", "confidence", "1.5"),
		Want: database.CheckViolation,
	},
	{
		Name: "confidence -0.1",
		Stmt: itemWith("gotcha", "*.sql", "x", "confidence", "-0.1"),
		Want: database.CheckViolation,
	},
	{
		Name: "confidence 0 and 1 are fine",
		Setup: []harness.Stmt{
			itemWith("gotcha", "*.sql", "zero", "confidence", "0"),
		},
		Stmt: itemWith("gotcha", "*.sql", "one", "confidence", "1"),
	},
	{
		Name: "unknown type",
		Stmt: item("rumor", "*.sql", "x"),
		Want: database.CheckViolation,
	},
	{
		Name:  "same type, pattern and content",
		Setup: fixtures,
		Stmt:  item("gotcha", "*.sql", "use IF NOT EXISTS"),
		Want:  database.UniqueViolation,
	},
	{
		Name:  "same content as another type",
		Setup: fixtures,
		Stmt:  item("pattern", "*.sql", "use IF NOT EXISTS"),
	},
	{
		Name:  "same content for another pattern",
		Setup: fixtures,
		Stmt:  item("gotcha", "db/*.sql", "use IF NOT EXISTS"),
	},
	{
		Name: "content hash of the wrong length",
		Stmt: harness.S(`INSERT INTO knowledge_items (type, content, content_normalized, content_hash, file_pattern)
			VALUES ('gotcha', 'x', 'x', 'abc', '*')`),
		Want: database.CheckViolation,
	},
	{
		Name: "empty content",
		Stmt: item("gotcha", "*.sql", ""),
		Want: database.CheckViolation,
	},
	{
		Name: "no file pattern",
		Stmt: harness.S(`INSERT INTO knowledge_items (type, content, content_normalized, content_hash)
			VALUES ('gotcha', 'x', 'x', ?)`, hash("x")),
		Want: database.NotNullViolation,
	},
	{
		Name: "tags not an array",
		Stmt: itemWith("gotcha", "*.sql", "x", "tags", `'{"a": 1}'`),
		Want: database.CheckViolation,
	},
	{
		Name: "tags not JSON",
		Stmt: itemWith("gotcha", "*.sql", "x", "tags", `'[sql'`),
		Want: database.InvalidJSON,
	},
	{
		Name: "negative hit count",
		Stmt: itemWith("gotcha", "*.sql", "x", "hit_count", "-1"),
		Want: database.CheckViolation,
	},
	{
		Name:  "deleting an item",
		Setup: fixtures,
		Stmt:  harness.S(`DELETE FROM knowledge_items WHERE file_pattern = '*.sql'`),
	},
	{
		Name:  "hits of an item",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO knowledge_item_hits (item_id, hit_count) SELECT id, 3 FROM knowledge_items`),
	},
	{
		Name: "hits of no item",
		Stmt: harness.S(`INSERT INTO knowledge_item_hits (item_id, hit_count) VALUES (12345, 1)`),
		Want: database.ForeignKeyViolation,
	},
	{
		Name:  "a negative count of hits",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO knowledge_item_hits (item_id, hit_count) SELECT id, -1 FROM knowledge_items`),
		Want:  database.CheckViolation,
	},
	{
		// With "hits of no item": the foreign key cascades.
		Name: "deleting an item with hits",
		Setup: append(append([]harness.Stmt{}, fixtures...),
			harness.S(`INSERT INTO knowledge_item_hits (item_id, hit_count) SELECT id, 3 FROM knowledge_items`)),
		Stmt: harness.S(`DELETE FROM knowledge_items`),
	},
}

// searchQuery finds the ids of the items whose content or tags match a plain-text query.
var searchQuery = map[database.Dialect]string{
	database.DialectPostgres: `SELECT id FROM knowledge_items WHERE search @@ plainto_tsquery('english', ?) ORDER BY id`,
	database.DialectSQLite:   `SELECT rowid FROM knowledge_items_fts WHERE knowledge_items_fts MATCH ? ORDER BY rowid`,
}

// testFullTextSearch checks that the full-text index follows inserts, updates and deletes,
// stems words and covers tags.
func testFullTextSearch(t *testing.T, s harness.SQLStore) {
	ctx := t.Context()
	db := s.DB()
	insert := func(content, tags string) int64 {
		var id int64
		err := db.QueryRowContext(ctx, harness.Rebind(s.Dialect(), `INSERT INTO knowledge_items
			(type, content, content_normalized, content_hash, file_pattern, tags)
			VALUES ('gotcha', ?, ?, ?, '*.sql', ?) RETURNING id`), content, content, hash(content), tags).Scan(&id)
		require.NoError(t, err)
		return id
	}
	search := func(query string) []int64 {
		rows, err := db.QueryContext(ctx, harness.Rebind(s.Dialect(), searchQuery[s.Dialect()]), query)
		require.NoError(t, err)
		defer rows.Close()
		ids := []int64{}
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		return ids
	}

	migrations := insert("Migrations must be idempotent", `["database"]`)
	toast := insert("The toast needs a Toaster provider", `["react", "ui"]`)

	require.Equal(t, []int64{migrations}, search("migration"), "stemmed match on content")
	require.Equal(t, []int64{toast}, search("react"), "match on a tag")
	require.Empty(t, search("kubernetes"))

	harness.Exec(t, s, `UPDATE knowledge_items SET content = 'Wrap the app in a Toaster', tags = '["frontend"]' WHERE id = ?`, toast)
	require.Empty(t, search("react"), "old tag still indexed after update")
	require.Equal(t, []int64{toast}, search("frontend"))
	require.Equal(t, []int64{toast}, search("wrap"))

	harness.Exec(t, s, `DELETE FROM knowledge_items WHERE id = ?`, migrations)
	require.Empty(t, search("migration"), "deleted item still indexed")
}
