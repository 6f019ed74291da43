-- Knowledge scope and provenance, Postgres. The SQLite twin is ../sqlite/0004_project_provenance.sql.
--
-- An item belongs to a project (a repository's identity): queries answer only the items of the
-- project they name, so a lesson recorded for one repository never reaches another's prompts.
-- The twin key stays (type, file_pattern, content_hash): the store folds the project into the
-- content hash of every item of a named project, so twins are per project.
-- recorded_by is the authenticated principal that recorded the item (never a request field);
-- a provisional item (recorded by a principal that is not an operator) keeps its confidence
-- capped below the agents' injection threshold until another principal, confirmed_by, confirms it.
-- Items recorded before this migration are in the default project '' and not provisional.

-- +goose Up

ALTER TABLE knowledge_items ADD COLUMN project TEXT NOT NULL DEFAULT '';
ALTER TABLE knowledge_items ADD COLUMN recorded_by TEXT NOT NULL DEFAULT '';
ALTER TABLE knowledge_items ADD COLUMN provisional BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE knowledge_items ADD COLUMN confirmed_by TEXT NOT NULL DEFAULT '';

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (type, file_pattern, confidence);
CREATE INDEX knowledge_items_project_rank_idx ON knowledge_items (project,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC);

-- +goose Down

DROP INDEX knowledge_items_project_rank_idx;
DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (type, file_pattern, confidence);
ALTER TABLE knowledge_items DROP COLUMN confirmed_by;
ALTER TABLE knowledge_items DROP COLUMN provisional;
ALTER TABLE knowledge_items DROP COLUMN recorded_by;
ALTER TABLE knowledge_items DROP COLUMN project;
