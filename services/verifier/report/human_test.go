package report_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/report"
)

func signoff(decision verifierv1.HumanDecision, reviewed string) *verifierv1.HumanVerdict {
	return &verifierv1.HumanVerdict{Id: "hv_1", CriterionId: "U1", Decision: decision, Who: "ana", Note: "button overlaps search", ReportId: reviewed}
}

func TestHumanStatus(t *testing.T) {
	t.Parallel()
	passed := verifierv1.HumanDecision_HUMAN_DECISION_PASS
	failed := verifierv1.HumanDecision_HUMAN_DECISION_FAIL
	cases := []struct {
		name    string
		v       *verifierv1.HumanVerdict
		report  string
		want    verifierv1.CriterionStatus
		applied bool
	}{
		{"no sign-off", nil, "vr_2", pending, false},
		{"PASS on this report", signoff(passed, "vr_2"), "vr_2", pass, true},
		{"PASS on an earlier report sticks", signoff(passed, "vr_1"), "vr_2", pass, true},
		{"FAIL on this report", signoff(failed, "vr_2"), "vr_2", fail, true},
		{"FAIL on an earlier report: re-review", signoff(failed, "vr_1"), "vr_2", pending, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, applied := report.HumanStatus(tc.v, tc.report)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.applied, applied)
		})
	}
}

func TestLoopVerdict(t *testing.T) {
	t.Parallel()
	r := &verifierv1.VerifyReport{Id: "vr_2", LoopKey: "export", Iteration: 2, Results: []*verifierv1.CriterionResult{
		result("F1", pass), result("U1", pending), result("U2", pending),
	}}
	report.Finish(r, nil, nil)
	require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, r.GetVerdict())

	lv := report.LoopVerdict(r, nil)
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, lv.GetOutcome())
	require.Equal(t, []string{"U1", "U2"}, lv.GetPendingHumanIds())

	u2 := signoff(verifierv1.HumanDecision_HUMAN_DECISION_PASS, "vr_1")
	u2.CriterionId = "U2"
	lv = report.LoopVerdict(r, map[string]*verifierv1.HumanVerdict{
		"U1": signoff(verifierv1.HumanDecision_HUMAN_DECISION_FAIL, "vr_2"),
		"U2": u2,
	})
	require.Equal(t, commonv1.Verdict_VERDICT_CONVERGED, lv.GetAutomatedVerdict())
	require.Equal(t, commonv1.Verdict_VERDICT_FAILED, lv.GetVerdict(), "a human FAIL turns CONVERGED into FAILED")
	require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, lv.GetOutcome())
	require.Equal(t, []string{"U1"}, lv.GetFailedIds())
	require.Equal(t, report.Signature([]string{"U1"}), lv.GetFailureSignature())
	require.Equal(t, int32(2), lv.GetPassCount())
	require.Empty(t, lv.GetPendingHumanIds())

	lv = report.LoopVerdict(r, map[string]*verifierv1.HumanVerdict{"U1": signoff(verifierv1.HumanDecision_HUMAN_DECISION_PASS, "vr_2"), "U2": u2})
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, lv.GetOutcome())

	// A human verdict never unblocks.
	blocked := &verifierv1.VerifyReport{Id: "vr_3", Results: []*verifierv1.CriterionResult{result("F1", errored), result("U1", pending)}}
	report.Finish(blocked, nil, nil)
	lv = report.LoopVerdict(blocked, map[string]*verifierv1.HumanVerdict{"U1": signoff(verifierv1.HumanDecision_HUMAN_DECISION_PASS, "vr_3")})
	require.Equal(t, commonv1.Outcome_OUTCOME_BLOCKED, lv.GetOutcome())
}

func TestHumanResult(t *testing.T) {
	t.Parallel()
	c := &verifierv1.Criterion{Id: "U1", Name: "Button placement", Tag: human}
	res := report.HumanResult(c, signoff(verifierv1.HumanDecision_HUMAN_DECISION_PASS, "vr_1"), "vr_2")
	require.Equal(t, pass, res.GetStatus())
	require.Equal(t, "passed by ana: button overlaps search", res.GetEvidence().GetSummary())
	require.Equal(t, "hv_1", res.GetHumanVerdict().GetId())

	res = report.HumanResult(c, nil, "vr_2")
	require.Equal(t, pending, res.GetStatus())
	require.Nil(t, res.GetEvidence())
}
