package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// followBuild shows a feature build until it ends (the seed's §19.1 output per iteration: building,
// verifying criteria by criteria, the result and progress), then its exit report (§19.2 or
// §17.2). It answers the build as it ended.
func followBuild(ctx context.Context, conn grpc.ClientConnInterface, id string, w io.Writer) (*schedulerv1.FeatureBuild, error) {
	client := schedulerv1.NewSchedulerServiceClient(conn)
	verifier := verifierv1.NewVerifierServiceClient(conn) // the same address serves the Verifier (dev, the in-process suite); else the counts only
	shown := int32(0)                                     // iterations whose result was printed
	building := int32(0)
	var wasPassing int32
	booted := false
	for {
		fb, err := getBuild(ctx, client, id)
		if err != nil {
			return nil, err
		}
		if !booted {
			booted = true
			c := fb.GetCriteria()
			fmt.Fprintf(w, "## Build Feature - Boot Complete\n\n**Feature:** %s\n**Build:** %s\n**Max iterations:** %d\n**Resuming:** %s\n**Criteria loaded:** %d total (AUTO_VERIFY %d, HUMAN_VERIFY %d, TOOL_VERIFY %d)\n\n",
				fb.GetFeature(), fb.GetId(), fb.GetMaxIterations(), yesNo(fb.GetResumeCount() > 0), c.GetTotal(), c.GetAutoVerify(), c.GetHumanVerify(), c.GetToolVerify())
			shown = int32(len(fb.GetIterations()))
			for _, it := range fb.GetIterations() {
				if it.GetEndTime() == nil {
					shown--
				} else {
					wasPassing = it.GetVerification().GetPassCount()
				}
			}
			building = shown
		}
		its := fb.GetIterations()
		// Print the result of every iteration that ended since the last look.
		for shown < int32(len(its)) && its[shown].GetEndTime() != nil {
			it := its[shown]
			if building <= shown {
				fmt.Fprintf(w, "## Build Feature - Iteration %d of %d\n\n", it.GetNumber(), fb.GetMaxIterations())
				building = shown + 1
			}
			wasPassing = printIterationResult(ctx, w, fb, it, verifier, wasPassing)
			shown++
		}
		if int32(len(its)) > building && its[building].GetEndTime() == nil {
			it := its[building]
			fmt.Fprintf(w, "## Build Feature - Iteration %d of %d\n\n### Building\n", it.GetNumber(), fb.GetMaxIterations())
			if it.GetExecutionId() != "" {
				if _, err := follow(ctx, client, it.GetExecutionId(), followOptions{out: indent{w}}); err != nil && ctx.Err() == nil {
					fmt.Fprintf(w, "  (progress of %s unavailable: %v)\n", it.GetExecutionId(), err)
				}
			}
			building++
			continue
		}
		if fb.GetEndTime() != nil && shown == int32(len(its)) {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(fb.GetExitMessage()))
			return fb, nil
		}
		select {
		case <-ctx.Done():
			return fb, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// printIterationResult prints an ended iteration's verification and result; it answers the
// passing count.
func printIterationResult(ctx context.Context, w io.Writer, fb *schedulerv1.FeatureBuild, it *schedulerv1.FeatureIteration,
	verifier verifierv1.VerifierServiceClient, wasPassing int32) int32 {
	v := it.GetVerification()
	measured := fb.GetCriteria().GetAutoVerify() + fb.GetCriteria().GetToolVerify()
	fmt.Fprintln(w, "\n### Verifying")
	switch {
	case v.GetReportId() == "" && v.GetBlockReason() == "skip_verify":
		fmt.Fprintln(w, "- skipped (--skip-verify)")
	case v.GetReportId() == "":
		fmt.Fprintf(w, "- not verified: the iteration ended before Verify Done (failed: %s)\n", strings.Join(v.GetFailedCriteria(), ", "))
	case verifier != nil:
		rep, err := verifier.GetReport(ctx, &verifierv1.GetReportRequest{Id: v.GetReportId(), View: verifierv1.ReportView_REPORT_VIEW_FULL})
		if err == nil {
			gaps := map[string]string{}
			for _, f := range rep.GetReport().GetFailures() {
				gaps[f.GetCriterionId()] = orElse(f.GetGap(), f.GetActual())
			}
			for _, r := range rep.GetReport().GetResults() {
				fmt.Fprintf(w, "- %s: %s... %s\n", r.GetCriterionId(), r.GetName(), criterionMark(r, gaps[r.GetCriterionId()]))
			}
			break
		}
		fmt.Fprintf(w, "- report %s: %d passed, %d failed (%s)\n", v.GetReportId(), v.GetPassCount(), v.GetFailCount(), strings.Join(v.GetFailedCriteria(), ", "))
	default:
		fmt.Fprintf(w, "- report %s: %d passed, %d failed (%s)\n", v.GetReportId(), v.GetPassCount(), v.GetFailCount(), strings.Join(v.GetFailedCriteria(), ", "))
	}
	verdict := strings.TrimPrefix(v.GetVerdict().String(), "VERDICT_")
	if v.GetFailCount() > 0 {
		verdict += fmt.Sprintf(" (%d remaining)", v.GetFailCount())
	}
	fmt.Fprintf(w, "\n### Result\n**Verdict:** %s\n**Progress:** %d/%d criteria passing (was %d/%d)\n", verdict, v.GetPassCount(), measured, wasPassing, measured)
	if len(it.GetRegressedCriteria()) > 0 {
		fmt.Fprintf(w, "**Regressed:** %s\n", strings.Join(it.GetRegressedCriteria(), ", "))
	}
	if fb.GetEndTime() == nil || int(it.GetNumber()) < len(fb.GetIterations()) {
		fmt.Fprintf(w, "\n### Continuing to iteration %d...\nFailure context: %s\n\n", it.GetNumber()+1, it.GetSummary())
	}
	return v.GetPassCount()
}

func criterionMark(r *verifierv1.CriterionResult, gap string) string {
	if r.GetReused() {
		// The validation cache: nothing the check reads changed since the last report.
		return statusMark(r, gap) + " (reused)"
	}
	return statusMark(r, gap)
}

func statusMark(r *verifierv1.CriterionResult, gap string) string {
	switch r.GetStatus() {
	case verifierv1.CriterionStatus_CRITERION_STATUS_PASS:
		return "✅ PASS"
	case verifierv1.CriterionStatus_CRITERION_STATUS_FAIL:
		if gap != "" {
			return "❌ FAIL (" + gapLine(gap) + ")"
		}
		return "❌ FAIL"
	case verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN:
		return "⏳ PENDING_HUMAN"
	case verifierv1.CriterionStatus_CRITERION_STATUS_ERROR:
		return "⛔ ERROR (" + gapLine(r.GetError()) + ")"
	}
	return strings.TrimPrefix(r.GetStatus().String(), "CRITERION_STATUS_")
}

func gapLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func yesNo(b bool) string {
	if b {
		return "Yes"
	}
	return "No (fresh start)"
}

// indent writes each line indented by two spaces (an iteration's execution progress).
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	s := strings.ReplaceAll(string(p), "\n", "\n  ")
	if _, err := io.WriteString(i.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// buildStatusName is the build's state in words: CONVERGED, BLOCKED (reason), RUNNING, ...
func buildStatusName(fb *schedulerv1.FeatureBuild) string {
	if fb.GetOutcome() != commonv1.Outcome_OUTCOME_UNSPECIFIED {
		return fmt.Sprintf("%s (%s)", strings.TrimPrefix(fb.GetOutcome().String(), "OUTCOME_"), strings.TrimPrefix(fb.GetExitReason().String(), "EXIT_REASON_"))
	}
	return strings.TrimPrefix(fb.GetStatus().String(), "FEATURE_BUILD_STATUS_")
}

// renderBuildStatus prints `converge build status`: the build, its iterations and criteria.
func renderBuildStatus(w io.Writer, fb *schedulerv1.FeatureBuild) {
	c := fb.GetCriteria()
	fmt.Fprintf(w, "Feature build %s of %s: %s\nIteration %d of %d, %d%% of the automatic criteria passing (%d passing, %d failing, %d pending of %d)\n",
		fb.GetId(), fb.GetFeature(), buildStatusName(fb), fb.GetCurrentIteration(), fb.GetMaxIterations(), fb.GetProgressPercent(),
		c.GetPassing(), c.GetFailing(), c.GetPending(), c.GetTotal())
	fmt.Fprintf(w, "Usage: %s\n", usageLine(fb))
	if ex := fb.GetCurrentExecutionId(); ex != "" && fb.GetEndTime() == nil {
		fmt.Fprintf(w, "Current execution: %s (converge watch %s)\n", ex, ex)
	}
	if len(fb.GetIterations()) > 0 {
		fmt.Fprintln(w, "\n| # | Execution | Verdict | Progress | Summary |\n|---|-----------|---------|----------|---------|")
		for _, it := range fb.GetIterations() {
			verdict := strings.TrimPrefix(it.GetVerification().GetVerdict().String(), "VERDICT_")
			if it.GetEndTime() == nil {
				verdict = "running"
			}
			fmt.Fprintf(w, "| %d | %s | %s | %d%% | %s |\n", it.GetNumber(), it.GetExecutionId(), verdict, it.GetProgressPercent(), it.GetSummary())
		}
	}
	if len(fb.GetRecoveryLog()) > 0 {
		fmt.Fprintln(w, "\n## Recovery Log\n\n| Time | Issue | Action | Result |\n|------|-------|--------|--------|")
		for _, r := range fb.GetRecoveryLog() {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.GetTime().AsTime().Format("15:04"), r.GetIssue(), r.GetAction(), r.GetResult())
		}
	}
	if m := fb.GetExitMessage(); m != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(m))
	}
}

// usageLine is the model usage the build's executions reported, summed, with its budgets:
// "2500 tokens (2000 input, 500 output), cost $0.020000 (budget: 4000 tokens)".
func usageLine(fb *schedulerv1.FeatureBuild) string {
	u := fb.GetUsage()
	s := fmt.Sprintf("%d tokens (%d input, %d output), cost $%.6f", u.GetInputTokens()+u.GetOutputTokens(), u.GetInputTokens(), u.GetOutputTokens(), float64(u.GetCostUsdMicros())/1e6)
	var budgets []string
	if n := fb.GetMaxTokens(); n > 0 {
		budgets = append(budgets, fmt.Sprintf("%d tokens", n))
	}
	if n := fb.GetMaxCostUsdMicros(); n > 0 {
		budgets = append(budgets, fmt.Sprintf("$%.6f", float64(n)/1e6))
	}
	if len(budgets) > 0 {
		s += " (budget: " + strings.Join(budgets, ", ") + ")"
	}
	return s
}
