package verifier_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/report"
)

// TestDoneWhen is the "Done when": the example criteria with command, http, file and grpc
// checks against a small real app give CONVERGED; breaking the app gives FAILED with the right
// ids, evidence and signature; stopping it gives BLOCKED. The loop's history then shows the
// regressions.
func TestDoneWhen(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		app := startInventoryApp(t, b)
		criteria := example(t, "inventory-export.md")
		req := func() *verifierv1.VerifyRequest {
			return &verifierv1.VerifyRequest{
				CriteriaSource: &verifierv1.VerifyRequest_CriteriaMarkdown{CriteriaMarkdown: criteria},
				Target:         app.target(),
				LoopKey:        "inventory-export",
				MaxAttempts:    2,
				Labels:         map[string]string{"commit": "3f2a1c9"},
			}
		}

		// 1. The app works: CONVERGED, with the HUMAN_VERIFY criterion pending.
		ok := b.verify(t, req())
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, ok.GetVerdict(), "%v", ok.GetResults())
		require.Equal(t, map[string]string{
			"F1": "PASS", "F2": "PASS", "F3": "PASS", "F4": "PASS", "F5": "PASS", "E1": "PASS", "P1": "PASS", "P2": "PASS",
			"U1": "PENDING_HUMAN",
		}, statusOf(ok))
		require.Equal(t, int32(8), ok.GetPassCount())
		require.Equal(t, int32(1), ok.GetPendingHumanCount())
		require.Equal(t, int32(1), ok.GetIteration())
		require.True(t, strings.HasPrefix(ok.GetId(), "vr_"))
		require.Empty(t, ok.GetFailureSignature())
		require.Empty(t, ok.GetFailures())
		require.Equal(t, app.dir, ok.GetTarget().GetDirectory())
		require.Len(t, ok.GetCriteriaHash(), 64)
		require.Equal(t, "3f2a1c9", ok.GetLabels()["commit"])
		for _, res := range ok.GetResults() {
			if res.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PASS {
				require.NotEmpty(t, res.GetEvidence().GetAssertions(), "%s passed on evidence", res.GetCriterionId())
				require.Equal(t, int32(1), res.GetAttempts())
			}
		}
		require.Equal(t, "SERVING", strings.Trim(strings.Split(resultOf(t, ok, "P1").GetEvidence().GetGrpc().GetResponseExcerpt(), ":")[1], `"} `))
		require.Contains(t, resultOf(t, ok, "P2").GetEvidence().GetGrpc().GetResponseExcerpt(), `"id":"F1"`)

		// 2. Broken: FAILED, with the failing ids, their evidence and the signature.
		app.breakIt(t)
		failed := b.verify(t, req())
		require.Equal(t, commonv1.Verdict_VERDICT_FAILED, failed.GetVerdict())
		require.Equal(t, int32(2), failed.GetIteration())
		require.Equal(t, []string{"F1", "F2", "F4"}, failed.GetFailedIds())
		require.Equal(t, report.Signature([]string{"F4", "F2", "F1"}), failed.GetFailureSignature())
		require.Equal(t, int32(3), failed.GetFailCount())
		require.Equal(t, int32(5), failed.GetPassCount())

		f1 := resultOf(t, failed, "F1")
		require.Equal(t, int32(200), f1.GetEvidence().GetHttp().GetStatus())
		require.Contains(t, f1.GetEvidence().GetHttp().GetBodyExcerpt(), `"count": 2`)
		f2 := resultOf(t, failed, "F2")
		require.Contains(t, f2.GetEvidence().GetHttp().GetBodyExcerpt(), "sku,name,quantity")

		require.Len(t, failed.GetFailures(), 3)
		byID := map[string]*verifierv1.FailureDetail{}
		for _, f := range failed.GetFailures() {
			byID[f.GetCriterionId()] = f
		}
		require.Equal(t, "body /count = 3", byID["F1"].GetExpected())
		require.Equal(t, "2", byID["F1"].GetActual())
		require.Equal(t, "app/server.go", byID["F1"].GetFile(), "from the criterion's Files")
		require.Equal(t, verifierv1.Confidence_CONFIDENCE_MEDIUM, byID["F1"].GetConfidence())
		require.Equal(t, "write the header row sku,name,location,quantity before the rows", byID["F2"].GetSuggestedFix())
		require.Equal(t, "app/server.go", byID["F4"].GetFile())
		require.Equal(t, int32(7), byID["F4"].GetLine(), "the line of the forbidden fmt.Println(")
		require.Equal(t, verifierv1.Confidence_CONFIDENCE_HIGH, byID["F4"].GetConfidence())
		require.Len(t, failed.GetNextActions(), 3)

		// 3. Stopped: the HTTP checks cannot connect after their retries: BLOCKED.
		app.http.Close()
		blocked := b.verify(t, req())
		require.Equal(t, commonv1.Verdict_VERDICT_BLOCKED, blocked.GetVerdict())
		require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, blocked.GetBlockReason())
		for _, id := range []string{"F1", "F2", "E1"} {
			res := resultOf(t, blocked, id)
			require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_ERROR, res.GetStatus(), id)
			require.Equal(t, int32(2), res.GetAttempts(), id)
		}
		require.Contains(t, blocked.GetBlockDetail(), "F1, F2, E1: connect ")
		require.Contains(t, blocked.GetBlockDetail(), "connection refused, 2 attempts")
		require.NotEmpty(t, blocked.GetBlockSuggestion())
		require.Equal(t, []string{"F4"}, blocked.GetFailedIds(), "failures are still listed")

		// The history: newest first, and the analysis of the loop.
		list, err := b.client.ListReports(t.Context(), &verifierv1.ListReportsRequest{LoopKey: "inventory-export"})
		require.NoError(t, err)
		require.Len(t, list.GetReports(), 3)
		require.Equal(t, blocked.GetId(), list.GetReports()[0].GetId())
		require.Empty(t, list.GetReports()[0].GetResults(), "SUMMARY by default")

		got, err := b.client.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: failed.GetId()})
		require.NoError(t, err)
		require.True(t, proto.Equal(failed, got.GetReport()), "the stored report is the one Verify answered")

		an, err := b.client.AnalyzeThrashing(t.Context(), &verifierv1.AnalyzeThrashingRequest{LoopKey: "inventory-export"})
		require.NoError(t, err)
		require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_BLOCKED, an.GetRecommendation())
		require.Len(t, an.GetTrend(), 3)
		var regressed []string
		for _, r := range an.GetRegressions() {
			regressed = append(regressed, r.GetCriterionId())
			require.Equal(t, ok.GetId(), r.GetPassedReportId())
			require.Equal(t, failed.GetId(), r.GetFailedReportId())
			require.False(t, r.GetCurrent())
		}
		require.Equal(t, []string{"F1", "F2", "F4"}, regressed)
	})
}

// commandCriteria is a criteria set of command checks that pass while their file exists.
func commandCriteria(files ...string) *verifierv1.CriteriaSet {
	set := &verifierv1.CriteriaSet{}
	for i, f := range files {
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{
			Id: "F" + string(rune('1'+i)), Name: f + " exists", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Argv: []string{"test", "-f", f}}},
		})
	}
	return set
}

func structured(set *verifierv1.CriteriaSet, dir, loop string) *verifierv1.VerifyRequest {
	return &verifierv1.VerifyRequest{
		CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: set},
		Target:         &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: dir}},
		LoopKey:        loop,
	}
}

// TestThrashing is the second "Done when": reports with signatures A, B, A are
// oscillating, and a criterion passing in one report and failing in the next is a regression.
func TestThrashing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		dir := b.dir(t, map[string]string{"a.ok": "", "b.ok": ""})
		set := commandCriteria("a.ok", "b.ok")
		verify := func(remove, restore string) *verifierv1.VerifyReport {
			t.Helper()
			if remove != "" {
				require.NoError(t, os.Remove(filepath.Join(dir, remove)))
			}
			if restore != "" {
				writeFile(t, filepath.Join(dir, restore), "")
			}
			return b.verify(t, structured(set, dir, "osc"))
		}
		analyze := func() *verifierv1.AnalyzeThrashingResponse {
			t.Helper()
			res, err := b.client.AnalyzeThrashing(t.Context(), &verifierv1.AnalyzeThrashingRequest{LoopKey: "osc"})
			require.NoError(t, err)
			return res
		}

		r1 := verify("", "")
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r1.GetVerdict())
		require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONVERGED, analyze().GetRecommendation())

		a1 := verify("a.ok", "") // F1 fails: signature A; F1 passed before: a regression
		an := analyze()
		require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_REGRESSION, an.GetRecommendation())
		require.Len(t, an.GetRegressions(), 1)
		require.Equal(t, "F1", an.GetRegressions()[0].GetCriterionId())
		require.Equal(t, r1.GetId(), an.GetRegressions()[0].GetPassedReportId())
		require.Equal(t, a1.GetId(), an.GetRegressions()[0].GetFailedReportId())
		require.True(t, an.GetRegressions()[0].GetCurrent())

		b2 := verify("b.ok", "a.ok") // F2 fails: signature B
		a3 := verify("a.ok", "b.ok") // F1 fails again: A
		require.Equal(t, a1.GetFailureSignature(), a3.GetFailureSignature())
		require.NotEqual(t, a1.GetFailureSignature(), b2.GetFailureSignature())

		an = analyze()
		require.True(t, an.GetOscillating())
		require.Equal(t, []string{a1.GetFailureSignature(), b2.GetFailureSignature()}, an.GetOscillationSignatures())
		require.Equal(t, []int32{2, 3, 4}, an.GetOscillationIterations())
		require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_OSCILLATING, an.GetRecommendation())
		require.Equal(t, int32(4), an.GetReportsConsidered())

		verify("", "") // the same failure once more: repeating
		an = analyze()
		require.True(t, an.GetRepeating())
		require.Equal(t, []string{"F1"}, an.GetRepeatingFailedIds())
		require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_REPEATING, an.GetRecommendation())

		// The window limits what is considered; partial reports are ignored.
		partial := structured(set, dir, "osc")
		partial.OnlyCriteria = []string{"F2"}
		p := b.verify(t, partial)
		require.True(t, p.GetPartial())
		require.Equal(t, map[string]string{"F1": "SKIP", "F2": "PASS"}, statusOf(p))
		res, err := b.client.AnalyzeThrashing(t.Context(), &verifierv1.AnalyzeThrashingRequest{LoopKey: "osc", Window: 2})
		require.NoError(t, err)
		require.Equal(t, int32(2), res.GetReportsConsidered())
		require.Equal(t, int32(5), res.GetTrend()[1].GetIteration(), "the partial iteration 6 is not considered")

		_, err = b.client.AnalyzeThrashing(t.Context(), &verifierv1.AnalyzeThrashingRequest{LoopKey: "nope"})
		requireCode(t, err, codes.NotFound)
	})
}

// TestHumanSignOff follows a HUMAN_VERIFY criterion through sign-offs.
func TestHumanSignOff(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, be backend) {
		b := setup(t, be)
		dir := b.dir(t, map[string]string{"a.ok": ""})
		set := commandCriteria("a.ok")
		set.Criteria = append(set.Criteria, &verifierv1.Criterion{Id: "U1", Name: "Button placement", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY})
		req := structured(set, dir, "export")

		r1 := b.verify(t, req)
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r1.GetVerdict())
		require.Equal(t, "PENDING_HUMAN", statusOf(r1)["U1"])

		// A FAIL turns the loop's verdict FAILED, with the criterion's signature.
		res, err := b.client.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{
			LoopKey: "export", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_FAIL,
			Who: "ana@example.com", Note: "the button overlaps the search box",
		})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(res.GetHumanVerdict().GetId(), "hv_"))
		require.Equal(t, r1.GetId(), res.GetHumanVerdict().GetReportId())
		require.NotNil(t, res.GetHumanVerdict().GetCreateTime())
		loop := res.GetLoop()
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, loop.GetAutomatedVerdict())
		require.Equal(t, commonv1.Verdict_VERDICT_FAILED, loop.GetVerdict())
		require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, loop.GetOutcome())
		require.Equal(t, []string{"U1"}, loop.GetFailedIds())
		require.Equal(t, report.Signature([]string{"U1"}), loop.GetFailureSignature())

		// The next iteration gets the criterion back for re-review: a FAIL does not outlive it.
		r2 := b.verify(t, req)
		require.Equal(t, "PENDING_HUMAN", statusOf(r2)["U1"])
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r2.GetVerdict())

		// A PASS applies to the reviewed report and to later ones.
		res, err = b.client.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{
			LoopKey: "export", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "ana@example.com",
		})
		require.NoError(t, err)
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, res.GetLoop().GetOutcome())
		require.Equal(t, r2.GetId(), res.GetLoop().GetReportId())
		require.Equal(t, int32(2), res.GetLoop().GetPassCount())

		r3 := b.verify(t, req)
		u1 := resultOf(t, r3, "U1")
		require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_PASS, u1.GetStatus())
		require.Equal(t, res.GetHumanVerdict().GetId(), u1.GetHumanVerdict().GetId())
		require.Equal(t, int32(0), r3.GetPendingHumanCount())
		an, err := b.client.AnalyzeThrashing(t.Context(), &verifierv1.AnalyzeThrashingRequest{LoopKey: "export"})
		require.NoError(t, err)
		require.Equal(t, verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONVERGED, an.GetRecommendation())

		// A FAIL about an earlier report does not touch the loop's verdict.
		res, err = b.client.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{
			LoopKey: "export", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_FAIL,
			Who: "bo", Note: "on second thought", ReportId: r1.GetId(),
		})
		require.NoError(t, err)
		require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, res.GetLoop().GetVerdict())
		require.Equal(t, []string{"U1"}, res.GetLoop().GetPendingHumanIds(), "it supersedes the PASS: re-review")

		// The audit trail, newest first, paged.
		page, err := b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "export", PageSize: 2})
		require.NoError(t, err)
		require.Len(t, page.GetHumanVerdicts(), 2)
		require.Equal(t, "bo", page.GetHumanVerdicts()[0].GetWho())
		require.NotEmpty(t, page.GetNextPageToken())
		page, err = b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "export", PageSize: 2, PageToken: page.GetNextPageToken()})
		require.NoError(t, err)
		require.Len(t, page.GetHumanVerdicts(), 1)
		require.Equal(t, "the button overlaps the search box", page.GetHumanVerdicts()[0].GetNote())
		require.Empty(t, page.GetNextPageToken())
		_, err = b.client.ListHumanVerdicts(t.Context(), &verifierv1.ListHumanVerdictsRequest{LoopKey: "export", CriterionId: "U1", PageToken: page.GetNextPageToken() + "x"})
		requireCode(t, err, codes.InvalidArgument)

		// What cannot be signed off.
		cases := []struct {
			req  *verifierv1.RecordHumanVerdictRequest
			code codes.Code
		}{
			{&verifierv1.RecordHumanVerdictRequest{LoopKey: "export", CriterionId: "F1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "x"}, codes.FailedPrecondition},
			{&verifierv1.RecordHumanVerdictRequest{LoopKey: "export", CriterionId: "U9", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "x"}, codes.FailedPrecondition},
			{&verifierv1.RecordHumanVerdictRequest{LoopKey: "nope", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "x"}, codes.NotFound},
			{&verifierv1.RecordHumanVerdictRequest{LoopKey: "export", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "x", ReportId: "vr_nope"}, codes.NotFound},
			{&verifierv1.RecordHumanVerdictRequest{LoopKey: "export", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_FAIL, Who: "x"}, codes.InvalidArgument},
		}
		for _, tc := range cases {
			_, err := b.client.RecordHumanVerdict(t.Context(), tc.req)
			requireCode(t, err, tc.code)
		}
		other := b.verify(t, structured(commandCriteria("a.ok"), dir, "other"))
		_, err = b.client.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{
			LoopKey: "export", CriterionId: "U1", Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "x", ReportId: other.GetId()})
		requireCode(t, err, codes.NotFound)
	})
}
