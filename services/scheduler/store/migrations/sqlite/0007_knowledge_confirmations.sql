-- The outbox of knowledge confirmations (issue 17). The Postgres twin is
-- ../postgres/0007_knowledge_confirmations.sql; keep them in step (see there for what each column is).

-- Numbered 0008, not 0007: the gate sign-off and this migration landed at the same time and
-- each moved between 0006 and 0007; 0008 collides with neither whatever the other's number.

-- +goose Up

CREATE TABLE knowledge_confirmations (
    assignment_id   TEXT PRIMARY KEY CHECK (assignment_id <> ''),
    execution_id    TEXT NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_id         TEXT NOT NULL,
    instance_id     TEXT NOT NULL,
    principal       TEXT NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at TEXT NOT NULL
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', next_attempt_at) IS next_attempt_at),
    created_at      TEXT NOT NULL
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at)
);

CREATE INDEX knowledge_confirmations_due_idx ON knowledge_confirmations (next_attempt_at, assignment_id);
CREATE INDEX knowledge_confirmations_execution_idx ON knowledge_confirmations (execution_id);

-- +goose Down

DROP TABLE knowledge_confirmations;
