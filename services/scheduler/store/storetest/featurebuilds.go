package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// featureBuildTests is the feature-build part of the suite (store.FeatureBuilds).
var featureBuildTests = []test{
	{"CreateAndGet", testFeatureBuildCreateAndGet},
	{"OneRunningPerFeature", testFeatureBuildOneRunning},
	{"Update", testFeatureBuildUpdate},
	{"UpdateSerialises", testFeatureBuildUpdateSerialises},
	{"ListAndLatest", testFeatureBuildList},
	{"DeleteTaskListWhileRunning", testFeatureBuildBlocksDelete},
}

func newBuild(id, feature, list string) *schedulerv1.FeatureBuild {
	return &schedulerv1.FeatureBuild{Id: id, Feature: feature, TaskListId: list, MaxIterations: 5,
		Status: schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING, Autonomy: schedulerv1.Autonomy_AUTONOMY_DEFAULT,
		ScopeGuards: &schedulerv1.ScopeGuards{BlocklistGlobs: []string{".env*"}, MaxFilesPerIteration: 10}}
}

func testFeatureBuildCreateAndGet(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 2)
	fb := newBuild("fb-1", "export", "tl")
	fb.Iterations = []*schedulerv1.FeatureIteration{{Number: 1, ExecutionId: "ex-1", Summary: "built",
		Verification: &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_FAILED, FailedCriteria: []string{"F1"}}}}
	fb.RecoveryLog = []*schedulerv1.RecoveryLogEntry{{Issue: "App not running", Action: "start", Result: "Started", Succeeded: true, Attempt: 1}}
	require.NoError(t, s.CreateFeatureBuild(ctx, fb, "# criteria\n"))
	require.NotNil(t, fb.CreateTime)

	got, dc, err := s.GetFeatureBuild(ctx, "fb-1")
	require.NoError(t, err)
	require.Equal(t, "# criteria\n", dc)
	require.True(t, proto.Equal(fb, got), "want %v\ngot  %v", fb, got)

	_, _, err = s.GetFeatureBuild(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.CreateFeatureBuild(ctx, newBuild("fb-1", "other", "tl"), ""), store.ErrAlreadyExists)
	require.ErrorIs(t, s.CreateFeatureBuild(ctx, newBuild("fb-2", "other", "no-list"), ""), store.ErrNotFound)
}

func testFeatureBuildOneRunning(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	require.NoError(t, s.CreateFeatureBuild(ctx, newBuild("fb-1", "export", "tl"), ""))
	require.ErrorIs(t, s.CreateFeatureBuild(ctx, newBuild("fb-2", "export", "tl"), ""), store.ErrActive)
	require.NoError(t, s.CreateFeatureBuild(ctx, newBuild("fb-3", "import", "tl"), ""), "another feature may run")

	// Once the first ends, a second may start; the first cannot be resumed while it runs.
	_, err := s.UpdateFeatureBuild(ctx, "fb-1", func(fb *schedulerv1.FeatureBuild) error {
		fb.Status, fb.Outcome = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_BLOCKED
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, s.CreateFeatureBuild(ctx, newBuild("fb-2", "export", "tl"), ""))
	_, err = s.UpdateFeatureBuild(ctx, "fb-1", func(fb *schedulerv1.FeatureBuild) error {
		fb.Status = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING
		return nil
	})
	require.ErrorIs(t, err, store.ErrActive)
	got, _, err := s.GetFeatureBuild(ctx, "fb-1")
	require.NoError(t, err)
	require.Equal(t, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, got.Status, "a refused update changes nothing")
}

func testFeatureBuildUpdate(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	fb := newBuild("fb-1", "export", "tl")
	require.NoError(t, s.CreateFeatureBuild(ctx, fb, "dc"))

	stop := errors.New("stop")
	_, err := s.UpdateFeatureBuild(ctx, "fb-1", func(fb *schedulerv1.FeatureBuild) error {
		fb.CurrentIteration = 3
		return stop
	})
	require.ErrorIs(t, err, stop)
	_, err = s.UpdateFeatureBuild(ctx, "nope", func(*schedulerv1.FeatureBuild) error { return nil })
	require.ErrorIs(t, err, store.ErrNotFound)

	out, err := s.UpdateFeatureBuild(ctx, "fb-1", func(b *schedulerv1.FeatureBuild) error {
		require.EqualValues(t, 0, b.CurrentIteration, "the failed update was rolled back")
		b.Status, b.CurrentIteration, b.CurrentExecutionId = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING, 1, "ex-1"
		b.Iterations = append(b.Iterations, &schedulerv1.FeatureIteration{Number: 1, ExecutionId: "ex-1"})
		b.Id, b.Feature = "changed", "changed" // the store's: ignored
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, "fb-1", out.Id)
	require.Equal(t, "export", out.Feature)
	require.True(t, proto.Equal(fb.CreateTime, out.CreateTime))
	require.False(t, out.UpdateTime.AsTime().Before(fb.UpdateTime.AsTime()))
	got, dc, err := s.GetFeatureBuild(ctx, "fb-1")
	require.NoError(t, err)
	require.Equal(t, "dc", dc, "the done-criteria are kept")
	require.True(t, proto.Equal(out, got), "want %v\ngot  %v", out, got)
	require.Len(t, got.Iterations, 1)
}

// Concurrent updates of one build serialise: none is lost.
func testFeatureBuildUpdateSerialises(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	require.NoError(t, s.CreateFeatureBuild(ctx, newBuild("fb-1", "export", "tl"), ""))
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.UpdateFeatureBuild(ctx, "fb-1", func(b *schedulerv1.FeatureBuild) error {
				b.RecoveryLog = append(b.RecoveryLog, &schedulerv1.RecoveryLogEntry{Issue: fmt.Sprint(i)})
				return nil
			})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	got, _, err := s.GetFeatureBuild(ctx, "fb-1")
	require.NoError(t, err)
	require.Len(t, got.RecoveryLog, n)
}

func testFeatureBuildList(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	for i := range 5 {
		fb := newBuild(fmt.Sprintf("fb-%d", i), fmt.Sprintf("f%d", i%2), "tl")
		if i < 3 {
			fb.Status = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED
		}
		require.NoError(t, s.CreateFeatureBuild(ctx, fb, ""))
	}
	var all []string
	q := store.ListFeatureBuildsQuery{PageSize: 2}
	for {
		page, next, err := s.ListFeatureBuilds(ctx, q)
		require.NoError(t, err)
		all = append(all, ids(page)...)
		if next == nil {
			break
		}
		q.After = next
	}
	require.Equal(t, []string{"fb-4", "fb-3", "fb-2", "fb-1", "fb-0"}, all)

	page, _, err := s.ListFeatureBuilds(ctx, store.ListFeatureBuildsQuery{PageSize: 10, Feature: "f0"})
	require.NoError(t, err)
	require.Equal(t, []string{"fb-4", "fb-2", "fb-0"}, ids(page))
	page, _, err = s.ListFeatureBuilds(ctx, store.ListFeatureBuildsQuery{PageSize: 10,
		Statuses: []schedulerv1.FeatureBuildStatus{schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING}})
	require.NoError(t, err)
	require.Equal(t, []string{"fb-4", "fb-3"}, ids(page))

	open, err := s.FeatureBuildsInStatus(ctx, []schedulerv1.FeatureBuildStatus{schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING,
		schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING}, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"fb-3", "fb-4"}, ids(open), "oldest first")
	none, err := s.FeatureBuildsInStatus(ctx, nil, 10)
	require.NoError(t, err)
	require.Empty(t, none)

	latest, _, err := s.LatestFeatureBuild(ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, "fb-3", latest.Id)
	_, _, err = s.LatestFeatureBuild(ctx, "none")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A task list with a running feature build cannot be deleted; once the build ended it can, and
// the build stays, without its list.
func testFeatureBuildBlocksDelete(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	newList(t, s, "tl", 1)
	require.NoError(t, s.CreateFeatureBuild(ctx, newBuild("fb-1", "export", "tl"), ""))
	require.ErrorIs(t, s.DeleteTaskList(ctx, "tl"), store.ErrActive)
	_, err := s.UpdateFeatureBuild(ctx, "fb-1", func(b *schedulerv1.FeatureBuild) error {
		b.Status, b.Outcome = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED, commonv1.Outcome_OUTCOME_CONVERGED
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, s.DeleteTaskList(ctx, "tl"))
	got, _, err := s.GetFeatureBuild(ctx, "fb-1")
	require.NoError(t, err)
	require.Empty(t, got.TaskListId)
}
