package scheduler

import (
	"context"
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Re-verify after each wave (our own): in a fix iteration, the criteria that passed in the previous
// iteration are checked again on each wave's integration commit (a partial Verify of only those
// criteria: it is never the loop's verdict), so a regression is caught at the wave that caused it:
// the build ends REGRESSION naming the criteria and the wave, and the rest of the iteration is
// cancelled (unless AUTONOMOUS). The last wave is left to the iteration's own Verify Done.
//
// The re-verifications run under their own loop key (wavesLoopKey), never the build's: they run
// in a goroutine while later waves build, so one may still run when the iteration's Verify Done
// starts; in one loop both would take "the next iteration" of it and the later insert would clash
// (Verify Done BLOCKED), and the partial reports would take the build loop's iteration numbers.

// reverifyWaves starts the re-verification of fb's current execution's integrated waves (each
// once per replica; a new leader checks them again).
func (s *Server) reverifyWaves(ctx context.Context, fb *schedulerv1.FeatureBuild, ex *schedulerv1.Execution, waves []*schedulerv1.Wave) {
	its := fb.GetIterations()
	if s.verifier == nil || fb.GetSkipVerify() || len(its) < 2 || fb.GetAutonomy() == schedulerv1.Autonomy_AUTONOMY_AUTONOMOUS {
		return
	}
	prev := its[len(its)-2].GetVerification()
	if prev.GetReportId() == "" {
		return
	}
	for _, w := range waves {
		if w.GetStatus() != schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED || w.GetIntegrationCommit() == "" || w.GetWaveNumber() >= ex.GetWaveCount() {
			continue
		}
		key := "wave:" + w.GetId()
		if _, busy := s.verifying.LoadOrStore(key, struct{}{}); busy {
			continue
		}
		go func() {
			if err := s.reverifyWave(ctx, fb, ex, w, prev.GetReportId()); err != nil && ctx.Err() == nil {
				s.log.Warn("feature build: re-verify a wave", "feature_build", fb.GetId(), "wave", w.GetWaveNumber(), "err", err)
				s.verifying.Delete(key) // try again next round
			}
		}()
	}
}

func (s *Server) reverifyWave(ctx context.Context, fb *schedulerv1.FeatureBuild, ex *schedulerv1.Execution, w *schedulerv1.Wave, prevReport string) error {
	rep, err := s.verifier.GetReport(ctx, &verifierv1.GetReportRequest{Id: prevReport, View: verifierv1.ReportView_REPORT_VIEW_FULL})
	if err != nil {
		return err
	}
	var passing []string
	for _, r := range rep.GetReport().GetResults() {
		if r.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PASS && r.GetTag() != verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY {
			passing = append(passing, r.GetCriterionId())
		}
	}
	if len(passing) == 0 {
		return nil
	}
	_, dc, err := s.store.GetFeatureBuild(ctx, fb.GetId())
	if err != nil {
		return err
	}
	target, cleanup, err := s.verifyTarget(ctx, ex, w.GetIntegrationCommit())
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := s.callVerifier(ctx, ex.GetId(), &verifierv1.VerifyRequest{LoopKey: wavesLoopKey(fb.GetId()), Parallelism: 4, Target: target, OnlyCriteria: passing,
		CriteriaSource: &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: dc}, Labels: map[string]string{"wave": fmt.Sprint(w.GetWaveNumber()), "execution": ex.GetId()}})
	if err != nil {
		return err
	}
	failed := res.GetReport().GetFailedIds()
	s.buildEvent(ctx, ex.GetId(), fmt.Sprintf("Build Feature - wave %d re-verified: %d of %d passing criteria still pass", w.GetWaveNumber(), len(passing)-len(failed), len(passing)),
		map[string]any{"event": "feature_build.wave_reverified", "feature_build_id": fb.GetId(), "wave_number": float64(w.GetWaveNumber()),
			"report_id": res.GetReport().GetId(), "regressed": strings.Join(failed, ",")})
	if len(failed) == 0 {
		return nil
	}
	return s.endBuild(ctx, fb.GetId(), ex.GetId(), func(b *schedulerv1.FeatureBuild) {
		if b.GetCurrentExecutionId() != ex.GetId() {
			return
		}
		it := b.GetIterations()[len(b.GetIterations())-1]
		it.RegressedCriteria = failed
		r := res.GetReport()
		it.Verification = &schedulerv1.VerifySummary{ReportId: r.GetId(), Verdict: commonv1.Verdict_VERDICT_FAILED, PassCount: r.GetPassCount(),
			FailCount: r.GetFailCount(), FailedCriteria: failed, FailureSignature: r.GetFailureSignature(), VerifyTime: r.GetCreateTime()}
		it.Summary = fmt.Sprintf("regressed at wave %d: %s", w.GetWaveNumber(), strings.Join(failed, ", "))
		b.Regressions++
		s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED, schedulerv1.ExitReason_EXIT_REASON_REGRESSION,
			escalationReport(b, fmt.Sprintf("Regression detected: %s passed in iteration %d and fail after wave %d of iteration %d (re-verified on its integration commit %s)",
				strings.Join(failed, ", "), len(b.GetIterations())-1, w.GetWaveNumber(), len(b.GetIterations()), short12(w.GetIntegrationCommit())), strings.Join(failed, ", ")))
	})
}

func short12(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

// wavesLoopKey is the Verifier loop of a build's per-wave re-verifications: the build's id (a
// short prefixed ULID) and ":waves", well within the loop key's 128 characters.
func wavesLoopKey(buildID string) string { return buildID + ":waves" }
