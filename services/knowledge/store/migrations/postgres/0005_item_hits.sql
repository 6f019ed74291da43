-- Knowledge hit counts in their own table, Postgres. The SQLite twin is ../sqlite/0005_item_hits.sql.
--
-- Every query counts a hit on each item it answers, and the store writes those counts once a
-- second (services/knowledge/store/postgres/hits.go). Written to knowledge_items, each flush made
-- a new version of the wide rows of the items answered most (the very candidates of the popular
-- buckets), with a full-page image of each page after a checkpoint, and cleared those pages'
-- bits in the visibility map: the index-only scans of knowledge_items_match_idx then read the
-- table for them, and nothing but a vacuum set the bits again. Here a flush writes narrow rows of
-- their own table, and the items' pages stay all-visible.
--
-- An item's hit count is knowledge_items.hit_count (the hits counted before this migration, and
-- by a replica still running the previous release) plus its row here, if any: nothing to
-- backfill, and no rewrite of the items. The foreign key drops an item's hits with it; checking
-- it locks the item's row once, when its first hit is written (later flushes update the row
-- here, which does not check the key again), and a row lock leaves the visibility map's
-- all-visible bit alone. The rows are updated in place every second: room on each page (fillfactor
-- 50) keeps those updates HOT.

-- +goose Up

CREATE TABLE knowledge_item_hits (
    item_id   bigint PRIMARY KEY REFERENCES knowledge_items (id) ON DELETE CASCADE,
    hit_count bigint NOT NULL CHECK (hit_count >= 0)
) WITH (fillfactor = 50);

-- +goose Down

UPDATE knowledge_items k SET hit_count = k.hit_count + h.hit_count
    FROM knowledge_item_hits h WHERE h.item_id = k.id;
DROP TABLE knowledge_item_hits;
