-- A milestone or phase gate that requires a person's sign-off (issue 15 part 9, seed 004's phase
-- gate check). The SQLite twin is ../sqlite/0006_gate_signoff.sql; keep them in step.
--
-- tasks.requires_signoff is Task.requires_signoff: only gate tasks (GATE-..., RUN) set it; the
-- Scheduler pauses a run whose gate passed until SignOffGate decides. The decisions and the gate
-- a run waits at are the Execution proto's, kept in task_list_execution_runs.detail (no column).

-- +goose Up

ALTER TABLE tasks ADD COLUMN requires_signoff boolean NOT NULL DEFAULT false;

-- +goose Down

ALTER TABLE tasks DROP COLUMN requires_signoff;
