package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// featureBuildColumns are the columns a feature build is read with (scanFeatureBuild).
const featureBuildColumns = `b.id, b.feature, b.task_list_id, b.state::text, b.done_criteria, b.started_at, b.updated_at`

func scanFeatureBuild(row pgx.Row) (*schedulerv1.FeatureBuild, string, error) {
	var r store.FeatureBuildRow
	if err := row.Scan(&r.ID, &r.Feature, &r.TaskListID, &r.State, &r.DoneCriteria, &r.CreateTime, &r.Updated); err != nil {
		return nil, "", err
	}
	utc(&r.CreateTime, &r.Updated)
	fb, err := store.DecodeFeatureBuild(r)
	return fb, r.DoneCriteria, err
}

// buildError maps the violations of a feature build's insert or update to the store's errors.
func buildError(err error, fb *schedulerv1.FeatureBuild) error {
	switch database.ViolationOf(err) {
	case database.UniqueViolation:
		if strings.Contains(err.Error(), "feature_builds_active_uniq") {
			return fmt.Errorf("feature %q: %w", fb.GetFeature(), store.ErrActive)
		}
		return fmt.Errorf("feature build %q: %w", fb.GetId(), store.ErrAlreadyExists)
	case database.ForeignKeyViolation:
		return fmt.Errorf("task list %q: %w", fb.GetTaskListId(), store.ErrNotFound)
	}
	return err
}

// CreateFeatureBuild stores a new feature build.
func (s *Store) CreateFeatureBuild(ctx context.Context, fb *schedulerv1.FeatureBuild, doneCriteria string) error {
	r, err := store.EncodeFeatureBuild(fb, doneCriteria)
	if err != nil {
		return err
	}
	var created time.Time
	err = s.Pool().QueryRow(ctx, `INSERT INTO feature_builds (id, feature, task_list_id, status, status_reason,
		max_iterations, current_iteration, criteria_summary, repeated_failures, regressions, loop_key,
		build_status, state, done_criteria, completed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12, $13::jsonb, $14, $15)
		RETURNING started_at`,
		r.ID, r.Feature, r.TaskListID, r.Status, r.StatusReason, r.MaxIterations, r.CurrentIteration,
		r.CriteriaSummary, r.RepeatedFailures, r.Regressions, r.LoopKey, r.BuildStatus, r.State, r.DoneCriteria,
		r.CompletedAt).Scan(&created)
	if err != nil {
		if mapped := buildError(err, fb); mapped != err {
			return mapped
		}
		return fmt.Errorf("scheduler store: create feature build %q: %w", fb.GetId(), err)
	}
	got, _, err := s.GetFeatureBuild(ctx, fb.GetId())
	if err != nil {
		return err
	}
	fb.CreateTime, fb.UpdateTime = got.GetCreateTime(), got.GetUpdateTime()
	return nil
}

// GetFeatureBuild reads one feature build.
func (s *Store) GetFeatureBuild(ctx context.Context, id string) (*schedulerv1.FeatureBuild, string, error) {
	fb, dc, err := scanFeatureBuild(s.Pool().QueryRow(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b WHERE b.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("feature build %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("scheduler store: get feature build %q: %w", id, err)
	}
	return fb, dc, nil
}

// LatestFeatureBuild reads the newest build of a feature.
func (s *Store) LatestFeatureBuild(ctx context.Context, feature string) (*schedulerv1.FeatureBuild, string, error) {
	fb, dc, err := scanFeatureBuild(s.Pool().QueryRow(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b
		WHERE b.feature = $1 ORDER BY b.started_at DESC, b.id DESC LIMIT 1`, feature))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", fmt.Errorf("feature %q has no build: %w", feature, store.ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("scheduler store: latest build of %q: %w", feature, err)
	}
	return fb, dc, nil
}

// ListFeatureBuilds reads a page of feature builds, newest first.
func (s *Store) ListFeatureBuilds(ctx context.Context, q store.ListFeatureBuildsQuery) ([]*schedulerv1.FeatureBuild, *store.Cursor, error) {
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	if q.After != nil {
		where = append(where, "(b.started_at, b.id) < ("+arg(q.After.CreateTime)+", "+arg(q.After.ID)+")")
	}
	if q.Feature != "" {
		where = append(where, "b.feature = "+arg(q.Feature))
	}
	if len(q.Statuses) > 0 {
		where = append(where, "b.build_status = ANY("+arg(store.FeatureBuildStatusNames(q.Statuses))+"::text[])")
	}
	query := `SELECT ` + featureBuildColumns + ` FROM feature_builds b`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY b.started_at DESC, b.id DESC LIMIT ` + arg(q.PageSize+1)
	builds, err := s.queryBuilds(ctx, query, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler store: list feature builds: %w", err)
	}
	if len(builds) <= q.PageSize {
		return builds, nil, nil
	}
	last := builds[q.PageSize-1]
	return builds[:q.PageSize], &store.Cursor{CreateTime: last.GetCreateTime().AsTime(), ID: last.GetId()}, nil
}

// FeatureBuildsInStatus reads the builds in one of the statuses, oldest first.
func (s *Store) FeatureBuildsInStatus(ctx context.Context, statuses []schedulerv1.FeatureBuildStatus, limit int) ([]*schedulerv1.FeatureBuild, error) {
	if len(statuses) == 0 {
		return nil, nil
	}
	builds, err := s.queryBuilds(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b
		WHERE b.build_status = ANY($1::text[]) ORDER BY b.started_at, b.id LIMIT $2`,
		store.FeatureBuildStatusNames(statuses), limit)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: feature builds in status: %w", err)
	}
	return builds, nil
}

func (s *Store) queryBuilds(ctx context.Context, query string, args ...any) ([]*schedulerv1.FeatureBuild, error) {
	rows, err := s.Pool().Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*schedulerv1.FeatureBuild
	for rows.Next() {
		fb, _, err := scanFeatureBuild(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, fb)
	}
	return out, rows.Err()
}

// UpdateFeatureBuild changes a build under its row lock.
func (s *Store) UpdateFeatureBuild(ctx context.Context, id string, fn func(fb *schedulerv1.FeatureBuild) error) (*schedulerv1.FeatureBuild, error) {
	var out *schedulerv1.FeatureBuild
	err := pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		fb, dc, err := scanFeatureBuild(tx.QueryRow(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b
			WHERE b.id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("feature build %q: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("scheduler store: update feature build %q: %w", id, err)
		}
		created, feature, list := fb.GetCreateTime(), fb.GetFeature(), fb.GetTaskListId()
		if err := fn(fb); err != nil {
			return err
		}
		fb.Id, fb.Feature, fb.TaskListId = id, feature, list
		r, err := store.EncodeFeatureBuild(fb, dc)
		if err != nil {
			return err
		}
		var updated time.Time
		err = tx.QueryRow(ctx, `UPDATE feature_builds SET status = $2, status_reason = $3, max_iterations = $4,
			current_iteration = $5, criteria_summary = $6::jsonb, repeated_failures = $7, regressions = $8,
			build_status = $9, state = $10::jsonb, completed_at = $11, updated_at = now()
			WHERE id = $1 RETURNING updated_at`,
			id, r.Status, r.StatusReason, r.MaxIterations, r.CurrentIteration, r.CriteriaSummary, r.RepeatedFailures,
			r.Regressions, r.BuildStatus, r.State, r.CompletedAt).Scan(&updated)
		if err != nil {
			if mapped := buildError(err, fb); mapped != err {
				return mapped
			}
			return fmt.Errorf("scheduler store: update feature build %q: %w", id, err)
		}
		fb.CreateTime = created
		out = fb
		r.Updated = updated.UTC()
		out.UpdateTime = timestamppb.New(r.Updated)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
