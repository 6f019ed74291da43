-- Knowledge matching, SQLite: candidates carry their item's revision. The twin of
-- ../postgres/0006_match_revision.sql (which says why); SQLite has no INCLUDE, so the covered
-- columns end the key.

-- +goose Up

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC, type, file_pattern, confidence,
    confirm_count, refute_count);

-- +goose Down

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC, type, file_pattern, confidence);
