-- Knowledge matching, Postgres: candidates from the index alone. The SQLite twin is
-- ../sqlite/0003_covering_match.sql.
--
-- A query by file path reads a few candidates per bucket and turns most of them down (the glob
-- does not match, or the effective confidence is too low). knowledge_items_match_idx now carries
-- what that decision needs (type, file_pattern, confidence), so candidates come from an
-- index-only scan, and only the items answered are read from the table, by the statement that
-- counts their hits.

-- +goose Up

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (type, file_pattern, confidence);

-- +goose Down

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC);
