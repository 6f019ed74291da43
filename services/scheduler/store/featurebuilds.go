package store

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// FeatureBuilds keeps the build-feature loop's state (seed 002 §16: build-state.json): one row per
// build, its FeatureBuild proto (iterations, criteria progress, recovery log) as JSON beside the
// columns that queries and constraints need, and the done-criteria it verifies against.
//
// At most one build of a feature has not ended (status PENDING or RUNNING): creating a second, or
// moving an ended one back to RUNNING (resume) while another runs, is ErrActive.
type FeatureBuilds interface {
	// CreateFeatureBuild stores a new build (fb.Id set by the caller) with its done-criteria. It
	// sets fb's CreateTime and UpdateTime (store time). ErrAlreadyExists when the id is taken;
	// ErrActive when another build of fb.Feature has not ended; ErrNotFound when fb.TaskListId
	// names no task list. Nothing is stored on error.
	CreateFeatureBuild(ctx context.Context, fb *schedulerv1.FeatureBuild, doneCriteria string) error
	// GetFeatureBuild returns a build and its done-criteria. ErrNotFound when it does not exist.
	GetFeatureBuild(ctx context.Context, id string) (*schedulerv1.FeatureBuild, string, error)
	// LatestFeatureBuild returns the newest build of a feature (create time, then id) and its
	// done-criteria. ErrNotFound when the feature has none.
	LatestFeatureBuild(ctx context.Context, feature string) (*schedulerv1.FeatureBuild, string, error)
	// ListFeatureBuilds returns a page of builds, newest first (create time, then id, both
	// descending), and the cursor of the next page, nil on the last page.
	ListFeatureBuilds(ctx context.Context, q ListFeatureBuildsQuery) ([]*schedulerv1.FeatureBuild, *Cursor, error)
	// UpdateFeatureBuild runs fn on the build read under its row's write lock (Postgres SELECT
	// ... FOR UPDATE; SQLite the database's write lock) and stores what fn left in it (id,
	// feature, task list and create time are the store's; update time = store now), in one transaction; it
	// returns the build as stored. When fn returns an error nothing changes and that error is
	// returned unchanged; fn may run again when Postgres retries the transaction, so it must not
	// have effects outside the build. ErrNotFound when the build does not exist; ErrActive when fn
	// moves an ended build back to PENDING or RUNNING while another build of its feature runs.
	UpdateFeatureBuild(ctx context.Context, id string, fn func(fb *schedulerv1.FeatureBuild) error) (*schedulerv1.FeatureBuild, error)
	// FeatureBuildsInStatus returns the builds in one of the statuses, oldest first (create time,
	// then id), at most limit; none for no status (the leader's driver reads the open ones).
	FeatureBuildsInStatus(ctx context.Context, statuses []schedulerv1.FeatureBuildStatus, limit int) ([]*schedulerv1.FeatureBuild, error)
}

// ListFeatureBuildsQuery selects a page of feature builds.
type ListFeatureBuildsQuery struct {
	// PageSize is the most builds to return (at least 1).
	PageSize int
	// After is the cursor the previous page returned; nil for the first page.
	After *Cursor
	// Feature keeps only builds of this feature; "" keeps all.
	Feature string
	// Statuses keeps only builds in one of these statuses; empty keeps all.
	Statuses []schedulerv1.FeatureBuildStatus
}

// FeatureBuildRow is a feature build as its columns hold it.
type FeatureBuildRow struct {
	ID, Feature         string
	TaskListID          *string
	Status, BuildStatus string // the seed's status (IN_PROGRESS, ...) and the API's (pending, ...)
	StatusReason        string
	MaxIterations       int32
	CurrentIteration    int32
	RepeatedFailures    int32
	Regressions         int32
	LoopKey             string
	State, DoneCriteria string // protojson of the rest; done-criteria.md
	CriteriaSummary     string // JSON object (seed §16.2 criteria)
	CreateTime, Updated time.Time
	CompletedAt         *time.Time
}

// FeatureBuildStatusName is the build_status column's name of s (UNSPECIFIED: pending).
func FeatureBuildStatusName(s schedulerv1.FeatureBuildStatus) string {
	switch s {
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING:
		return "running"
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED:
		return "completed"
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED:
		return "failed"
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED:
		return "cancelled"
	}
	return "pending"
}

// FeatureBuildEnded reports whether a build in status s has ended.
func FeatureBuildEnded(s schedulerv1.FeatureBuildStatus) bool {
	return s == schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED ||
		s == schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED ||
		s == schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED
}

// seedStatus is the seed's build-state status of fb (the status column).
func seedStatus(fb *schedulerv1.FeatureBuild) string {
	switch fb.GetStatus() {
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED:
		if fb.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
			return "CONVERGED_PENDING_HUMAN"
		}
		return "CONVERGED"
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED:
		if fb.GetOutcome() == commonv1.Outcome_OUTCOME_BLOCKED {
			return "BLOCKED"
		}
		return "ESCALATED"
	case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED:
		return "CANCELLED"
	}
	return "IN_PROGRESS"
}

// EncodeFeatureBuild returns the row of fb. The create and update times are the store's: the
// backends set them.
func EncodeFeatureBuild(fb *schedulerv1.FeatureBuild, doneCriteria string) (FeatureBuildRow, error) {
	c := proto.CloneOf(fb)
	if c.GetStatus() == schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_UNSPECIFIED {
		c.Status = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING
	}
	r := FeatureBuildRow{ID: c.GetId(), Feature: c.GetFeature(), TaskListID: nullable(c.GetTaskListId()),
		Status: seedStatus(c), BuildStatus: FeatureBuildStatusName(c.GetStatus()), StatusReason: c.GetExitMessage(),
		MaxIterations: c.GetMaxIterations(), CurrentIteration: c.GetCurrentIteration(), RepeatedFailures: c.GetRepeatedFailures(),
		Regressions: c.GetRegressions(), LoopKey: c.GetId(), DoneCriteria: doneCriteria, CompletedAt: timeOf(c.GetEndTime())}
	cp := c.GetCriteria()
	summary, err := jsonText(map[string]int32{"total": cp.GetTotal(), "autoVerify": cp.GetAutoVerify(), "humanVerify": cp.GetHumanVerify(),
		"toolVerify": cp.GetToolVerify(), "passing": cp.GetPassing(), "failing": cp.GetFailing(), "pending": cp.GetPending()})
	if err != nil {
		return r, err
	}
	r.CriteriaSummary = summary
	c.CreateTime, c.UpdateTime = nil, nil
	b, err := protojson.Marshal(c)
	if err != nil {
		return r, fmt.Errorf("store: encode feature build: %w", err)
	}
	r.State = string(b)
	if r.State == "" {
		r.State = "{}"
	}
	return r, nil
}

// DecodeFeatureBuild returns the build of row r (state, then the columns the store owns).
func DecodeFeatureBuild(r FeatureBuildRow) (*schedulerv1.FeatureBuild, error) {
	fb := &schedulerv1.FeatureBuild{}
	if err := unmarshal.Unmarshal([]byte(r.State), fb); err != nil {
		return nil, fmt.Errorf("store: decode feature build %q: %w", r.ID, err)
	}
	fb.Id, fb.Feature, fb.TaskListId = r.ID, r.Feature, deref(r.TaskListID)
	fb.CreateTime, fb.UpdateTime = timestamppb.New(r.CreateTime), timestamppb.New(r.Updated)
	return fb, nil
}

// FeatureBuildStatusNames are the build_status names of statuses.
func FeatureBuildStatusNames(statuses []schedulerv1.FeatureBuildStatus) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = FeatureBuildStatusName(s)
	}
	return out
}
