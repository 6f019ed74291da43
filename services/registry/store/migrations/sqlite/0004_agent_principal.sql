-- The principal of an agent instance, SQLite. The twin of ../postgres/0004_agent_principal.sql:
--
--   - the authenticated principal that registered an instance first (auth.Principal.Name; ''
--     when the server authenticates nobody). Only that principal (or an operator) may register it
--     again, heartbeat for it, or lock, renew and release as it.

-- +goose Up

ALTER TABLE build_agent_instances ADD COLUMN principal TEXT NOT NULL DEFAULT '';

-- +goose Down

ALTER TABLE build_agent_instances DROP COLUMN principal;
