package scheduler

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A verify-only iteration: when nothing is left to build (every task completed and the last
// verdict failed no criterion, e.g. it was BLOCKED by an app that was down, and a person resumed
// the build after fixing it), the iteration runs Verify Done again on the run branch's commit
// without an execution. It is recorded with no execution id; the leader runs it in the background
// (at most once at a time per build on this replica), and a new leader runs it again.

// startReverify records iteration n as verify-only and starts it.
func (s *Server) startReverify(ctx context.Context, fb *schedulerv1.FeatureBuild, n int32) error {
	out, err := s.store.UpdateFeatureBuild(ctx, fb.GetId(), func(b *schedulerv1.FeatureBuild) error {
		if store.FeatureBuildEnded(b.GetStatus()) || b.GetCurrentExecutionId() != "" || b.GetCurrentIteration() != n-1 {
			return errUnchanged
		}
		b.CurrentIteration = n
		b.Iterations = append(b.Iterations, &schedulerv1.FeatureIteration{Number: n, StartTime: timestamppb.New(s.now()),
			Summary: "nothing left to build: verify again"})
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	s.reverify(ctx, out)
	return nil
}

// reverify runs the open verify-only iteration of fb in the background and records its verdict.
func (s *Server) reverify(ctx context.Context, fb *schedulerv1.FeatureBuild) {
	key := "fb:" + fb.GetId()
	if _, busy := s.verifying.LoadOrStore(key, struct{}{}); busy {
		return
	}
	go func() {
		defer s.verifying.Delete(key)
		if err := s.reverifyOnce(ctx, fb); err != nil && ctx.Err() == nil {
			s.log.Warn("feature build: verify again", "feature_build", fb.GetId(), "err", err)
		}
	}()
}

func (s *Server) reverifyOnce(ctx context.Context, fb *schedulerv1.FeatureBuild) error {
	// The driver's snapshot may predate the previous round's verification of this iteration
	// (that round ended and let go of the key after this one read the build): verify only if
	// the stored build still waits for it, so the Verifier is not asked twice.
	cur, dc, err := s.store.GetFeatureBuild(ctx, fb.GetId())
	if err != nil {
		return err
	}
	if its := cur.GetIterations(); store.FeatureBuildEnded(cur.GetStatus()) || cur.GetCurrentExecutionId() != "" || len(its) == 0 ||
		its[len(its)-1].GetExecutionId() != "" || its[len(its)-1].GetEndTime() != nil {
		return nil
	}
	fb = cur
	var last *schedulerv1.FeatureIteration
	for _, it := range fb.GetIterations() {
		if it.GetExecutionId() != "" {
			last = it
		}
	}
	if last == nil || s.verifier == nil {
		return s.endBuild(ctx, fb.GetId(), "", func(b *schedulerv1.FeatureBuild) {
			s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED,
				schedulerv1.ExitReason_EXIT_REASON_ERROR, escalationReport(b, "Nothing to build and nothing built to verify (or no Verifier configured)", ""))
		})
	}
	ex, waves, err := s.store.GetExecution(ctx, last.GetExecutionId())
	if err != nil {
		return err
	}
	target, cleanup, err := s.verifyTarget(ctx, ex, runCommit(waves))
	sum := &schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_BLOCKED, VerifyTime: timestamppb.Now()}
	if err != nil {
		sum.BlockReason = "the run branch could not be checked out for Verify Done: " + err.Error()
	} else {
		defer cleanup()
		app, why := s.startApp(ctx, fb, ex, runCommit(waves))
		if app != nil {
			defer app.stop()
			app.aim(target)
		}
		var res *verifierv1.VerifyResponse
		if why == "" {
			res, err = s.callVerifier(ctx, ex.GetId(), &verifierv1.VerifyRequest{LoopKey: fb.GetId(), Parallelism: 4, Target: target,
				CriteriaSource: &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: dc}})
		}
		if why != "" {
			sum.BlockReason = "the app under test is not running: " + why
		} else if err != nil {
			if ctx.Err() != nil {
				return err
			}
			sum.BlockReason = "Verify Done could not run: " + err.Error()
		} else {
			rep := res.GetReport()
			sum = &schedulerv1.VerifySummary{ReportId: rep.GetId(), Verdict: rep.GetVerdict(), PassCount: rep.GetPassCount(),
				FailCount: rep.GetFailCount(), SkipCount: rep.GetSkipCount(), PendingHumanCount: rep.GetPendingHumanCount(),
				FailedCriteria: rep.GetFailedIds(), FailureSignature: rep.GetFailureSignature(), BlockReason: rep.GetBlockDetail(), VerifyTime: rep.GetCreateTime()}
		}
	}
	var thrash *verifierv1.AnalyzeThrashingResponse
	if sum.GetVerdict() == commonv1.Verdict_VERDICT_FAILED {
		if thrash, err = s.verifier.AnalyzeThrashing(ctx, &verifierv1.AnalyzeThrashingRequest{LoopKey: fb.GetId()}); err != nil {
			thrash = nil
		}
	}
	outcome := commonv1.Outcome_OUTCOME_FAILED
	if sum.GetVerdict() == commonv1.Verdict_VERDICT_CONVERGED {
		outcome = commonv1.Outcome_OUTCOME_CONVERGED
	}
	pseudo := &schedulerv1.Execution{Outcome: outcome} // decide reads the outcome and an escalated agent: none
	n := int32(len(fb.GetIterations()))
	_, err = s.store.UpdateFeatureBuild(ctx, fb.GetId(), func(b *schedulerv1.FeatureBuild) error {
		its := b.GetIterations()
		if store.FeatureBuildEnded(b.GetStatus()) || len(its) == 0 || its[len(its)-1].GetExecutionId() != "" || its[len(its)-1].GetEndTime() != nil {
			return errUnchanged
		}
		s.decide(b, pseudo, sum, thrash, false)
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return nil
	}
	if err == nil {
		s.log.Info(fmt.Sprintf("feature build %s: iteration %d verified again: %s", fb.GetId(), n, verdictName(sum.GetVerdict())))
	}
	return err
}
