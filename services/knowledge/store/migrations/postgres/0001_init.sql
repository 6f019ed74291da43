-- Knowledge schema, Postgres. The SQLite twin is ../sqlite/0001_init.sql: same table, columns,
-- CHECK and UNIQUE constraints and indexes; keep them in step. Full-text search differs in
-- form: a generated tsvector column with a GIN index here, an FTS5 table kept in sync by
-- triggers there.
--
-- The Knowledge service owns gotchas, patterns, decisions and discoveries, matched to files by
-- glob and filtered by confidence. The source_* columns name other services' objects (a
-- Scheduler execution and task, a Registry agent) and are plain text without a foreign key:
-- another team may run only Knowledge, and services meet only through their gRPC contracts.

-- +goose Up

CREATE TABLE knowledge_items (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type                   text NOT NULL CHECK (type IN ('gotcha', 'pattern', 'decision', 'discovery')),
    content                text NOT NULL CHECK (content <> ''),
    -- content folded for deduplication (case, whitespace), by the store.
    content_normalized     text NOT NULL CHECK (content_normalized <> ''),
    -- Lower-case hex SHA-256 of content_normalized, computed by the store. The unique key uses
    -- it because an index entry cannot hold arbitrarily long content.
    content_hash           text NOT NULL CHECK (length(content_hash) = 64),
    -- The files the item applies to, a glob: "*.sql", "server/routes/*", "**".
    file_pattern           text NOT NULL CHECK (file_pattern <> ''),
    -- Derived from file_pattern by the store, so matching a file uses indexes instead of testing
    -- every pattern: the extension the pattern requires ("sql" for "*.sql", NULL if none), the
    -- literal text before its first wildcard ("server/routes/"), and a specificity score to
    -- rank the most specific matches first.
    pattern_extension      text,
    pattern_literal_prefix text NOT NULL DEFAULT '',
    pattern_specificity    integer NOT NULL DEFAULT 0 CHECK (pattern_specificity >= 0),
    tags                   jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tags) = 'array'),
    confidence             double precision NOT NULL DEFAULT 0.5 CHECK (confidence BETWEEN 0 AND 1),
    -- Where it was learned: a Scheduler execution and task, a Registry agent (no foreign keys).
    source_execution_id    text,
    source_task_id         text,
    source_agent_id        text,
    evidence               text NOT NULL DEFAULT '',
    hit_count              bigint NOT NULL DEFAULT 0 CHECK (hit_count >= 0),
    confirm_count          integer NOT NULL DEFAULT 0 CHECK (confirm_count >= 0),
    refute_count           integer NOT NULL DEFAULT 0 CHECK (refute_count >= 0),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    last_confirmed_at      timestamptz,
    -- Full-text search over content and tags.
    search                 tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', content), 'A') ||
        setweight(jsonb_to_tsvector('english', tags, '["string"]'), 'B')
    ) STORED,
    -- The same lesson is recorded once per type and pattern; recording it again confirms it.
    CONSTRAINT knowledge_items_uniq UNIQUE (type, file_pattern, content_hash)
);

-- Items for a file: by extension, by literal prefix, then by pattern, best first.
CREATE INDEX knowledge_items_extension_idx ON knowledge_items (pattern_extension, confidence DESC)
    WHERE pattern_extension IS NOT NULL;
CREATE INDEX knowledge_items_prefix_idx ON knowledge_items (pattern_literal_prefix, confidence DESC);
CREATE INDEX knowledge_items_type_idx ON knowledge_items (type, confidence DESC);
CREATE INDEX knowledge_items_search_idx ON knowledge_items USING gin (search);

-- +goose Down

DROP TABLE knowledge_items;
