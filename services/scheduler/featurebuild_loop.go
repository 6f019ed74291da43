package scheduler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// The build-feature loop on the leader's driver (seed 002 §6): every round, each open build is
// advanced one step, each step a conditional UpdateFeatureBuild, so a step repeated by a new
// leader (or racing another) changes nothing twice:
//
//   - no current execution: start the next iteration (iteration 1: the task list; later ones: a
//     list of the tasks not completed plus one fix task per failed criterion), on the build's run
//     branch, and record it;
//   - the current execution ended: record its verdict and decide (§12): exit, or clear the current
//     execution so the next round starts the next iteration.
//
// Executions and their task lists are created idempotently (deterministic request ids and list
// ids), so a leader that died between creating an execution and recording it finds it again.

// buildRun is what a feature build's iteration sets on its execution.
type buildRun struct{ id, runBranch, baseCommit string }

// openBuildStatuses are the statuses the driver advances.
var openBuildStatuses = []schedulerv1.FeatureBuildStatus{
	schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING}

// driveFeatureBuilds advances every open build one step. A build whose step fails is logged and
// tried again next round.
func (s *Server) driveFeatureBuilds(ctx context.Context) error {
	open, err := s.store.FeatureBuildsInStatus(ctx, openBuildStatuses, 100)
	if err != nil {
		return err
	}
	for _, fb := range open {
		if err := s.advanceBuild(ctx, fb); err != nil && ctx.Err() == nil {
			s.log.Warn("feature build: step", "feature_build", fb.GetId(), "err", err)
		}
	}
	return nil
}

// advanceBuild takes one step of fb.
func (s *Server) advanceBuild(ctx context.Context, fb *schedulerv1.FeatureBuild) error {
	if fb.GetStatus() == schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING {
		var err error
		if fb, err = s.store.UpdateFeatureBuild(ctx, fb.GetId(), func(b *schedulerv1.FeatureBuild) error {
			if b.GetStatus() != schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_PENDING {
				return errUnchanged
			}
			b.Status, b.StartTime = schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_RUNNING, timestamppb.New(s.now())
			return nil
		}); err != nil {
			if errors.Is(err, errUnchanged) {
				return nil
			}
			return err
		}
	}
	if limit := fb.GetOptions().GetMaxWallTime().AsDuration(); limit > 0 && fb.GetStartTime() != nil && s.now().Sub(fb.GetStartTime().AsTime()) > limit {
		return s.endBuild(ctx, fb.GetId(), fb.GetCurrentExecutionId(), func(b *schedulerv1.FeatureBuild) {
			s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
				schedulerv1.ExitReason_EXIT_REASON_BUDGET, escalationReport(b, fmt.Sprintf("Budget spent: wall time %s (max_wall_time) after %d iterations", limit, b.GetCurrentIteration()), ""))
		})
	}
	if its := fb.GetIterations(); fb.GetCurrentExecutionId() == "" && len(its) > 0 && its[len(its)-1].GetExecutionId() == "" && its[len(its)-1].GetEndTime() == nil {
		s.reverify(ctx, fb) // a verify-only iteration in progress (or left by a leader that died)
		return nil
	}
	if fb.GetCurrentExecutionId() == "" {
		return s.startIteration(ctx, fb)
	}
	ex, waves, err := s.store.GetExecution(ctx, fb.GetCurrentExecutionId())
	if err != nil {
		return err
	}
	if !ended(ex) {
		s.reverifyWaves(ctx, fb, ex, waves)
		return nil
	}
	return s.finishIteration(ctx, fb, ex)
}

// endBuild ends a build with set (under its lock, unless it already ended) and cancels its
// current execution.
func (s *Server) endBuild(ctx context.Context, id, execution string, set func(b *schedulerv1.FeatureBuild)) error {
	_, err := s.store.UpdateFeatureBuild(ctx, id, func(b *schedulerv1.FeatureBuild) error {
		if store.FeatureBuildEnded(b.GetStatus()) {
			return errUnchanged
		}
		set(b)
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	if execution != "" {
		_, cerr := s.CancelExecution(ctx, &schedulerv1.CancelExecutionRequest{ExecutionId: execution, Reason: "the feature build ended"})
		if cerr != nil && status.Code(cerr) != codes.FailedPrecondition {
			return cerr
		}
	}
	s.buildEvent(ctx, execution, fmt.Sprintf("Build Feature - feature build %s ended (see GetFeatureBuild for its report)", id),
		map[string]any{"event": "feature_build.exit", "feature_build_id": id})
	return nil
}

// startIteration starts iteration current+1 of fb and records it.
func (s *Server) startIteration(ctx context.Context, fb *schedulerv1.FeatureBuild) error {
	n := fb.GetCurrentIteration() + 1
	if n > fb.GetMaxIterations() {
		return s.endBuild(ctx, fb.GetId(), "", func(b *schedulerv1.FeatureBuild) {
			s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
				schedulerv1.ExitReason_EXIT_REASON_MAX_ITERATIONS, escalationReport(b, fmt.Sprintf("Maximum iterations (%d) reached without convergence", b.GetMaxIterations()), ""))
		})
	}
	ex, err := s.iterationExecution(ctx, fb, n)
	if errors.Is(err, errNothingToBuild) {
		return s.startReverify(ctx, fb, n)
	}
	if err != nil {
		var state *stateError
		if errors.As(err, &state) || errors.Is(err, store.ErrNotFound) {
			return s.endBuild(ctx, fb.GetId(), "", func(b *schedulerv1.FeatureBuild) {
				s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
					schedulerv1.ExitReason_EXIT_REASON_ERROR, escalationReport(b, fmt.Sprintf("Iteration %d could not start: %v", n, err), ""))
			})
		}
		return err
	}
	_, err = s.store.UpdateFeatureBuild(ctx, fb.GetId(), func(b *schedulerv1.FeatureBuild) error {
		if store.FeatureBuildEnded(b.GetStatus()) || b.GetCurrentExecutionId() != "" || b.GetCurrentIteration() != n-1 {
			return errUnchanged
		}
		b.CurrentIteration, b.CurrentExecutionId = n, ex.GetId()
		b.Iterations = append(b.Iterations, &schedulerv1.FeatureIteration{Number: n, ExecutionId: ex.GetId(), StartTime: timestamppb.New(s.now())})
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	s.buildEvent(ctx, ex.GetId(), fmt.Sprintf("Build Feature - Iteration %d of %d (feature build %s, %s)", n, fb.GetMaxIterations(), fb.GetId(), fb.GetFeature()),
		map[string]any{"event": "feature_build.iteration_started", "feature_build_id": fb.GetId(), "iteration": float64(n)})
	return nil
}

// buildEvent appends an INFO entry about the build to an execution's log ("" = none).
func (s *Server) buildEvent(ctx context.Context, execution, msg string, fields map[string]any) {
	if execution == "" {
		return
	}
	if err := s.update(ctx, execution, func(r *runner) error {
		return r.log(entry(commonv1.EventType_EVENT_TYPE_INFO, nil, msg, fields))
	}); err != nil && ctx.Err() == nil {
		s.log.Warn("feature build: log an event", "execution", execution, "err", err)
	}
}

// iterationExecution creates (or finds again) the execution of iteration n.
func (s *Server) iterationExecution(ctx context.Context, fb *schedulerv1.FeatureBuild, n int32) (*schedulerv1.Execution, error) {
	run := &buildRun{id: fb.GetId(), runBranch: runBranchOf(fb)}
	listID := fb.GetTaskListId()
	var prev *schedulerv1.FeatureIteration
	for _, it := range fb.GetIterations() {
		if it.GetExecutionId() != "" {
			prev = it
		}
	}
	if prev != nil {
		prevEx, waves, err := s.store.GetExecution(ctx, prev.GetExecutionId())
		if err != nil {
			return nil, err
		}
		run.baseCommit = prevEx.GetBaseCommit()
		for _, w := range waves {
			if w.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED && w.GetIntegrationCommit() != "" {
				run.baseCommit = w.GetIntegrationCommit()
			}
		}
		// The fix tasks come from the latest verdict (a verify-only iteration's too).
		latest := fb.GetIterations()[len(fb.GetIterations())-1]
		if listID, err = s.fixList(ctx, fb, n, prevEx, latest); err != nil {
			return nil, err
		}
	}
	if listID == "" {
		return nil, failedPrecondition("the build's task list was deleted")
	}
	res, err := s.startExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: listID, Options: fb.GetOptions(),
		RequestId: fmt.Sprintf("%s-i%d-r%d", fb.GetId(), n, fb.GetResumeCount())}, run)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
			return nil, failedPrecondition("%s", st.Message())
		}
		return nil, err
	}
	return res.GetExecution(), nil
}

// finishIteration records the ended execution's verdict in its iteration and decides (§12).
func (s *Server) finishIteration(ctx context.Context, fb *schedulerv1.FeatureBuild, ex *schedulerv1.Execution) error {
	sum := ex.GetVerification()
	var (
		thrash  *verifierv1.AnalyzeThrashingResponse
		skipped bool
	)
	switch {
	case ex.GetOutcome() == commonv1.Outcome_OUTCOME_CANCELLED:
		return s.endBuild(ctx, fb.GetId(), "", func(b *schedulerv1.FeatureBuild) {
			s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_CANCELLED, commonv1.Outcome_OUTCOME_CANCELLED,
				schedulerv1.ExitReason_EXIT_REASON_CANCELLED, "## Build Feature - CANCELLED\n\nIteration "+fmt.Sprint(b.GetCurrentIteration())+"'s execution "+ex.GetId()+" was cancelled: "+ex.GetStatusMessage())
		})
	case sum.GetBlockReason() == "skip_verify":
		skipped = true
	case sum.GetVerdict() == commonv1.Verdict_VERDICT_UNSPECIFIED:
		// Ended before Verify Done (stop rules, a budget, an escalated agent): the failed tasks are
		// the iteration's failures, so anti-thrashing still applies.
		failed, err := s.failedTasks(ctx, ex.GetId())
		if err != nil {
			return err
		}
		sum = &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_FAILED, FailedCriteria: failed, FailCount: int32(len(failed)),
			FailureSignature: signature(failed), VerifyTime: ex.GetEndTime()}
	case sum.GetVerdict() == commonv1.Verdict_VERDICT_FAILED && s.verifier != nil:
		t, err := s.verifier.AnalyzeThrashing(ctx, &verifierv1.AnalyzeThrashingRequest{LoopKey: fb.GetId()})
		if err != nil && status.Code(err) != codes.NotFound {
			return fmt.Errorf("analyze thrashing: %w", err)
		}
		thrash = t
	}
	var ch changes
	if _, waves, err := s.store.GetExecution(ctx, ex.GetId()); err == nil {
		if ch, err = s.iterationChanges(ctx, ex, waves); err != nil {
			s.log.Warn("feature build: what the iteration changed", "feature_build", fb.GetId(), "err", err)
		}
	}
	scopeHit := "" // the scope guard the iteration broke: "guard: detail"
	apply := func(b *schedulerv1.FeatureBuild) error {
		if store.FeatureBuildEnded(b.GetStatus()) || b.GetCurrentExecutionId() != ex.GetId() || len(b.GetIterations()) == 0 {
			return errUnchanged
		}
		it := b.GetIterations()[len(b.GetIterations())-1]
		it.FilesCreated, it.FilesModified, it.LinesChanged = ch.created, append(ch.modified, ch.deleted...), ch.lines
		b.Usage = addUsage(b.GetUsage(), ex.GetUsage())
		s.decide(b, ex, sum, thrash, skipped)
		if over := overBudget(b); over != "" && !store.FeatureBuildEnded(b.GetStatus()) {
			s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED,
				schedulerv1.ExitReason_EXIT_REASON_BUDGET, escalationReport(b, fmt.Sprintf("Budget spent: %s after %d iterations", over, b.GetCurrentIteration()), ""))
		}
		scopeHit = ""
		if guard, detail := scopeViolation(b.GetScopeGuards(), ch, b.GetAutonomy()); guard != "" && b.GetExitReason() != schedulerv1.ExitReason_EXIT_REASON_CANCELLED {
			scopeHit = guard + ": " + detail
			s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_BLOCKED,
				schedulerv1.ExitReason_EXIT_REASON_BLOCKED, scopeReport(b, guard, detail))
		}
		return nil
	}
	// What fixed a criterion is recorded before the build is seen to end (a `converge build`
	// stops its suite once it has): from the build as this step will leave it. A step repeated
	// after a failed update records it again, which Knowledge takes as its twin.
	if preview := proto.CloneOf(fb); s.knowledge != nil && apply(preview) == nil {
		s.recordFixes(ctx, preview, ex)
	}
	out, err := s.store.UpdateFeatureBuild(ctx, fb.GetId(), apply)
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	s.buildEvent(ctx, ex.GetId(), fmt.Sprintf("Build Feature - iteration %d ended: %s", fb.GetCurrentIteration(), verdictName(sum.GetVerdict())),
		map[string]any{"event": "feature_build.iteration_ended", "feature_build_id": fb.GetId(), "iteration": float64(fb.GetCurrentIteration())})
	if scopeHit != "" {
		s.buildEvent(ctx, ex.GetId(), "Build Feature - scope guard "+scopeHit,
			map[string]any{"event": "feature_build.scope_guard", "feature_build_id": fb.GetId(), "iteration": float64(fb.GetCurrentIteration())})
	}
	if store.FeatureBuildEnded(out.GetStatus()) {
		s.buildEvent(ctx, ex.GetId(), fmt.Sprintf("Build Feature - exit %s (%s)", strings.TrimPrefix(out.GetExitReason().String(), "EXIT_REASON_"),
			strings.TrimPrefix(out.GetOutcome().String(), "OUTCOME_")), map[string]any{"event": "feature_build.exit", "feature_build_id": fb.GetId(),
			"exit_reason": out.GetExitReason().String()})
	}
	return nil
}

// failedTasks are "task:<id>" of the execution's FAILED task assignments, sorted.
func (s *Server) failedTasks(ctx context.Context, execution string) ([]string, error) {
	as, _, err := s.store.ListAssignments(ctx, store.ListAssignmentsQuery{ExecutionID: execution, PageSize: 10000})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range as {
		if a.GetKind() == schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK && a.GetStatus() == schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED {
			out = append(out, "task:"+a.GetTaskId())
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// signature is the Verifier's failure signature of ids: hex SHA-256 of each id followed by "\n".
func signature(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func verdictName(v commonv1.Verdict) string { return strings.TrimPrefix(v.String(), "VERDICT_") }

// iterationCriteria is what Verify Done of an iteration's execution checks: the build's
// done-criteria under the build's loop key; skip for a skip_verify build.
func (s *Server) iterationCriteria(ctx context.Context, e *schedulerv1.Execution) (loopKey, criteria string, skip bool, err error) {
	fb, dc, err := s.store.GetFeatureBuild(ctx, e.GetFeatureBuildId())
	if err != nil {
		return "", "", false, err
	}
	return fb.GetId(), dc, fb.GetSkipVerify(), nil
}
