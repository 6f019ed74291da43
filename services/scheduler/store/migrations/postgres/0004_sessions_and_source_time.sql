-- Failure paths (issue 12). The SQLite twin is ../sqlite/0004_sessions_and_source_time.sql; keep
-- them in step.
--   - an assignment remembers the session (the agent process's boot id, ClaimTaskRequest.session_id)
--     it was leased to, so a claim from a new session of the same instance takes back at once what
--     the old one held;
--   - a log entry keeps the time its event happened at its source (AgentEvent.time, the agent's
--     clock) beside created_at, the store time it was received.

-- +goose Up

-- The session of the holder (or last holder); NULL when the agent sent none.
ALTER TABLE wave_task_assignments ADD COLUMN session_id text CHECK (session_id <> '');

-- When the event happened at its source (an agent's clock); NULL for the Scheduler's own events.
ALTER TABLE task_execution_log ADD COLUMN source_time timestamptz;

-- Held assignments of an agent (the stale-agent reaper and session replacement read them).
CREATE INDEX wave_task_assignments_held_idx ON wave_task_assignments (instance_id)
    WHERE status IN ('assigned', 'running');

-- +goose Down

DROP INDEX wave_task_assignments_held_idx;
ALTER TABLE task_execution_log DROP COLUMN source_time;
ALTER TABLE wave_task_assignments DROP COLUMN session_id;
