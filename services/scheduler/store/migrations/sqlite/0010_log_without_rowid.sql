-- The execution log as a WITHOUT ROWID table (issue 17, P1 embedded). Every claim, report and
-- completion appends entries; as a rowid table each entry was an insert into the rowid B-tree
-- (the row) and into the primary key's own index (execution_id, seq), besides the task and
-- retention indexes. Clustered on its primary key, an entry is one B-tree insert less, and a
-- read of a run's entries in seq order (WatchExecution, GetExecutionLog) walks the rows
-- themselves. SQLite only: Postgres's heap has no rowid B-tree. Columns, constraints and indexes
-- are those of 0003 and 0004; only the storage changes.

-- +goose Up

CREATE TABLE task_execution_log_new (
    execution_id TEXT NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL CHECK (seq >= 1),
    task_key     TEXT CHECK (task_key <> ''),
    wave_number  INTEGER CHECK (wave_number >= 1),
    -- A Registry agent instance id (no foreign key, see 0001).
    instance_id  TEXT CHECK (instance_id <> ''),
    -- The EventType value names of converge.common.v1, in lower case.
    event_type   TEXT NOT NULL CHECK (event_type IN (
        'task_started', 'task_completed', 'task_failed', 'task_skipped',
        'checkpoint_created', 'checkpoint_restored',
        'discovery_recorded', 'validation_run',
        'error', 'warning', 'info',
        'execution_started', 'execution_paused', 'execution_resumed', 'execution_cancelled',
        'execution_completed',
        'wave_started', 'wave_completed',
        'lease_granted', 'lease_expired', 'task_requeued',
        'integration_started', 'integration_completed', 'integration_failed',
        'verification_started', 'verdict',
        'agent_escalated'
    )),
    message      TEXT NOT NULL,
    context      TEXT
        CHECK (json_valid(context))
        CHECK (NOT json_valid(context) OR json_type(context) = 'object'),
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at),
    -- When the event happened at its source (an agent's clock), if it says so (0004).
    source_time  TEXT
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', source_time) IS source_time),
    PRIMARY KEY (execution_id, seq)
) STRICT, WITHOUT ROWID;

INSERT INTO task_execution_log_new (execution_id, seq, task_key, wave_number, instance_id, event_type,
    message, context, created_at, source_time)
SELECT execution_id, seq, task_key, wave_number, instance_id, event_type,
    message, context, created_at, source_time FROM task_execution_log;

DROP TABLE task_execution_log;
ALTER TABLE task_execution_log_new RENAME TO task_execution_log;

-- A task's entries.
CREATE INDEX idx_exec_log_task ON task_execution_log (execution_id, task_key, seq) WHERE task_key IS NOT NULL;
-- Retention.
CREATE INDEX idx_exec_log_created_at ON task_execution_log (created_at);
-- Error history (handoff context).
CREATE INDEX idx_exec_log_errors ON task_execution_log (execution_id, seq)
    WHERE event_type IN ('task_failed', 'error');

-- +goose Down

CREATE TABLE task_execution_log_old (
    execution_id TEXT NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    seq          INTEGER NOT NULL CHECK (seq >= 1),
    task_key     TEXT CHECK (task_key <> ''),
    wave_number  INTEGER CHECK (wave_number >= 1),
    instance_id  TEXT CHECK (instance_id <> ''),
    event_type   TEXT NOT NULL CHECK (event_type IN (
        'task_started', 'task_completed', 'task_failed', 'task_skipped',
        'checkpoint_created', 'checkpoint_restored',
        'discovery_recorded', 'validation_run',
        'error', 'warning', 'info',
        'execution_started', 'execution_paused', 'execution_resumed', 'execution_cancelled',
        'execution_completed',
        'wave_started', 'wave_completed',
        'lease_granted', 'lease_expired', 'task_requeued',
        'integration_started', 'integration_completed', 'integration_failed',
        'verification_started', 'verdict',
        'agent_escalated'
    )),
    message      TEXT NOT NULL,
    context      TEXT
        CHECK (json_valid(context))
        CHECK (NOT json_valid(context) OR json_type(context) = 'object'),
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at),
    source_time  TEXT
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', source_time) IS source_time),
    PRIMARY KEY (execution_id, seq)
) STRICT;

INSERT INTO task_execution_log_old (execution_id, seq, task_key, wave_number, instance_id, event_type,
    message, context, created_at, source_time)
SELECT execution_id, seq, task_key, wave_number, instance_id, event_type,
    message, context, created_at, source_time FROM task_execution_log;

DROP TABLE task_execution_log;
ALTER TABLE task_execution_log_old RENAME TO task_execution_log;

CREATE INDEX idx_exec_log_task ON task_execution_log (execution_id, task_key, seq) WHERE task_key IS NOT NULL;
CREATE INDEX idx_exec_log_created_at ON task_execution_log (created_at);
CREATE INDEX idx_exec_log_errors ON task_execution_log (execution_id, seq)
    WHERE event_type IN ('task_failed', 'error');
