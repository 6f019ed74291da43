-- Agent sessions and silence, SQLite (issue 12). The twin of ../postgres/0003_agent_sessions.sql,
-- in SQLite's types (see 0001_init.sql):
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

ALTER TABLE build_agent_instances ADD COLUMN session_id TEXT NOT NULL DEFAULT '';
ALTER TABLE build_agent_instances ADD COLUMN previous_session_id TEXT NOT NULL DEFAULT '';
ALTER TABLE build_agent_instances
    ADD COLUMN locks_release_pending INTEGER NOT NULL DEFAULT 0 CHECK (locks_release_pending IN (0, 1));

DROP INDEX idx_build_agents_heartbeat;
CREATE INDEX idx_build_agents_last_seen ON build_agent_instances (coalesce(last_heartbeat, spawned_at))
    WHERE status NOT IN ('completed', 'failed');

-- +goose Down

DROP INDEX idx_build_agents_last_seen;
CREATE INDEX idx_build_agents_heartbeat ON build_agent_instances (last_heartbeat)
    WHERE status = 'running';

ALTER TABLE build_agent_instances DROP COLUMN locks_release_pending;
ALTER TABLE build_agent_instances DROP COLUMN previous_session_id;
ALTER TABLE build_agent_instances DROP COLUMN session_id;
