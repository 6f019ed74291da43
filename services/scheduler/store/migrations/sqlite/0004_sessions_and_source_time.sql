-- Failure paths (issue 12). The twin of ../postgres/0004_sessions_and_source_time.sql, in
-- SQLite's types; the comments there explain the columns.

-- +goose Up

ALTER TABLE wave_task_assignments ADD COLUMN session_id TEXT CHECK (session_id <> '');

ALTER TABLE task_execution_log ADD COLUMN source_time TEXT
    CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', source_time) IS source_time);

CREATE INDEX wave_task_assignments_held_idx ON wave_task_assignments (instance_id)
    WHERE status IN ('assigned', 'running');

-- +goose Down

DROP INDEX wave_task_assignments_held_idx;
ALTER TABLE task_execution_log DROP COLUMN source_time;
ALTER TABLE wave_task_assignments DROP COLUMN session_id;
