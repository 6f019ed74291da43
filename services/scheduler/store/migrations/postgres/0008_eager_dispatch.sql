-- Eager dispatch (issue 17). The SQLite twin is ../sqlite/0008_eager_dispatch.sql; keep them in
-- step.
--
-- ready_wave: the first wave whose opening lets a PENDING task assignment of a later wave be
-- leased early (every task it depends on is in an earlier wave, and no task of the waves between
-- declares files overlapping its own). NULL: the task waits for its own wave (strict waves, or no
-- earlier wave would do). Fixed when the assignment is stored, like its wave and position.

-- +goose Up

ALTER TABLE wave_task_assignments ADD COLUMN ready_wave integer CHECK (ready_wave >= 1);
ALTER TABLE wave_task_assignments ADD CONSTRAINT wave_task_assignments_ready_wave
    CHECK (ready_wave IS NULL OR (kind = 'task' AND ready_wave < wave_number));

-- Claimable work of later waves, in claim order (wave, then position).
CREATE INDEX wave_task_assignments_eager_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending' AND ready_wave IS NOT NULL;

-- +goose Down

DROP INDEX wave_task_assignments_eager_idx;
ALTER TABLE wave_task_assignments DROP CONSTRAINT wave_task_assignments_ready_wave;
ALTER TABLE wave_task_assignments DROP COLUMN ready_wave;
