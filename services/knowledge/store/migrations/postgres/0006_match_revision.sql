-- Knowledge matching, Postgres: candidates carry their item's revision. The SQLite twin is
-- ../sqlite/0006_match_revision.sql.
--
-- Every change of an item but its hits counts a confirmation (RecordItem of a twin, ConfirmItem)
-- or a refutation (RefuteItem) in the same transaction, so confirm_count + refute_count is the
-- item's revision: two reads of an item at the same revision read the same item. With the counts
-- in knowledge_items_match_idx, the candidates' index-only scans return the revision, and a
-- replica that holds the item at that revision in memory answers it without reading the table
-- (services/knowledge/store/postgres/answers.go). Confirmations and refutations already changed
-- indexed columns (confidence, rank), so no update that was HOT stops being HOT.

-- +goose Up

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (type, file_pattern, confidence, confirm_count, refute_count);

-- +goose Down

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (type, file_pattern, confidence);
