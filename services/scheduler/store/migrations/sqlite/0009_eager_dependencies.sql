-- Eager dispatch that follows dependencies (issue 17, P2b). The Postgres twin is
-- ../postgres/0009_eager_dependencies.sql; keep them in step (see there for what the column is).

-- +goose Up

ALTER TABLE wave_task_assignments ADD COLUMN unmet_deps INTEGER NOT NULL DEFAULT 0 CHECK (unmet_deps >= 0);

-- Claimable work of later waves, in claim order (wave, then position): only what nothing holds
-- back by a dependency.
DROP INDEX wave_task_assignments_eager_idx;
CREATE INDEX wave_task_assignments_eager_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending' AND ready_wave IS NOT NULL AND unmet_deps = 0;

-- A completion finds its dependents' rows by task (O(dependents), not a scan of the run).
CREATE INDEX wave_task_assignments_unmet_idx ON wave_task_assignments (execution_id, task_key)
    WHERE unmet_deps > 0;

-- +goose Down

DROP INDEX wave_task_assignments_unmet_idx;
DROP INDEX wave_task_assignments_eager_idx;
CREATE INDEX wave_task_assignments_eager_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending' AND ready_wave IS NOT NULL;
ALTER TABLE wave_task_assignments DROP COLUMN unmet_deps;
