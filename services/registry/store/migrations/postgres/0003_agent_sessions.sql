-- Agent sessions and silence, Postgres (issue 12). The SQLite twin is
-- ../sqlite/0003_agent_sessions.sql; keep them in step.
--
--   - every registration may carry the agent process's session (boot id). A registration with
--     another session is a restart of the instance: the record starts afresh, the session it
--     replaced is kept in previous_session_id, and locks_release_pending says that the locks of
--     the old process are still to be released (cleared once they are, so that a registration
--     retried after a failed release releases them then);
--   - an agent is stale (then gone) when it is not finished and its last sign of life, its last
--     heartbeat or else its registration, is old, whatever status it last reported: the partial
--     index of 0001 on the heartbeats of running agents is replaced by one on that time for
--     every unfinished agent.

-- +goose Up

ALTER TABLE build_agent_instances
    ADD COLUMN session_id            text NOT NULL DEFAULT '',
    ADD COLUMN previous_session_id   text NOT NULL DEFAULT '',
    ADD COLUMN locks_release_pending boolean NOT NULL DEFAULT false;

DROP INDEX idx_build_agents_heartbeat;
CREATE INDEX idx_build_agents_last_seen ON build_agent_instances ((coalesce(last_heartbeat, spawned_at)))
    WHERE status NOT IN ('completed', 'failed');

-- +goose Down

DROP INDEX idx_build_agents_last_seen;
CREATE INDEX idx_build_agents_heartbeat ON build_agent_instances (last_heartbeat)
    WHERE status = 'running';

ALTER TABLE build_agent_instances
    DROP COLUMN locks_release_pending,
    DROP COLUMN previous_session_id,
    DROP COLUMN session_id;
