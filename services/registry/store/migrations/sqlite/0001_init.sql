-- Registry schema, SQLite. The twin of ../postgres/0001_init.sql: the same tables, columns, CHECK
-- and UNIQUE constraints and indexes, in SQLite's types (see platform/database):
--   - timestamps are TEXT in one form, RFC 3339 UTC with milliseconds, '2026-01-16T10:00:00.000Z'
--     (what strftime('%Y-%m-%dT%H:%M:%fZ', ...) writes); the CHECK "strftime(...) IS column"
--     accepts that exact form only, so text order is time order;
--   - JSON is TEXT checked by json_valid, plus the type check of the Postgres jsonb column;
--   - booleans are INTEGER 0/1, identities INTEGER PRIMARY KEY AUTOINCREMENT (ids never reused);
--   - tables are STRICT: a value of the wrong type is an error, as in Postgres.
--
-- The Registry owns agent registration and heartbeats, stale-agent detection, resource
-- ownership and file locks with fencing tokens. Locks and live heartbeats are hot state kept in
-- Redis (or in process); these tables are the durable part. Columns that name another service's
-- objects (the Scheduler's executions and tasks) are plain text without a foreign key: another
-- team may run only the Registry, and services meet only through their gRPC contracts.

-- +goose Up

-- A registered build agent (seed B.1).
CREATE TABLE build_agent_instances (
    instance_id          TEXT PRIMARY KEY CHECK (instance_id <> ''),
    -- The Scheduler execution, task and wave the agent works on; NULL while it waits in the pool.
    -- Scheduler ids: no foreign key (see the top of this file).
    execution_id         TEXT,
    current_task_id      TEXT,
    wave_number          INTEGER CHECK (wave_number >= 1),
    agent_type           TEXT NOT NULL DEFAULT 'build-agent' CHECK (agent_type <> ''),
    status               TEXT NOT NULL DEFAULT 'initializing'
        CHECK (status IN ('initializing', 'running', 'idle', 'completed', 'failed', 'stuck')),
    hostname             TEXT NOT NULL DEFAULT '',
    -- What the agent offers (executors, ...), for matching work to agents.
    labels               TEXT NOT NULL DEFAULT '{}'
        CHECK (json_valid(labels))
        CHECK (NOT json_valid(labels) OR json_type(labels) = 'object'),
    -- {"maxRetries", "heartbeatIntervalMs", "taskTimeoutMs", "validationTimeoutMs"}
    config               TEXT NOT NULL DEFAULT '{}'
        CHECK (json_valid(config))
        CHECK (NOT json_valid(config) OR json_type(config) = 'object'),
    -- {"code", "message", "taskId", "stackTrace", "timestamp"} of the last error.
    error_context        TEXT
        CHECK (json_valid(error_context))
        CHECK (NOT json_valid(error_context) OR json_type(error_context) = 'object'),
    -- Three in a row make the agent stuck and escalate its run.
    consecutive_failures INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    spawned_at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', spawned_at) IS spawned_at),
    last_heartbeat       TEXT
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', last_heartbeat) IS last_heartbeat),
    completed_at         TEXT
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', completed_at) IS completed_at),
    updated_at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', updated_at) IS updated_at)
) STRICT;

CREATE INDEX idx_build_agents_execution ON build_agent_instances (execution_id)
    WHERE execution_id IS NOT NULL;
CREATE INDEX idx_build_agents_status ON build_agent_instances (status);
-- Stale agents: running, with an old last heartbeat.
CREATE INDEX idx_build_agents_heartbeat ON build_agent_instances (last_heartbeat)
    WHERE status = 'running';

-- Sampled heartbeats (seed B.2), kept 24 hours.
CREATE TABLE agent_heartbeats (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id      TEXT NOT NULL REFERENCES build_agent_instances (instance_id) ON DELETE CASCADE,
    status           TEXT NOT NULL
        CHECK (status IN ('initializing', 'running', 'idle', 'completed', 'failed', 'stuck')),
    current_task_id  TEXT,
    progress_percent INTEGER CHECK (progress_percent BETWEEN 0 AND 100),
    memory_usage_mb  INTEGER CHECK (memory_usage_mb >= 0),
    -- Can exceed 100 on several cores.
    cpu_percent      REAL CHECK (cpu_percent >= 0),
    created_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at)
) STRICT;

-- Recent heartbeats of an agent.
CREATE INDEX idx_heartbeats_instance ON agent_heartbeats (instance_id, created_at DESC);
-- Retention.
CREATE INDEX idx_heartbeats_created_at ON agent_heartbeats (created_at);

-- Who owns which files: a loop or team id per glob pattern. Agents check ownership in Prime.
CREATE TABLE file_ownership (
    pattern    TEXT PRIMARY KEY CHECK (pattern <> ''),
    owner      TEXT NOT NULL CHECK (owner <> ''),
    note       TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', updated_at) IS updated_at)
) STRICT;

CREATE INDEX file_ownership_owner_idx ON file_ownership (owner);

-- The fencing-token high-water mark of each lockable resource. Tokens strictly increase per
-- resource, also across a Redis restart or flush: a lock backend takes its next token from
-- here (high_water + 1, stored back) whenever its own counter could be behind.
CREATE TABLE lock_fencing (
    resource   TEXT PRIMARY KEY CHECK (resource <> ''),
    high_water INTEGER NOT NULL DEFAULT 0 CHECK (high_water >= 0),
    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', updated_at) IS updated_at)
) STRICT;

-- Held file locks of the SQL lock backend (the embedded one; Redis keeps its own). A row whose
-- expires_at has passed is free. token comes from lock_fencing in the same transaction.
CREATE TABLE file_locks (
    resource    TEXT PRIMARY KEY CHECK (resource <> ''),
    holder      TEXT NOT NULL CHECK (holder <> ''),
    token       INTEGER NOT NULL CHECK (token >= 1),
    acquired_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', acquired_at) IS acquired_at),
    expires_at  TEXT NOT NULL
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', expires_at) IS expires_at),
    CONSTRAINT file_locks_expiry CHECK (expires_at > acquired_at)
) STRICT;

CREATE INDEX file_locks_expires_at_idx ON file_locks (expires_at);
-- Locks of a holder, to release them all when the agent goes away.
CREATE INDEX file_locks_holder_idx ON file_locks (holder);

-- +goose Down

DROP TABLE file_locks;
DROP TABLE lock_fencing;
DROP TABLE file_ownership;
DROP TABLE agent_heartbeats;
DROP TABLE build_agent_instances;
