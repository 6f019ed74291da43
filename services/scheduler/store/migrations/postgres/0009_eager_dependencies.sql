-- Eager dispatch that follows dependencies (issue 17, P2b). The SQLite twin is
-- ../sqlite/0009_eager_dependencies.sql; keep them in step.
--
-- unmet_deps: how many of the tasks a PENDING task assignment depends on are not yet satisfied.
-- A dependency is satisfied once it completed without a commit (nothing of it to integrate), or
-- once its wave was integrated. The Scheduler decrements it for a task's dependents as those
-- happen; 0 for a task with no dependency in the run (and for every row written before this
-- migration, whose ready_wave already counted its dependencies' waves).
--
-- For a row with unmet_deps, ready_wave is the file-conflict part of readiness only (no task of
-- the waves from ready_wave to its own touches its files): an eager lease needs ready_wave <=
-- the open wave AND unmet_deps = 0.

-- +goose Up

ALTER TABLE wave_task_assignments ADD COLUMN unmet_deps integer NOT NULL DEFAULT 0 CHECK (unmet_deps >= 0);

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
