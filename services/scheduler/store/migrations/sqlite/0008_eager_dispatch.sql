-- Eager dispatch (issue 17). The Postgres twin is ../postgres/0008_eager_dispatch.sql; keep them
-- in step (see there for what the column is).

-- +goose Up

ALTER TABLE wave_task_assignments ADD COLUMN ready_wave INTEGER CHECK (ready_wave >= 1);

-- Claimable work of later waves, in claim order (wave, then position).
CREATE INDEX wave_task_assignments_eager_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending' AND ready_wave IS NOT NULL;

-- +goose Down

DROP INDEX wave_task_assignments_eager_idx;
ALTER TABLE wave_task_assignments DROP COLUMN ready_wave;
