-- Knowledge scope and provenance, SQLite. The twin of ../postgres/0004_project_provenance.sql
-- (which says why); SQLite has no INCLUDE, so the covered columns end the key, and the boolean is
-- INTEGER 0/1.

-- +goose Up

ALTER TABLE knowledge_items ADD COLUMN project TEXT NOT NULL DEFAULT '';
ALTER TABLE knowledge_items ADD COLUMN recorded_by TEXT NOT NULL DEFAULT '';
ALTER TABLE knowledge_items ADD COLUMN provisional INTEGER NOT NULL DEFAULT 0 CHECK (provisional IN (0, 1));
ALTER TABLE knowledge_items ADD COLUMN confirmed_by TEXT NOT NULL DEFAULT '';

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC, type, file_pattern, confidence);
CREATE INDEX knowledge_items_project_rank_idx ON knowledge_items (project,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC);

-- +goose Down

DROP INDEX knowledge_items_project_rank_idx;
DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC, type, file_pattern, confidence);
ALTER TABLE knowledge_items DROP COLUMN confirmed_by;
ALTER TABLE knowledge_items DROP COLUMN provisional;
ALTER TABLE knowledge_items DROP COLUMN recorded_by;
ALTER TABLE knowledge_items DROP COLUMN project;
