-- The build-feature loop's state (issue 16). The SQLite twin is ../sqlite/0005_feature_builds.sql;
-- keep them in step.
--
-- feature_builds (0001) keeps its columns: status stays the seed's build-state status
-- (IN_PROGRESS while the build runs, so feature_builds_active_uniq still allows one running build
-- per feature), loop_key is the build's id (the Verifier's loop of its reports). Added:
--   - build_status: the API's FeatureBuildStatus (pending, running, completed, failed, cancelled);
--   - state: the rest of the FeatureBuild as protojson (iterations, criteria, recovery log, ...),
--     the seed's build-state.json;
--   - done_criteria: the done-criteria.md text the build verifies against.

-- +goose Up

ALTER TABLE feature_builds ADD COLUMN build_status text NOT NULL DEFAULT 'pending'
    CHECK (build_status IN ('pending', 'running', 'completed', 'failed', 'cancelled'));
ALTER TABLE feature_builds ADD COLUMN state jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(state) = 'object');
ALTER TABLE feature_builds ADD COLUMN done_criteria text NOT NULL DEFAULT '';

-- The leader's driver reads the builds that have not ended.
CREATE INDEX feature_builds_open_idx ON feature_builds (started_at) WHERE build_status IN ('pending', 'running');

-- +goose Down

DROP INDEX feature_builds_open_idx;
ALTER TABLE feature_builds DROP COLUMN done_criteria;
ALTER TABLE feature_builds DROP COLUMN state;
ALTER TABLE feature_builds DROP COLUMN build_status;
