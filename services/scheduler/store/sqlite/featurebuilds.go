package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// featureBuildColumns are the columns a feature build is read with (scanFeatureBuild).
const featureBuildColumns = `b.id, b.feature, b.task_list_id, b.state, b.done_criteria, b.started_at, b.updated_at`

func scanFeatureBuild(row scanner) (*schedulerv1.FeatureBuild, string, error) {
	var r store.FeatureBuildRow
	if err := row.Scan(&r.ID, &r.Feature, &r.TaskListID, &r.State, &r.DoneCriteria, timeCol{&r.CreateTime}, timeCol{&r.Updated}); err != nil {
		return nil, "", err
	}
	fb, err := store.DecodeFeatureBuild(r)
	return fb, r.DoneCriteria, err
}

// buildError maps the violations of a feature build's insert or update to the store's errors.
func buildError(err error, fb *schedulerv1.FeatureBuild) error {
	switch database.ViolationOf(err) {
	case database.UniqueViolation:
		if strings.Contains(err.Error(), "feature_builds.feature") {
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
	at := now()
	_, err = s.DB().ExecContext(ctx, `INSERT INTO feature_builds (id, feature, task_list_id, status, status_reason,
		max_iterations, current_iteration, criteria_summary, repeated_failures, regressions, loop_key,
		build_status, state, done_criteria, completed_at, started_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Feature, r.TaskListID, r.Status, r.StatusReason, r.MaxIterations, r.CurrentIteration,
		r.CriteriaSummary, r.RepeatedFailures, r.Regressions, r.LoopKey, r.BuildStatus, r.State, r.DoneCriteria,
		nts(r.CompletedAt), ts(at), ts(at))
	if err != nil {
		if mapped := buildError(err, fb); mapped != err {
			return mapped
		}
		return fmt.Errorf("scheduler store: create feature build %q: %w", fb.GetId(), err)
	}
	fb.CreateTime, fb.UpdateTime = timestamppb.New(at), timestamppb.New(at)
	return nil
}

// GetFeatureBuild reads one feature build.
func (s *Store) GetFeatureBuild(ctx context.Context, id string) (*schedulerv1.FeatureBuild, string, error) {
	fb, dc, err := scanFeatureBuild(s.DB().QueryRowContext(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b WHERE b.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, "", fmt.Errorf("feature build %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, "", fmt.Errorf("scheduler store: get feature build %q: %w", id, err)
	}
	return fb, dc, nil
}

// LatestFeatureBuild reads the newest build of a feature.
func (s *Store) LatestFeatureBuild(ctx context.Context, feature string) (*schedulerv1.FeatureBuild, string, error) {
	fb, dc, err := scanFeatureBuild(s.DB().QueryRowContext(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b
		WHERE b.feature = ? ORDER BY b.started_at DESC, b.id DESC LIMIT 1`, feature))
	if errors.Is(err, sql.ErrNoRows) {
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
	if q.After != nil {
		where = append(where, "(b.started_at, b.id) < (?, ?)")
		args = append(args, ts(q.After.CreateTime), q.After.ID)
	}
	if q.Feature != "" {
		where = append(where, "b.feature = ?")
		args = append(args, q.Feature)
	}
	if len(q.Statuses) > 0 {
		names := store.FeatureBuildStatusNames(q.Statuses)
		where = append(where, "b.build_status IN (?"+strings.Repeat(", ?", len(names)-1)+")")
		for _, n := range names {
			args = append(args, n)
		}
	}
	query := `SELECT ` + featureBuildColumns + ` FROM feature_builds b`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY b.started_at DESC, b.id DESC LIMIT ?`
	args = append(args, q.PageSize+1)
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
	names := store.FeatureBuildStatusNames(statuses)
	args := make([]any, 0, len(names)+1)
	for _, n := range names {
		args = append(args, n)
	}
	args = append(args, limit)
	builds, err := s.queryBuilds(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b
		WHERE b.build_status IN (?`+strings.Repeat(", ?", len(names)-1)+`) ORDER BY b.started_at, b.id LIMIT ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("scheduler store: feature builds in status: %w", err)
	}
	return builds, nil
}

func (s *Store) queryBuilds(ctx context.Context, query string, args ...any) ([]*schedulerv1.FeatureBuild, error) {
	rows, err := s.DB().QueryContext(ctx, query, args...)
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

// UpdateFeatureBuild changes a build under the database's write lock.
func (s *Store) UpdateFeatureBuild(ctx context.Context, id string, fn func(fb *schedulerv1.FeatureBuild) error) (*schedulerv1.FeatureBuild, error) {
	var out *schedulerv1.FeatureBuild
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		fb, dc, err := scanFeatureBuild(tx.QueryRowContext(ctx, `SELECT `+featureBuildColumns+` FROM feature_builds b WHERE b.id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
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
		at := now()
		_, err = tx.ExecContext(ctx, `UPDATE feature_builds SET status = ?, status_reason = ?, max_iterations = ?,
			current_iteration = ?, criteria_summary = ?, repeated_failures = ?, regressions = ?,
			build_status = ?, state = ?, completed_at = ?, updated_at = ? WHERE id = ?`,
			r.Status, r.StatusReason, r.MaxIterations, r.CurrentIteration, r.CriteriaSummary, r.RepeatedFailures,
			r.Regressions, r.BuildStatus, r.State, nts(r.CompletedAt), ts(at), id)
		if err != nil {
			if mapped := buildError(err, fb); mapped != err {
				return mapped
			}
			return fmt.Errorf("scheduler store: update feature build %q: %w", id, err)
		}
		fb.CreateTime, fb.UpdateTime = created, timestamppb.New(at)
		out = fb
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
