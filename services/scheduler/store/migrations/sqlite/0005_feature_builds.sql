-- The build-feature loop's state (issue 16). The Postgres twin is ../postgres/0005_feature_builds.sql;
-- keep them in step (see there for what each column is).

-- +goose Up

ALTER TABLE feature_builds ADD COLUMN build_status TEXT NOT NULL DEFAULT 'pending'
    CHECK (build_status IN ('pending', 'running', 'completed', 'failed', 'cancelled'));
ALTER TABLE feature_builds ADD COLUMN state TEXT NOT NULL DEFAULT '{}'
    CHECK (json_valid(state))
    CHECK (NOT json_valid(state) OR json_type(state) = 'object');
ALTER TABLE feature_builds ADD COLUMN done_criteria TEXT NOT NULL DEFAULT '';

CREATE INDEX feature_builds_open_idx ON feature_builds (started_at) WHERE build_status IN ('pending', 'running');

-- +goose Down

DROP INDEX feature_builds_open_idx;
ALTER TABLE feature_builds DROP COLUMN done_criteria;
ALTER TABLE feature_builds DROP COLUMN state;
ALTER TABLE feature_builds DROP COLUMN build_status;
