-- Verifier schema, SQLite, second step. The twin of ../postgres/0002_history.sql: the same
-- columns, CHECKs and indexes in SQLite's types (booleans are INTEGER 0/1).

-- +goose Up

-- A report of a verification that ran only some criteria (only_criteria). Its verdict speaks for
-- those only: it is never the loop's verdict and anti-thrashing analysis skips it.
ALTER TABLE verify_reports ADD COLUMN partial INTEGER NOT NULL DEFAULT 0 CHECK (partial IN (0, 1));

-- A loop's complete reports, newest first (the loop's verdict, anti-thrashing windows).
CREATE INDEX verify_reports_complete_idx ON verify_reports (loop_key, seq) WHERE NOT partial;

-- Listing reports newest first pages by (created_at, id).
CREATE INDEX verify_reports_listing_idx ON verify_reports (created_at, id);

-- The id a human verdict is known by in the API, "hv_<ulid>". NULL only for rows written before
-- this migration (there were none: the RPC that writes them came with it).
ALTER TABLE human_verdicts ADD COLUMN public_id TEXT CHECK (public_id <> '');
CREATE UNIQUE INDEX human_verdicts_public_id_idx ON human_verdicts (public_id);

-- +goose Down

DROP INDEX human_verdicts_public_id_idx;
ALTER TABLE human_verdicts DROP COLUMN public_id;
DROP INDEX verify_reports_listing_idx;
DROP INDEX verify_reports_complete_idx;
ALTER TABLE verify_reports DROP COLUMN partial;
