-- Knowledge schema, SQLite. The twin of ../postgres/0001_init.sql: the same tables, columns, CHECK
-- and UNIQUE constraints and indexes, in SQLite's types (see platform/database):
--   - timestamps are TEXT in one form, RFC 3339 UTC with milliseconds, '2026-01-16T10:00:00.000Z'
--     (what strftime('%Y-%m-%dT%H:%M:%fZ', ...) writes); the CHECK "strftime(...) IS column"
--     accepts that exact form only, so text order is time order;
--   - JSON is TEXT checked by json_valid, plus the type check of the Postgres jsonb column;
--   - booleans are INTEGER 0/1, identities INTEGER PRIMARY KEY AUTOINCREMENT (ids never reused);
--   - tables are STRICT: a value of the wrong type is an error, as in Postgres.
-- Full-text search differs in form: an FTS5 table kept in sync by triggers here, a generated
-- tsvector column with a GIN index there.
--
-- The Knowledge service owns gotchas, patterns, decisions and discoveries, matched to files by
-- glob and filtered by confidence. The source_* columns name other services' objects (a
-- Scheduler execution and task, a Registry agent) and are plain text without a foreign key:
-- another team may run only Knowledge, and services meet only through their gRPC contracts.

-- +goose Up

CREATE TABLE knowledge_items (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    type                   TEXT NOT NULL CHECK (type IN ('gotcha', 'pattern', 'decision', 'discovery')),
    content                TEXT NOT NULL CHECK (content <> ''),
    -- content folded for deduplication (case, whitespace), by the store.
    content_normalized     TEXT NOT NULL CHECK (content_normalized <> ''),
    -- Lower-case hex SHA-256 of content_normalized, computed by the store. The unique key uses
    -- it because an index entry cannot hold arbitrarily long content.
    content_hash           TEXT NOT NULL CHECK (length(content_hash) = 64),
    -- The files the item applies to, a glob: "*.sql", "server/routes/*", "**".
    file_pattern           TEXT NOT NULL CHECK (file_pattern <> ''),
    -- Derived from file_pattern by the store, so matching a file uses indexes instead of testing
    -- every pattern: the extension the pattern requires ("sql" for "*.sql", NULL if none), the
    -- literal text before its first wildcard ("server/routes/"), and a specificity score to
    -- rank the most specific matches first.
    pattern_extension      TEXT,
    pattern_literal_prefix TEXT NOT NULL DEFAULT '',
    pattern_specificity    INTEGER NOT NULL DEFAULT 0 CHECK (pattern_specificity >= 0),
    tags                   TEXT NOT NULL DEFAULT '[]'
        CHECK (json_valid(tags))
        CHECK (NOT json_valid(tags) OR json_type(tags) = 'array'),
    confidence             REAL NOT NULL DEFAULT 0.5 CHECK (confidence BETWEEN 0 AND 1),
    -- Where it was learned: a Scheduler execution and task, a Registry agent (no foreign keys).
    source_execution_id    TEXT,
    source_task_id         TEXT,
    source_agent_id        TEXT,
    evidence               TEXT NOT NULL DEFAULT '',
    hit_count              INTEGER NOT NULL DEFAULT 0 CHECK (hit_count >= 0),
    confirm_count          INTEGER NOT NULL DEFAULT 0 CHECK (confirm_count >= 0),
    refute_count           INTEGER NOT NULL DEFAULT 0 CHECK (refute_count >= 0),
    created_at             TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at),
    updated_at             TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', updated_at) IS updated_at),
    last_confirmed_at      TEXT
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', last_confirmed_at) IS last_confirmed_at),
    -- The same lesson is recorded once per type and pattern; recording it again confirms it.
    CONSTRAINT knowledge_items_uniq UNIQUE (type, file_pattern, content_hash)
) STRICT;

-- Items for a file: by extension, by literal prefix, then by pattern, best first.
CREATE INDEX knowledge_items_extension_idx ON knowledge_items (pattern_extension, confidence DESC)
    WHERE pattern_extension IS NOT NULL;
CREATE INDEX knowledge_items_prefix_idx ON knowledge_items (pattern_literal_prefix, confidence DESC);
CREATE INDEX knowledge_items_type_idx ON knowledge_items (type, confidence DESC);

-- Full-text search over content and tags: an external-content FTS5 table (it stores only the
-- index; the text stays in knowledge_items), keyed by knowledge_items.id and kept in sync by
-- the triggers below. Query with knowledge_items_fts MATCH ?, join on rowid = id.
CREATE VIRTUAL TABLE knowledge_items_fts USING fts5(
    content,
    tags,
    content = 'knowledge_items',
    content_rowid = 'id',
    tokenize = 'porter unicode61'
);

-- +goose StatementBegin
CREATE TRIGGER knowledge_items_fts_insert AFTER INSERT ON knowledge_items BEGIN
    INSERT INTO knowledge_items_fts (rowid, content, tags) VALUES (new.id, new.content, new.tags);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER knowledge_items_fts_delete AFTER DELETE ON knowledge_items BEGIN
    INSERT INTO knowledge_items_fts (knowledge_items_fts, rowid, content, tags)
        VALUES ('delete', old.id, old.content, old.tags);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER knowledge_items_fts_update AFTER UPDATE OF content, tags ON knowledge_items BEGIN
    INSERT INTO knowledge_items_fts (knowledge_items_fts, rowid, content, tags)
        VALUES ('delete', old.id, old.content, old.tags);
    INSERT INTO knowledge_items_fts (rowid, content, tags) VALUES (new.id, new.content, new.tags);
END;
-- +goose StatementEnd

-- +goose Down

DROP TRIGGER knowledge_items_fts_update;
DROP TRIGGER knowledge_items_fts_delete;
DROP TRIGGER knowledge_items_fts_insert;
DROP TABLE knowledge_items_fts;
DROP TABLE knowledge_items;
