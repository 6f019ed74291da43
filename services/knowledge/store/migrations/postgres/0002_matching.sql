-- Knowledge matching, Postgres. The SQLite twin is ../sqlite/0002_matching.sql.
--
-- Queries by file path look up patterns by bucket and take them best first, so that a path never
-- tests every stored pattern (services/knowledge/globpath says what a bucket is):
--   - pattern_extension is now '' (not NULL) for a pattern that fixes no extension, so that a
--     bucket is found by plain equality, and every pattern is in one bucket;
--   - decay_rank orders items by effective confidence at any time (confidence decays with the
--     age of the last confirmation; services/knowledge/confidence.Rank explains how one stored
--     number can do that). The store writes it with the confidence.
-- The 0001 indexes by extension, prefix and type ordered by the stored confidence are replaced:
-- the stored confidence is not what queries rank by.
-- Every query counts a hit on each item it answers. hit_count is in no index, so with room left
-- on each page (fillfactor 80) that update is a HOT update: a new row version on the same page
-- and no index entry written (after a bulk load, full pages would make each hit write an entry
-- in every index, the full-text one included). SQLite has no such setting.
--
-- Nothing to backfill: before this migration the service answered Unimplemented and stored no
-- item.

-- +goose Up

ALTER TABLE knowledge_items ADD COLUMN decay_rank bigint NOT NULL DEFAULT 0;
ALTER TABLE knowledge_items SET (fillfactor = 80);

DROP INDEX knowledge_items_extension_idx;
DROP INDEX knowledge_items_prefix_idx;
DROP INDEX knowledge_items_type_idx;

-- Candidates for a file path: one range scan per bucket, best first (QueryItems by file_path).
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC);
-- Best first over every item (QueryItems with all, e.g. a text search).
CREATE INDEX knowledge_items_rank_idx ON knowledge_items (decay_rank DESC, pattern_specificity DESC,
    last_confirmed_at DESC, id DESC);
-- Items stored under one pattern (QueryItems by file_pattern, ListItems filtered by pattern).
CREATE INDEX knowledge_items_pattern_idx ON knowledge_items (file_pattern);
-- Newest first by type (ListItems filtered by type).
CREATE INDEX knowledge_items_type_idx ON knowledge_items (type, id DESC);

-- +goose Down

DROP INDEX knowledge_items_type_idx;
DROP INDEX knowledge_items_pattern_idx;
DROP INDEX knowledge_items_rank_idx;
DROP INDEX knowledge_items_match_idx;
ALTER TABLE knowledge_items DROP COLUMN decay_rank;
ALTER TABLE knowledge_items RESET (fillfactor);
CREATE INDEX knowledge_items_extension_idx ON knowledge_items (pattern_extension, confidence DESC)
    WHERE pattern_extension IS NOT NULL;
CREATE INDEX knowledge_items_prefix_idx ON knowledge_items (pattern_literal_prefix, confidence DESC);
CREATE INDEX knowledge_items_type_idx ON knowledge_items (type, confidence DESC);
