package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/ids"
	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/services/scheduler/plan"
	"github.com/converge-dev/converge/services/scheduler/store"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// The build-feature loop (seed 002 "Build Feature Agent"): the RPCs. The loop itself runs on the
// leader's driver (featurebuild_loop.go), so a Scheduler restart or a killed replica resumes it
// from the store.

const (
	defaultMaxIterations  = 5
	maxIterationsCeiling  = 100 // the store's check
	defaultBuildsPage     = 100
	defaultMaxFiles       = 10
	defaultMaxLines       = 500
	featureBuildIDPrefix  = "fb"
	featureBuildRunPrefix = "converge/"
)

// defaultScopeGuards are the seed's §15 guards, adapted: environment files and git internals are
// never changed; 10 files and 500 lines per iteration.
func defaultScopeGuards() *schedulerv1.ScopeGuards {
	return &schedulerv1.ScopeGuards{BlocklistGlobs: []string{".env*", "**/.env*", ".git/**"},
		MaxFilesPerIteration: defaultMaxFiles, MaxLinesPerIteration: defaultMaxLines}
}

// StartFeatureBuild starts (or, with resume, continues) a build of a feature. The leader's driver
// runs its iterations.
func (s *Server) StartFeatureBuild(ctx context.Context, req *schedulerv1.StartFeatureBuildRequest) (*schedulerv1.StartFeatureBuildResponse, error) {
	if req.GetResume() && !req.GetDryRun() {
		return s.resumeFeatureBuild(ctx, req)
	}
	bad := &badRequest{request: "StartFeatureBuildRequest"}
	var spec *schedulerv1.TaskListSpec
	listID := req.GetTaskListId()
	if inline := req.GetTaskList(); inline != nil {
		for _, v := range tasklist.Validate(inline) {
			bad.add("task_list."+v.Field, v.Description)
		}
		if err := bad.orNil(); err != nil {
			return nil, toStatus(err)
		}
		spec = inline
	} else {
		if listID == "" { // resume with dry run: the latest build's list
			prev, _, err := s.store.LatestFeatureBuild(ctx, req.GetFeature())
			if err != nil {
				return nil, toStatus(err)
			}
			listID = prev.GetTaskListId()
		}
		tl, err := s.store.GetTaskList(ctx, listID, store.ViewFull)
		if err != nil {
			return nil, toStatus(err)
		}
		spec = tl.Spec
	}
	criteria := req.GetDoneCriteria()
	if strings.TrimSpace(criteria) == "" {
		criteria = spec.GetDoneCriteria()
	}
	if strings.TrimSpace(criteria) == "" {
		return nil, toStatus(failedPrecondition("no done-criteria: give done_criteria (done-criteria.md) or a task list that has them"))
	}
	progress, err := s.parseCriteria(ctx, criteria)
	if err != nil {
		return nil, err
	}
	opts := resolved(req.GetOptions())
	if req.GetAutonomy() == schedulerv1.Autonomy_AUTONOMY_CAUTIOUS {
		opts.MaxRetries = proto.Int32(0) // no retries at all
	}
	guards := req.GetScopeGuards()
	if guards == nil {
		guards = defaultScopeGuards()
	}
	autonomy := req.GetAutonomy()
	if autonomy == schedulerv1.Autonomy_AUTONOMY_UNSPECIFIED {
		autonomy = schedulerv1.Autonomy_AUTONOMY_DEFAULT
	}
	sum := sha256.Sum256([]byte(criteria))
	fb := &schedulerv1.FeatureBuild{Feature: req.GetFeature(), TaskListId: listID, Status: schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING,
		MaxIterations: int32(defaultMaxIterations), Criteria: progress, Autonomy: autonomy, ScopeGuards: guards, Options: opts,
		SkipVerify: req.GetSkipVerify(), DoneCriteriaSha256: hex.EncodeToString(sum[:]), App: req.GetApp(),
		MaxTokens: req.GetMaxTokens(), MaxCostUsdMicros: req.GetMaxCostUsdMicros()}
	if req.MaxIterations != nil {
		fb.MaxIterations = req.GetMaxIterations()
	}
	if req.GetDryRun() {
		tasks, _ := plan.FromSpec(spec, false)
		if len(tasks) == 0 {
			return nil, toStatus(failedPrecondition("every task of the list is already completed: nothing to build"))
		}
		res, err := plan.PlanContext(ctx, tasks, int(opts.GetMaxParallel()), s.planBudget)
		if err != nil {
			return nil, toStatus(err)
		}
		return &schedulerv1.StartFeatureBuildResponse{FeatureBuild: fb, PlannedWaves: plan.Response(tasks, res, nil).GetWaves(), Criteria: progress}, nil
	}
	fb.Id = ids.New(featureBuildIDPrefix, s.now())
	if spec == req.GetTaskList() {
		tl, err := s.store.CreateTaskList(ctx, ids.New("tl", s.now()), spec, nil)
		if err != nil {
			return nil, toStatus(err)
		}
		fb.TaskListId = tl.ID
	}
	if err := s.store.CreateFeatureBuild(ctx, fb, criteria); err != nil {
		if errors.Is(err, store.ErrActive) {
			return nil, toStatus(failedPrecondition("a build of feature %q has not ended: follow it with GetFeatureBuild, or cancel it first", fb.GetFeature()))
		}
		return nil, toStatus(err)
	}
	s.wake.broadcast()
	return &schedulerv1.StartFeatureBuildResponse{FeatureBuild: fb, Criteria: progress}, nil
}

// resumeFeatureBuild continues the latest build of a feature (BLOCKED or ESCALATED) from its last
// iteration: the driver starts the next iteration on the same run branch.
func (s *Server) resumeFeatureBuild(ctx context.Context, req *schedulerv1.StartFeatureBuildRequest) (*schedulerv1.StartFeatureBuildResponse, error) {
	prev, _, err := s.store.LatestFeatureBuild(ctx, req.GetFeature())
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := s.store.UpdateFeatureBuild(ctx, prev.GetId(), func(fb *schedulerv1.FeatureBuild) error {
		switch {
		case !store.FeatureBuildEnded(fb.GetStatus()):
			return failedPrecondition("build %s of feature %q has not ended: nothing to resume", fb.GetId(), fb.GetFeature())
		case fb.GetStatus() == schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED:
			return failedPrecondition("build %s of feature %q already converged: nothing to resume", fb.GetId(), fb.GetFeature())
		}
		max := fb.GetMaxIterations()
		if req.MaxIterations != nil {
			max = req.GetMaxIterations()
		}
		if max <= fb.GetCurrentIteration() {
			max = min(fb.GetCurrentIteration()+max, maxIterationsCeiling)
		}
		fb.MaxIterations = max
		fb.Status, fb.Outcome, fb.ExitReason, fb.ExitMessage = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING,
			commonv1.Outcome_OUTCOME_UNSPECIFIED, schedulerv1.ExitReason_EXIT_REASON_UNSPECIFIED, ""
		fb.EndTime, fb.CurrentExecutionId = nil, ""
		fb.ResumeCount++
		if req.GetMaxTokens() > 0 { // a build that spent its budget resumes with a larger one
			fb.MaxTokens = req.GetMaxTokens()
		}
		if req.GetMaxCostUsdMicros() > 0 {
			fb.MaxCostUsdMicros = req.GetMaxCostUsdMicros()
		}
		if req.GetAutonomy() != schedulerv1.Autonomy_AUTONOMY_UNSPECIFIED {
			fb.Autonomy = req.GetAutonomy()
		}
		if g := req.GetScopeGuards(); g != nil {
			fb.ScopeGuards = g
		}
		if a := req.GetApp(); a != nil {
			fb.App = a
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrActive) {
			return nil, toStatus(failedPrecondition("another build of feature %q has not ended: cancel it before resuming", req.GetFeature()))
		}
		return nil, toStatus(err)
	}
	s.wake.broadcast()
	return &schedulerv1.StartFeatureBuildResponse{FeatureBuild: out, Criteria: out.GetCriteria()}, nil
}

// parseCriteria asks the Verifier to parse done-criteria and counts them; a document that does not
// parse is InvalidArgument with the Verifier's violations renamed to done_criteria:L<n>.
func (s *Server) parseCriteria(ctx context.Context, md string) (*schedulerv1.CriteriaProgress, error) {
	if s.verifier == nil {
		return nil, toStatus(failedPrecondition("no Verifier configured for this Scheduler: a feature build cannot verify"))
	}
	res, err := s.verifier.ParseCriteria(ctx, &verifierv1.ParseCriteriaRequest{Markdown: md, SourceName: "done-criteria.md"})
	if err != nil {
		st := status.Convert(err)
		if st.Code() != codes.InvalidArgument {
			return nil, grpcerr.Unavailable("the Verifier could not parse the done-criteria: %s", st.Message())
		}
		bad := &badRequest{request: "StartFeatureBuildRequest"}
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok {
				for _, v := range br.GetFieldViolations() {
					bad.add(strings.Replace(v.GetField(), "markdown", "done_criteria", 1), v.GetDescription())
				}
			}
		}
		if len(bad.violations) == 0 {
			bad.add("done_criteria", st.Message())
		}
		return nil, toStatus(bad)
	}
	return countCriteria(res.GetCriteria()), nil
}

// countCriteria counts criteria by tag; all pending before the first verdict.
func countCriteria(cs []*verifierv1.Criterion) *schedulerv1.CriteriaProgress {
	p := &schedulerv1.CriteriaProgress{Total: int32(len(cs)), Pending: int32(len(cs))}
	for _, c := range cs {
		switch c.GetTag() {
		case verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY:
			p.HumanVerify++
		case verifierv1.CriterionTag_CRITERION_TAG_TOOL_VERIFY:
			p.ToolVerify++
		default:
			p.AutoVerify++
		}
	}
	return p
}

// GetFeatureBuild returns a build by id, or the latest of a feature.
func (s *Server) GetFeatureBuild(ctx context.Context, req *schedulerv1.GetFeatureBuildRequest) (*schedulerv1.GetFeatureBuildResponse, error) {
	var (
		fb  *schedulerv1.FeatureBuild
		err error
	)
	if f := req.GetFeature(); f != "" {
		fb, _, err = s.store.LatestFeatureBuild(ctx, f)
	} else {
		fb, _, err = s.store.GetFeatureBuild(ctx, req.GetFeatureBuildId())
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &schedulerv1.GetFeatureBuildResponse{FeatureBuild: fb}, nil
}

// ListFeatureBuilds pages through builds, newest first.
func (s *Server) ListFeatureBuilds(ctx context.Context, req *schedulerv1.ListFeatureBuildsRequest) (*schedulerv1.ListFeatureBuildsResponse, error) {
	size := int(req.GetPageSize())
	if size == 0 {
		size = defaultBuildsPage
	}
	q := store.ListFeatureBuildsQuery{PageSize: size, Feature: req.GetFeature(), Statuses: req.GetStatuses()}
	var after store.Cursor
	if ok, err := pagetoken.Decode(req.GetPageToken(), req, &after); err != nil {
		return nil, err
	} else if ok {
		q.After = &after
	}
	builds, next, err := s.store.ListFeatureBuilds(ctx, q)
	if err != nil {
		return nil, toStatus(err)
	}
	res := &schedulerv1.ListFeatureBuildsResponse{FeatureBuilds: builds}
	if next != nil {
		res.NextPageToken = pagetoken.Encode(req, next)
	}
	return res, nil
}

// CancelFeatureBuild ends a build CANCELLED and cancels its current execution.
func (s *Server) CancelFeatureBuild(ctx context.Context, req *schedulerv1.CancelFeatureBuildRequest) (*schedulerv1.CancelFeatureBuildResponse, error) {
	reason := req.GetReason()
	if reason == "" {
		reason = "cancelled by an operator"
	}
	out, err := s.store.UpdateFeatureBuild(ctx, req.GetFeatureBuildId(), func(fb *schedulerv1.FeatureBuild) error {
		switch fb.GetStatus() {
		case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED:
			return errUnchanged
		case schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED:
			return failedPrecondition("build %s already ended %s (%s): nothing to cancel", fb.GetId(),
				strings.TrimPrefix(fb.GetOutcome().String(), "OUTCOME_"), strings.TrimPrefix(fb.GetExitReason().String(), "EXIT_REASON_"))
		}
		s.exitBuild(fb, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED, commonv1.Outcome_OUTCOME_CANCELLED,
			schedulerv1.ExitReason_EXIT_REASON_CANCELLED, "## Build Feature - CANCELLED\n\n"+reason)
		return nil
	})
	if errors.Is(err, errUnchanged) {
		fb, _, gerr := s.store.GetFeatureBuild(ctx, req.GetFeatureBuildId())
		if gerr != nil {
			return nil, toStatus(gerr)
		}
		return &schedulerv1.CancelFeatureBuildResponse{FeatureBuild: fb}, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	if ex := out.GetCurrentExecutionId(); ex != "" {
		if _, err := s.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: ex, Reason: "feature build cancelled: " + reason}); err != nil &&
			status.Code(err) != codes.FailedPrecondition && status.Code(err) != codes.NotFound {
			return nil, err
		}
	}
	return &schedulerv1.CancelFeatureBuildResponse{FeatureBuild: out}, nil
}

// errUnchanged makes UpdateFeatureBuild store nothing: the build is already as asked.
var errUnchanged = errors.New("unchanged")

// runBranchOf is the run branch every iteration of a build integrates onto.
func runBranchOf(fb *schedulerv1.FeatureBuild) string { return featureBuildRunPrefix + fb.GetId() }

// exitBuild ends fb with status, outcome, reason and message (the seed's report text).
func (s *Server) exitBuild(fb *schedulerv1.FeatureBuild, st schedulerv1.FeatureBuildStatus, outcome commonv1.Outcome, reason schedulerv1.ExitReason, msg string) {
	fb.Status, fb.Outcome, fb.ExitReason, fb.ExitMessage = st, outcome, reason, msg
	fb.EndTime = timestamppb.New(s.now())
	if its := fb.GetIterations(); len(its) > 0 && its[len(its)-1].GetEndTime() == nil {
		its[len(its)-1].EndTime = fb.GetEndTime() // ended with the build (cancelled, a regression mid-iteration)
	}
}
