-- Knowledge matching, SQLite: candidates from the index alone. The twin of
-- ../postgres/0003_covering_match.sql; SQLite has no INCLUDE, so the covered columns end the key.
--
-- A query by file path reads a few candidates per bucket and turns most of them down (the glob
-- does not match, or the effective confidence is too low). knowledge_items_match_idx now carries
-- what that decision needs (type, file_pattern, confidence), so candidates come from the index
-- alone, and only the items answered are read from the table, by the statement that counts their
-- hits.

-- +goose Up

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC, type, file_pattern, confidence);

-- +goose Down

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC);
