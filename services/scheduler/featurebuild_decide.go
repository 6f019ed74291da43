package scheduler

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// decide records an ended iteration in b and applies the seed's exit rules (§12.1, §17.1), first
// that applies wins: verification skipped → VERIFY_SKIPPED; CONVERGED → SUCCESS; BLOCKED →
// BLOCKED; a failure under CAUTIOUS autonomy → BLOCKED; an agent escalated STUCK → STUCK; max
// iterations → MAX_ITERATIONS; the same failure signature twice in a row or A → B → A (the
// Verifier's AnalyzeThrashing) → STUCK; a criterion that passed now fails → REGRESSION (unless
// AUTONOMOUS); otherwise the next iteration (the current execution is cleared).
func (s *Server) decide(b *schedulerv1.FeatureBuild, ex *schedulerv1.Execution, sum *schedulerv1.VerifySummary,
	thrash *verifierv1.AnalyzeThrashingResponse, skipped bool) {
	n := len(b.GetIterations())
	it := b.GetIterations()[n-1]
	it.Verification, it.EndTime = sum, timestamppb.New(s.now())
	measured := b.GetCriteria().GetAutoVerify() + b.GetCriteria().GetToolVerify()
	if !skipped && sum.GetReportId() != "" {
		if b.Criteria == nil {
			b.Criteria = &schedulerv1.CriteriaProgress{}
		}
		b.Criteria.Passing, b.Criteria.Failing = sum.GetPassCount(), sum.GetFailCount()
		b.Criteria.Pending = max(0, b.Criteria.GetTotal()-sum.GetPassCount()-sum.GetFailCount())
		if measured > 0 {
			it.ProgressPercent = min(100, sum.GetPassCount()*100/measured)
		}
		b.ProgressPercent = it.GetProgressPercent()
	}
	for _, r := range thrash.GetRegressions() {
		if r.GetCurrent() {
			it.RegressedCriteria = append(it.RegressedCriteria, r.GetCriterionId())
		}
	}
	it.Summary = iterationSummary(b, it)
	rec := thrash.GetRecommendation()
	repeating := rec == verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_REPEATING ||
		rec == verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_OSCILLATING
	if thrash == nil && sum.GetVerdict() == commonv1.Verdict_VERDICT_FAILED {
		repeating = localRepeat(b.GetIterations())
	}
	if repeating {
		b.RepeatedFailures++
	}
	if len(it.GetRegressedCriteria()) > 0 {
		b.Regressions++
	}
	failed := strings.Join(sum.GetFailedCriteria(), ", ")
	escalate := func(reason schedulerv1.ExitReason, why, stuck string) {
		s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_ESCALATED, reason, escalationReport(b, why, stuck))
	}
	block := func(why string) {
		s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, commonv1.Outcome_OUTCOME_BLOCKED,
			schedulerv1.ExitReason_EXIT_REASON_BLOCKED, strings.Replace(escalationReport(b, why, ""), "ESCALATED", "BLOCKED", 1))
	}
	switch {
	case skipped:
		escalate(schedulerv1.ExitReason_EXIT_REASON_VERIFY_SKIPPED, "Verification skipped (--skip-verify): the build ran once and nothing was verified, so it is not done", "")
	case sum.GetVerdict() == commonv1.Verdict_VERDICT_CONVERGED:
		outcome := commonv1.Outcome_OUTCOME_CONVERGED
		if sum.GetPendingHumanCount() > 0 || ex.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN {
			outcome = commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN
		}
		s.exitBuild(b, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED, outcome, schedulerv1.ExitReason_EXIT_REASON_SUCCESS, successReport(b, sum))
	case sum.GetVerdict() == commonv1.Verdict_VERDICT_BLOCKED && strings.HasPrefix(sum.GetBlockReason(), appBuildErrorPrefix) &&
		b.GetAutonomy() != schedulerv1.Autonomy_AUTONOMY_CAUTIOUS && appBuildErrors(b) <= appMaxFixes && b.GetCurrentIteration() < b.GetMaxIterations():
		it.Summary = "build error on start: one fix task, then restart"
		b.CurrentExecutionId = "" // the next round starts iteration n+1 with the fix task (appFixTask)
	case sum.GetVerdict() == commonv1.Verdict_VERDICT_BLOCKED:
		block("Cannot verify: " + orDefault(sum.GetBlockReason(), "Verify Done answered BLOCKED"))
	case b.GetAutonomy() == schedulerv1.Autonomy_AUTONOMY_CAUTIOUS:
		block(fmt.Sprintf("Cautious autonomy: iteration %d failed (%s) and cautious builds stop at the first failure", n, failed))
	case ex.GetEscalatedInstanceId() != "":
		escalate(schedulerv1.ExitReason_EXIT_REASON_STUCK, fmt.Sprintf("Agent %s escalated STUCK on task %s in iteration %d", ex.GetEscalatedInstanceId(), ex.GetEscalatedTaskId(), n), failed)
	case b.GetCurrentIteration() >= b.GetMaxIterations():
		escalate(schedulerv1.ExitReason_EXIT_REASON_MAX_ITERATIONS, fmt.Sprintf("Maximum iterations (%d) reached without convergence", b.GetMaxIterations()), failed)
	case repeating:
		why := orDefault(thrash.GetExplanation(), fmt.Sprintf("The same failure has occurred in iterations %d and %d: %s", n-1, n, failed))
		escalate(schedulerv1.ExitReason_EXIT_REASON_STUCK, "Stuck pattern detected (thrashing): "+why, failed)
	case len(it.GetRegressedCriteria()) > 0 && b.GetAutonomy() != schedulerv1.Autonomy_AUTONOMY_AUTONOMOUS:
		escalate(schedulerv1.ExitReason_EXIT_REASON_REGRESSION, fmt.Sprintf("Regression detected: %s passed in iteration %d and fail in iteration %d",
			strings.Join(it.GetRegressedCriteria(), ", "), n-1, n), strings.Join(it.GetRegressedCriteria(), ", "))
	default:
		b.CurrentExecutionId = "" // the next round starts iteration n+1
	}
}

// localRepeat is the seed's isRepeatingFailure (§13.2) on the iterations' own signatures, for
// iterations that ended before Verify Done (their failures are failed tasks, which the Verifier
// never saw).
func localRepeat(its []*schedulerv1.FeatureIteration) bool {
	n := len(its)
	if n < 2 {
		return false
	}
	sig := func(i int) string { return its[i].GetVerification().GetFailureSignature() }
	cur := sig(n - 1)
	if cur == "" {
		return false
	}
	return cur == sig(n-2) || (n >= 3 && cur == sig(n-3) && cur != sig(n-2))
}

// iterationSummary is the one-line context of an iteration for the next (§7.3).
func iterationSummary(b *schedulerv1.FeatureBuild, it *schedulerv1.FeatureIteration) string {
	v := it.GetVerification()
	measured := b.GetCriteria().GetAutoVerify() + b.GetCriteria().GetToolVerify()
	var parts []string
	if v.GetReportId() != "" {
		parts = append(parts, fmt.Sprintf("%s: %d/%d criteria passing", verdictName(v.GetVerdict()), v.GetPassCount(), measured))
	} else {
		parts = append(parts, verdictName(v.GetVerdict())+" before verification")
	}
	if f := v.GetFailedCriteria(); len(f) > 0 {
		parts = append(parts, "failed: "+strings.Join(f, ", "))
	}
	if r := it.GetRegressedCriteria(); len(r) > 0 {
		parts = append(parts, "regressed: "+strings.Join(r, ", "))
	}
	return strings.Join(parts, "; ")
}

// duration is how long the build has run.
func buildDuration(b *schedulerv1.FeatureBuild) time.Duration {
	if b.GetStartTime() == nil {
		return 0
	}
	end := time.Now()
	if b.GetEndTime() != nil {
		end = b.GetEndTime().AsTime()
	}
	return end.Sub(b.GetStartTime().AsTime()).Round(time.Second)
}

// pathTable is the seed's convergence path / iteration summary table.
func pathTable(w *strings.Builder, b *schedulerv1.FeatureBuild, success bool) {
	measured := b.GetCriteria().GetAutoVerify() + b.GetCriteria().GetToolVerify()
	if success {
		w.WriteString("### Convergence Path\n| Iteration | Passing | Action |\n|-----------|---------|--------|\n")
	} else {
		w.WriteString("### Iteration Summary\n| # | Verdict | Progress |\n|---|---------|----------|\n")
	}
	for i, it := range b.GetIterations() {
		v := it.GetVerification()
		passing := fmt.Sprintf("%d/%d", v.GetPassCount(), measured)
		if success {
			action := "Initial build"
			if i > 0 {
				action = "Fixed " + orDefault(strings.Join(fixedSince(b.GetIterations()[i-1], it), ", "), "nothing")
			}
			fmt.Fprintf(w, "| %d | %s | %s |\n", it.GetNumber(), passing, action)
			continue
		}
		fmt.Fprintf(w, "| %d | %s | %s passing |\n", it.GetNumber(), orDefault(verdictName(v.GetVerdict()), "-"), passing)
	}
}

// fixedSince are the criteria that failed in prev and not in it.
func fixedSince(prev, it *schedulerv1.FeatureIteration) []string {
	now := map[string]bool{}
	for _, id := range it.GetVerification().GetFailedCriteria() {
		now[id] = true
	}
	var out []string
	for _, id := range prev.GetVerification().GetFailedCriteria() {
		if !now[id] {
			out = append(out, id)
		}
	}
	return out
}

// successReport is the seed's §19.2 success output.
func successReport(b *schedulerv1.FeatureBuild, sum *schedulerv1.VerifySummary) string {
	var w strings.Builder
	fmt.Fprintf(&w, "## Build Feature - CONVERGED ✅\n\n**Feature:** %s\n**Iterations:** %d of %d\n**Duration:** %s\n\n",
		b.GetFeature(), len(b.GetIterations()), b.GetMaxIterations(), buildDuration(b))
	pathTable(&w, b, true)
	w.WriteString("\n### Files Changed\n")
	files := changedFiles(b)
	if len(files) == 0 {
		w.WriteString("- (see the run branch " + runBranchOf(b) + ")\n")
	}
	for _, f := range files {
		w.WriteString("- " + f + "\n")
	}
	if sum.GetPendingHumanCount() > 0 {
		fmt.Fprintf(&w, "\n### Human Verification Required\n%d HUMAN_VERIFY criteria wait for a person's sign-off (the Verifier's RecordHumanVerdict, loop_key %s).\n", sum.GetPendingHumanCount(), b.GetId())
	}
	fmt.Fprintf(&w, "\n### Next Steps\n1. Review the run branch %s\n2. Write tests for the criteria, review the code\n3. Merge the run branch\n", runBranchOf(b))
	return w.String()
}

// changedFiles are the files the iterations created or modified, deduplicated, in order.
func changedFiles(b *schedulerv1.FeatureBuild) []string {
	seen := map[string]bool{}
	var out []string
	for _, it := range b.GetIterations() {
		for _, f := range it.GetFilesCreated() {
			if !seen[f] {
				seen[f] = true
				out = append(out, "Created: "+f)
			}
		}
		for _, f := range it.GetFilesModified() {
			if !seen[f] {
				seen[f] = true
				out = append(out, "Modified: "+f)
			}
		}
	}
	return out
}

// escalationReport is the seed's §17.2 escalation report: reason, time, iteration summary, the
// stuck point and the recommended human action.
func escalationReport(b *schedulerv1.FeatureBuild, reason, stuck string) string {
	var w strings.Builder
	fmt.Fprintf(&w, "## Build Feature - ESCALATED\n\n**Feature:** %s\n**Reason:** %s\n**Time spent:** %s\n**Status:** %d%% of the automatic criteria passing\n\n",
		b.GetFeature(), reason, buildDuration(b), b.GetProgressPercent())
	if len(b.GetIterations()) > 0 {
		pathTable(&w, b, false)
		w.WriteString("\n")
	}
	if len(b.GetRecoveryLog()) > 0 {
		w.WriteString("### Recovery Log\n| Time | Issue | Action | Result |\n|------|-------|--------|--------|\n")
		for _, r := range b.GetRecoveryLog() {
			fmt.Fprintf(&w, "| %s | %s | %s | %s |\n", r.GetTime().AsTime().UTC().Format("15:04:05"), r.GetIssue(), r.GetAction(), r.GetResult())
		}
		w.WriteString("\n")
	}
	if stuck != "" {
		fmt.Fprintf(&w, "### Stuck Point\n%s still failing after iteration %d.\n\n", stuck, len(b.GetIterations()))
		w.WriteString("**Attempted fixes:**\n")
		for _, it := range b.GetIterations() {
			fmt.Fprintf(&w, "%d. Iteration %d: %s\n", it.GetNumber(), it.GetNumber(), it.GetSummary())
		}
		w.WriteString("\n")
	}
	fmt.Fprintf(&w, "### Recommended Human Action\n1. Review the run branch %s and the verify reports (loop %s)\n2. Fix the blocker or the failing criteria by hand, or change the criteria\n\nAfter fixing, run:\n    converge build %s --resume\n",
		runBranchOf(b), b.GetId(), b.GetFeature())
	return w.String()
}
