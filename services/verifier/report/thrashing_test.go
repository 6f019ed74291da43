package report_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/report"
)

// loop builds a loop's reports, oldest first, from the status of criteria F1..F3 per iteration.
func loop(iterations ...map[string]verifierv1.CriterionStatus) []*verifierv1.VerifyReport {
	var out []*verifierv1.VerifyReport
	for i, statuses := range iterations {
		r := &verifierv1.VerifyReport{Id: fmt.Sprintf("vr_%d", i+1), LoopKey: "export", Iteration: int32(i + 1)}
		for _, id := range []string{"F1", "F2", "F3"} {
			if s, ok := statuses[id]; ok {
				r.Results = append(r.Results, result(id, s))
			}
		}
		report.Finish(r, nil, nil)
		out = append(out, r)
	}
	return out
}

func analyze(reports []*verifierv1.VerifyReport) *verifierv1.AnalyzeThrashingResponse {
	latest := reports[len(reports)-1]
	return report.Analyze("export", reports, report.LoopVerdict(latest, nil))
}

type statuses = map[string]verifierv1.CriterionStatus

func TestAnalyzeOscillating(t *testing.T) {
	t.Parallel()
	// Signatures A, B, A: fixing F1 breaks F2, fixing F2 breaks F1.
	a := statuses{"F1": fail, "F2": pass, "F3": pass}
	b := statuses{"F1": pass, "F2": fail, "F3": pass}
	got := analyze(loop(a, b, a))
	require.True(t, got.GetOscillating())
	require.False(t, got.GetRepeating())
	sigA, sigB := report.Signature([]string{"F1"}), report.Signature([]string{"F2"})
	require.Equal(t, []string{sigA, sigB}, got.GetOscillationSignatures())
	require.Equal(t, []int32{1, 2, 3}, got.GetOscillationIterations())
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_OSCILLATING, got.GetRecommendation())
	require.Contains(t, got.GetExplanation(), "F1, then F2, then F1 again")
	// Both flips are regressions too.
	require.Len(t, got.GetRegressions(), 2)
	require.Equal(t, "F1", got.GetRegressions()[0].GetCriterionId())
	require.True(t, got.GetRegressions()[0].GetCurrent())
	require.Equal(t, "F2", got.GetRegressions()[1].GetCriterionId())
	require.False(t, got.GetRegressions()[1].GetCurrent())
}

func TestAnalyzeRepeating(t *testing.T) {
	t.Parallel()
	same := statuses{"F1": pass, "F2": fail}
	got := analyze(loop(statuses{"F1": fail, "F2": fail}, same, same))
	require.True(t, got.GetRepeating())
	require.Equal(t, []string{"F2"}, got.GetRepeatingFailedIds())
	require.Equal(t, []int32{2, 3}, got.GetRepeatingIterations())
	require.Equal(t, report.Signature([]string{"F2"}), got.GetRepeatingSignature())
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_REPEATING, got.GetRecommendation())
	require.Equal(t, "F2 failed with the same signature in iterations 2 and 3: a different approach is needed", got.GetExplanation())
}

func TestAnalyzeRegression(t *testing.T) {
	t.Parallel()
	// F2 passes in report 1 and fails in report 2.
	got := analyze(loop(statuses{"F1": fail, "F2": pass}, statuses{"F1": pass, "F2": fail}))
	require.False(t, got.GetRepeating())
	require.False(t, got.GetOscillating())
	require.Len(t, got.GetRegressions(), 1)
	reg := got.GetRegressions()[0]
	require.Equal(t, "F2", reg.GetCriterionId())
	require.Equal(t, "vr_1", reg.GetPassedReportId())
	require.Equal(t, int32(1), reg.GetPassedIteration())
	require.Equal(t, "vr_2", reg.GetFailedReportId())
	require.Equal(t, int32(2), reg.GetFailedIteration())
	require.True(t, reg.GetCurrent())
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_REGRESSION, got.GetRecommendation())
}

func TestAnalyzeProgress(t *testing.T) {
	t.Parallel()
	got := analyze(loop(
		statuses{"F1": fail, "F2": fail, "F3": fail},
		statuses{"F1": pass, "F2": fail, "F3": fail},
		statuses{"F1": pass, "F2": pass, "F3": fail},
	))
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONTINUE, got.GetRecommendation())
	require.Equal(t, int32(3), got.GetReportsConsidered())
	var passing []int32
	for _, p := range got.GetTrend() {
		passing = append(passing, p.GetPassCount())
	}
	require.Equal(t, []int32{0, 1, 2}, passing)
	require.Empty(t, got.GetRegressions())

	done := analyze(loop(statuses{"F1": fail}, statuses{"F1": pass}))
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONVERGED, done.GetRecommendation())

	blocked := analyze(loop(statuses{"F1": errored}, statuses{"F1": errored}))
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_BLOCKED, blocked.GetRecommendation())
	require.False(t, blocked.GetRepeating(), "no failures, nothing repeats")

	single := analyze(loop(statuses{"F1": fail}))
	require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONTINUE, single.GetRecommendation())
}
