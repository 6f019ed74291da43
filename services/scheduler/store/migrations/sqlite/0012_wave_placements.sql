-- A wave's placements in a table of their own (issue 17, P1 embedded, P1b). The placements (why
-- each task is in its wave: protojson of the Wave's other fields) were the wave row's detail
-- column: ≈ 100 bytes per task, 100 KB and more for a wave of 1,000 tasks. A claim and a
-- completion change a counter of their wave, and SQLite writes a row whole: every such UPDATE
-- read and wrote the wave's placements again, through its overflow pages (≈ 8 % of converge
-- dev's CPU per task on the 1,000-task fan-out). The placements never change after the wave is
-- stored, so they move here and the wave row keeps its counters alone.
--
-- Postgres keeps them in the row (../postgres/0003_executions.sql): a jsonb of that size is
-- TOASTed, and an UPDATE that does not touch it keeps the TOAST pointer without copying it.

-- +goose Up

CREATE TABLE parallel_execution_wave_placements (
    wave_id TEXT PRIMARY KEY REFERENCES parallel_execution_waves (wave_id) ON DELETE CASCADE,
    -- The Wave proto without its columns (protojson): its placements. A wave without any has no row.
    detail  TEXT NOT NULL
        CHECK (json_valid(detail))
        CHECK (NOT json_valid(detail) OR json_type(detail) = 'object')
) STRICT;

INSERT INTO parallel_execution_wave_placements (wave_id, detail)
    SELECT wave_id, detail FROM parallel_execution_waves WHERE detail <> '{}';

ALTER TABLE parallel_execution_waves DROP COLUMN detail;

-- +goose Down

ALTER TABLE parallel_execution_waves ADD COLUMN detail TEXT NOT NULL DEFAULT '{}'
    CHECK (json_valid(detail))
    CHECK (NOT json_valid(detail) OR json_type(detail) = 'object');

UPDATE parallel_execution_waves SET detail = (SELECT p.detail FROM parallel_execution_wave_placements p
    WHERE p.wave_id = parallel_execution_waves.wave_id)
    WHERE wave_id IN (SELECT wave_id FROM parallel_execution_wave_placements);

DROP TABLE parallel_execution_wave_placements;
