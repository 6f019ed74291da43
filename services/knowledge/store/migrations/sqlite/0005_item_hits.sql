-- Knowledge hit counts in their own table, SQLite. The twin of ../postgres/0005_item_hits.sql
-- (which says why). Here a query writes its hits as it answers: an upsert of narrow rows instead
-- of a rewrite of each wide item row. An item's hit count is knowledge_items.hit_count (the hits
-- counted before this migration) plus its row here, if any.

-- +goose Up

CREATE TABLE knowledge_item_hits (
    item_id   INTEGER PRIMARY KEY REFERENCES knowledge_items (id) ON DELETE CASCADE,
    hit_count INTEGER NOT NULL CHECK (hit_count >= 0)
) STRICT;

-- +goose Down

UPDATE knowledge_items SET hit_count = hit_count + (SELECT h.hit_count FROM knowledge_item_hits h WHERE h.item_id = knowledge_items.id)
    WHERE id IN (SELECT item_id FROM knowledge_item_hits);
DROP TABLE knowledge_item_hits;
