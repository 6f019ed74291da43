-- What the Registry service needs beyond 0001, Postgres. The SQLite twin is
-- ../sqlite/0002_registry_service.sql; keep them in step.
--
--   - agents keep their last reported progress and resource use (AgentInstance answers them);
--   - ownership patterns carry their literal base directory, so that GetOwner looks up the
--     patterns that can match a path by the path's ancestors instead of scanning them all;
--   - fencing tokens are epoch << 32 | counter, where the epoch is durable here and the counter
--     lives with the locks in the lock backend (Redis, or in process for `converge dev`). The
--     per-resource high-water marks of lock_fencing and the SQL lock table file_locks of 0001
--     were never used: locks are hot state. They are dropped.

-- +goose Up

ALTER TABLE build_agent_instances
    ADD COLUMN progress_percent integer NOT NULL DEFAULT 0 CHECK (progress_percent BETWEEN 0 AND 100),
    ADD COLUMN memory_usage_mb  integer NOT NULL DEFAULT 0 CHECK (memory_usage_mb >= 0),
    ADD COLUMN cpu_percent      double precision NOT NULL DEFAULT 0 CHECK (cpu_percent >= 0);

-- The pattern's literal leading directories ('' for none): every path the pattern matches is
-- base or lies under it. '' is a candidate for every path, so a row with the default is still
-- found, only less directly.
ALTER TABLE file_ownership ADD COLUMN base text NOT NULL DEFAULT '';
CREATE INDEX file_ownership_base_idx ON file_ownership (base);

-- The fencing epoch of each lock backend, named by its key space (e.g. the Redis key prefix).
-- A backend takes epoch + 1 whenever its state may have been lost (Redis flushed, restarted or
-- failed over; the `converge dev` process restarted), so its tokens keep increasing.
CREATE TABLE lock_epochs (
    name       text PRIMARY KEY CHECK (name <> ''),
    epoch      bigint NOT NULL CHECK (epoch >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

DROP TABLE file_locks;
DROP TABLE lock_fencing;

-- +goose Down

CREATE TABLE lock_fencing (
    resource   text PRIMARY KEY CHECK (resource <> ''),
    high_water bigint NOT NULL DEFAULT 0 CHECK (high_water >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE file_locks (
    resource    text PRIMARY KEY CHECK (resource <> ''),
    holder      text NOT NULL CHECK (holder <> ''),
    token       bigint NOT NULL CHECK (token >= 1),
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CONSTRAINT file_locks_expiry CHECK (expires_at > acquired_at)
);
CREATE INDEX file_locks_expires_at_idx ON file_locks (expires_at);
CREATE INDEX file_locks_holder_idx ON file_locks (holder);

DROP TABLE lock_epochs;
DROP INDEX file_ownership_base_idx;
ALTER TABLE file_ownership DROP COLUMN base;
ALTER TABLE build_agent_instances
    DROP COLUMN cpu_percent,
    DROP COLUMN memory_usage_mb,
    DROP COLUMN progress_percent;
