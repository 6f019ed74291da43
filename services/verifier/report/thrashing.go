package report

import (
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Analyze answers the seed's anti-thrashing questions (§13) about a loop: reports are its
// latest complete reports, oldest first (at least one), and loop its verdict with human
// sign-offs applied (LoopVerdict of the latest report).
//
//   - repeating: the latest two reports are FAILED with the same non-empty failure signature;
//   - oscillating: the latest three have signatures A, B, A, with A non-empty and A ≠ B;
//   - regressions: every criterion that passed in a report and fails in the next one;
//   - trend: pass, fail and error counts per iteration.
//
// The recommendation is the first that applies of CONVERGED, BLOCKED, STUCK_REPEATING,
// STUCK_OSCILLATING, REGRESSION (in the latest report) and CONTINUE.
func Analyze(loopKey string, reports []*verifierv1.VerifyReport, loop *verifierv1.LoopVerdict) *verifierv1.AnalyzeThrashingResponse {
	out := &verifierv1.AnalyzeThrashingResponse{LoopKey: loopKey, ReportsConsidered: int32(len(reports))}
	for _, r := range reports {
		out.Trend = append(out.Trend, &verifierv1.IterationPoint{
			Iteration:        r.GetIteration(),
			ReportId:         r.GetId(),
			Verdict:          r.GetVerdict(),
			PassCount:        r.GetPassCount(),
			FailCount:        r.GetFailCount(),
			ErrorCount:       r.GetErrorCount(),
			FailureSignature: r.GetFailureSignature(),
			CreateTime:       r.GetCreateTime(),
		})
	}
	n := len(reports)
	if n == 0 {
		return out
	}
	latest := reports[n-1]

	if n >= 2 {
		prev := reports[n-2]
		if prev.GetVerdict() == commonv1.Verdict_VERDICT_FAILED && latest.GetVerdict() == commonv1.Verdict_VERDICT_FAILED &&
			latest.GetFailureSignature() != "" && latest.GetFailureSignature() == prev.GetFailureSignature() {
			out.Repeating = true
			out.RepeatingSignature = latest.GetFailureSignature()
			out.RepeatingFailedIds = latest.GetFailedIds()
			out.RepeatingIterations = []int32{prev.GetIteration(), latest.GetIteration()}
		}
	}
	if n >= 3 {
		a, b, c := reports[n-3], reports[n-2], reports[n-1]
		if c.GetFailureSignature() != "" && c.GetFailureSignature() == a.GetFailureSignature() &&
			b.GetFailureSignature() != a.GetFailureSignature() {
			out.Oscillating = true
			out.OscillationSignatures = []string{a.GetFailureSignature(), b.GetFailureSignature()}
			out.OscillationIterations = []int32{a.GetIteration(), b.GetIteration(), c.GetIteration()}
		}
	}
	// Regressions, latest first.
	for i := n - 1; i >= 1; i-- {
		prev, next := reports[i-1], reports[i]
		passed := map[string]bool{}
		for _, res := range prev.GetResults() {
			if res.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PASS {
				passed[res.GetCriterionId()] = true
			}
		}
		for _, res := range next.GetResults() {
			if res.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_FAIL && passed[res.GetCriterionId()] {
				out.Regressions = append(out.Regressions, &verifierv1.Regression{
					CriterionId:     res.GetCriterionId(),
					CriterionName:   res.GetName(),
					PassedReportId:  prev.GetId(),
					PassedIteration: prev.GetIteration(),
					FailedReportId:  next.GetId(),
					FailedIteration: next.GetIteration(),
					Current:         i == n-1,
				})
			}
		}
	}

	var current []string
	for _, r := range out.Regressions {
		if r.Current {
			current = append(current, r.CriterionId)
		}
	}
	switch {
	case loop.GetVerdict() == commonv1.Verdict_VERDICT_CONVERGED:
		out.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONVERGED
		out.Explanation = fmt.Sprintf("iteration %d converged", latest.GetIteration())
		if loop.GetPendingHumanCount() > 0 {
			out.Explanation += fmt.Sprintf("; %s wait for a person: %s", plural(int(loop.GetPendingHumanCount()), "criterion", "criteria"),
				strings.Join(loop.GetPendingHumanIds(), ", "))
		}
	case loop.GetVerdict() == commonv1.Verdict_VERDICT_BLOCKED:
		out.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_BLOCKED
		out.Explanation = fmt.Sprintf("iteration %d is blocked: %s", latest.GetIteration(), latest.GetBlockDetail())
	case out.Repeating:
		out.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_REPEATING
		out.Explanation = fmt.Sprintf("%s failed with the same signature in iterations %d and %d: a different approach is needed",
			strings.Join(out.RepeatingFailedIds, ", "), out.RepeatingIterations[0], out.RepeatingIterations[1])
	case out.Oscillating:
		out.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_OSCILLATING
		out.Explanation = fmt.Sprintf("the failures of iteration %d came back in iteration %d after different ones in %d (%s, then %s, then %s again): fixes are undoing each other",
			out.OscillationIterations[0], out.OscillationIterations[2], out.OscillationIterations[1],
			strings.Join(reports[n-3].GetFailedIds(), ", "), orNone(reports[n-2].GetFailedIds()), strings.Join(latest.GetFailedIds(), ", "))
	case len(current) > 0:
		out.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_REGRESSION
		verb := "fails"
		if len(current) > 1 {
			verb = "fail"
		}
		out.Explanation = fmt.Sprintf("%s passed in iteration %d and %s in iteration %d: a fix broke what worked",
			strings.Join(current, ", "), reports[n-2].GetIteration(), verb, latest.GetIteration())
	default:
		out.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONTINUE
		out.Explanation = fmt.Sprintf("iteration %d failed (%s) without repeating, oscillating or regressing: run another iteration",
			latest.GetIteration(), orNone(loop.GetFailedIds()))
		if n >= 2 {
			out.Explanation += fmt.Sprintf("; passing %d → %d", reports[n-2].GetPassCount(), latest.GetPassCount())
		}
	}
	return out
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "no failures"
	}
	return strings.Join(ids, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
