-- The outbox of knowledge confirmations (issue 17): a task assignment that completes SUCCEEDED
-- leaves a row here in its completion's transaction, and a background worker of the Scheduler
-- confirms the provisional knowledge items the task was given through the Knowledge service,
-- then deletes the row. A Knowledge outage delays confirmations; it neither slows nor fails
-- CompleteTask, and a crash loses none. The SQLite twin is ../sqlite/0007_knowledge_confirmations.sql;
-- keep them in step.
--   - principal: the completing agent's principal (an item it recorded itself is not confirmed);
--   - attempts: the failed tries so far; next_attempt_at: when the row may be taken next (a taken
--     row's is pushed a lease ahead, so another replica does not take it meanwhile).

-- Numbered 0008, not 0007: the gate sign-off and this migration landed at the same time and
-- each moved between 0006 and 0007; 0008 collides with neither whatever the other's number.

-- +goose Up

CREATE TABLE knowledge_confirmations (
    assignment_id   text PRIMARY KEY CHECK (assignment_id <> ''),
    execution_id    text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_id         text NOT NULL,
    instance_id     text NOT NULL,
    principal       text NOT NULL,
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL,
    created_at      timestamptz NOT NULL
);

-- The worker takes the due rows, oldest first.
CREATE INDEX knowledge_confirmations_due_idx ON knowledge_confirmations (next_attempt_at, assignment_id);
CREATE INDEX knowledge_confirmations_execution_idx ON knowledge_confirmations (execution_id);

-- +goose Down

DROP TABLE knowledge_confirmations;
