-- Registry schema, Postgres. The SQLite twin is ../sqlite/0001_init.sql: same tables, columns,
-- CHECK and UNIQUE constraints and indexes; keep them in step.
--
-- The Registry owns agent registration and heartbeats, stale-agent detection, resource
-- ownership and file locks with fencing tokens. Locks and live heartbeats are hot state kept in
-- Redis (or in process); these tables are the durable part. Columns that name another service's
-- objects (the Scheduler's executions and tasks) are plain text without a foreign key: another
-- team may run only the Registry, and services meet only through their gRPC contracts.

-- +goose Up

-- A registered build agent (seed B.1).
CREATE TABLE build_agent_instances (
    instance_id          text PRIMARY KEY CHECK (instance_id <> ''),
    -- The Scheduler execution, task and wave the agent works on; NULL while it waits in the pool.
    -- Scheduler ids: no foreign key (see the top of this file).
    execution_id         text,
    current_task_id      text,
    wave_number          integer CHECK (wave_number >= 1),
    agent_type           text NOT NULL DEFAULT 'build-agent' CHECK (agent_type <> ''),
    status               text NOT NULL DEFAULT 'initializing'
        CHECK (status IN ('initializing', 'running', 'idle', 'completed', 'failed', 'stuck')),
    hostname             text NOT NULL DEFAULT '',
    -- What the agent offers (executors, ...), for matching work to agents.
    labels               jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    -- {"maxRetries", "heartbeatIntervalMs", "taskTimeoutMs", "validationTimeoutMs"}
    config               jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(config) = 'object'),
    -- {"code", "message", "taskId", "stackTrace", "timestamp"} of the last error.
    error_context        jsonb CHECK (jsonb_typeof(error_context) = 'object'),
    -- Three in a row make the agent stuck and escalate its run.
    consecutive_failures integer NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    spawned_at           timestamptz NOT NULL DEFAULT now(),
    last_heartbeat       timestamptz,
    completed_at         timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX idx_build_agents_execution ON build_agent_instances (execution_id)
    WHERE execution_id IS NOT NULL;
CREATE INDEX idx_build_agents_status ON build_agent_instances (status);
-- Stale agents: running, with an old last heartbeat.
CREATE INDEX idx_build_agents_heartbeat ON build_agent_instances (last_heartbeat)
    WHERE status = 'running';

-- Sampled heartbeats (seed B.2), kept 24 hours.
CREATE TABLE agent_heartbeats (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id      text NOT NULL REFERENCES build_agent_instances (instance_id) ON DELETE CASCADE,
    status           text NOT NULL
        CHECK (status IN ('initializing', 'running', 'idle', 'completed', 'failed', 'stuck')),
    current_task_id  text,
    progress_percent integer CHECK (progress_percent BETWEEN 0 AND 100),
    memory_usage_mb  integer CHECK (memory_usage_mb >= 0),
    -- Can exceed 100 on several cores.
    cpu_percent      double precision CHECK (cpu_percent >= 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);

-- Recent heartbeats of an agent.
CREATE INDEX idx_heartbeats_instance ON agent_heartbeats (instance_id, created_at DESC);
-- Retention.
CREATE INDEX idx_heartbeats_created_at ON agent_heartbeats (created_at);

-- Who owns which files: a loop or team id per glob pattern. Agents check ownership in Prime.
CREATE TABLE file_ownership (
    pattern    text PRIMARY KEY CHECK (pattern <> ''),
    owner      text NOT NULL CHECK (owner <> ''),
    note       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX file_ownership_owner_idx ON file_ownership (owner);

-- The fencing-token high-water mark of each lockable resource. Tokens strictly increase per
-- resource, also across a Redis restart or flush: a lock backend takes its next token from
-- here (high_water + 1, stored back) whenever its own counter could be behind.
CREATE TABLE lock_fencing (
    resource   text PRIMARY KEY CHECK (resource <> ''),
    high_water bigint NOT NULL DEFAULT 0 CHECK (high_water >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Held file locks of the SQL lock backend (the embedded one; Redis keeps its own). A row whose
-- expires_at has passed is free. token comes from lock_fencing in the same transaction.
CREATE TABLE file_locks (
    resource    text PRIMARY KEY CHECK (resource <> ''),
    holder      text NOT NULL CHECK (holder <> ''),
    token       bigint NOT NULL CHECK (token >= 1),
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CONSTRAINT file_locks_expiry CHECK (expires_at > acquired_at)
);

CREATE INDEX file_locks_expires_at_idx ON file_locks (expires_at);
-- Locks of a holder, to release them all when the agent goes away.
CREATE INDEX file_locks_holder_idx ON file_locks (holder);

-- +goose Down

DROP TABLE file_locks;
DROP TABLE lock_fencing;
DROP TABLE file_ownership;
DROP TABLE agent_heartbeats;
DROP TABLE build_agent_instances;
