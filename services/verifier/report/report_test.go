package report_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/report"
)

const (
	pass    = verifierv1.CriterionStatus_CRITERION_STATUS_PASS
	fail    = verifierv1.CriterionStatus_CRITERION_STATUS_FAIL
	skip    = verifierv1.CriterionStatus_CRITERION_STATUS_SKIP
	pending = verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN
	errored = verifierv1.CriterionStatus_CRITERION_STATUS_ERROR

	auto  = verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY
	human = verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY
)

func result(id string, status verifierv1.CriterionStatus, assertions ...*verifierv1.AssertionResult) *verifierv1.CriterionResult {
	tag := auto
	if status == pending {
		tag = human
	}
	return &verifierv1.CriterionResult{
		CriterionId: id, Name: "criterion " + id, Tag: tag, Status: status,
		Evidence: &verifierv1.Evidence{Summary: id + " ran", Assertions: assertions},
	}
}

func assertion(expectation string, passed bool, actual string) *verifierv1.AssertionResult {
	return &verifierv1.AssertionResult{Expectation: expectation, Passed: passed, Actual: actual}
}

func TestSignature(t *testing.T) {
	t.Parallel()
	require.Empty(t, report.Signature(nil))
	sum := sha256.Sum256([]byte("E1\nF3\n"))
	want := hex.EncodeToString(sum[:])
	require.Equal(t, want, report.Signature([]string{"F3", "E1"}))
	require.Equal(t, want, report.Signature([]string{"E1", "F3"}), "order does not matter")
	require.NotEqual(t, want, report.Signature([]string{"E1"}))
}

func TestFinishVerdicts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		statuses []verifierv1.CriterionStatus
		want     commonv1.Verdict
	}{
		{"all pass", []verifierv1.CriterionStatus{pass, pass}, commonv1.Verdict_VERDICT_CONVERGED},
		{"pending human does not hold back", []verifierv1.CriterionStatus{pass, pending}, commonv1.Verdict_VERDICT_CONVERGED},
		{"a failure", []verifierv1.CriterionStatus{pass, fail, pending}, commonv1.Verdict_VERDICT_FAILED},
		{"blocked wins over failed", []verifierv1.CriterionStatus{fail, errored, pass}, commonv1.Verdict_VERDICT_BLOCKED},
		{"skips speak for nothing", []verifierv1.CriterionStatus{skip, pass}, commonv1.Verdict_VERDICT_CONVERGED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &verifierv1.VerifyReport{}
			for i, s := range tc.statuses {
				r.Results = append(r.Results, result(string(rune('A'+i))+"1", s))
			}
			report.Finish(r, nil, nil)
			require.Equal(t, tc.want, r.GetVerdict())
			total := r.GetPassCount() + r.GetFailCount() + r.GetSkipCount() + r.GetPendingHumanCount() + r.GetErrorCount()
			require.Equal(t, int32(len(tc.statuses)), total)
		})
	}
}

func TestFinishFailures(t *testing.T) {
	t.Parallel()
	crit := []*verifierv1.Criterion{
		{Id: "F1", Description: "export works"},
		{Id: "F2", RelatedFiles: []string{"app/export.go"}, FixHint: "add the location column"},
		{Id: "F3", RelatedFiles: []string{"app/other.go"}},
		{Id: "U1", Tag: human},
	}
	r := &verifierv1.VerifyReport{Results: []*verifierv1.CriterionResult{
		result("F1", fail, assertion("exit code == 0", false, "1"), assertion(`stdout contains "ok"`, true, "found")),
		result("F2", fail, assertion("body /columns = 7", false, "6")),
		result("F3", fail, assertion("status == 200", false, "500 Internal Server Error")),
		result("U1", pending),
	}}
	report.Finish(r, crit, map[string]report.Location{"F1": {File: "app/export.go", Line: 12}})
	require.Equal(t, commonv1.Verdict_VERDICT_FAILED, r.GetVerdict())
	require.Equal(t, []string{"F1", "F2", "F3"}, r.GetFailedIds())
	require.Equal(t, report.Signature([]string{"F1", "F2", "F3"}), r.GetFailureSignature())
	require.Len(t, r.GetFailures(), 3)

	f1 := r.GetFailures()[0]
	require.Equal(t, "exit code == 0", f1.GetExpected())
	require.Equal(t, "1", f1.GetActual())
	require.Equal(t, "1 of 2 assertions failed: expected exit code == 0, got 1", f1.GetGap())
	require.Equal(t, "app/export.go", f1.GetFile())
	require.Equal(t, int32(12), f1.GetLine())
	require.Equal(t, verifierv1.Confidence_CONFIDENCE_HIGH, f1.GetConfidence())

	f2 := r.GetFailures()[1]
	require.Equal(t, "app/export.go", f2.GetFile())
	require.Nil(t, f2.Line)
	require.Equal(t, "add the location column", f2.GetSuggestedFix())
	require.Equal(t, verifierv1.Confidence_CONFIDENCE_MEDIUM, f2.GetConfidence())

	f3 := r.GetFailures()[2]
	require.Equal(t, "app/other.go", f3.GetFile())
	require.Contains(t, f3.GetSuggestedFix(), "change app/other.go so that status == 200")

	require.Len(t, r.GetNextActions(), 3)
	require.Equal(t, int32(1), r.GetNextActions()[0].GetPriority())
	require.Equal(t, "Make F2 pass: add the location column", r.GetNextActions()[1].GetAction())
	require.Equal(t, "app/export.go", r.GetNextActions()[1].GetFile())
}

func TestFinishBlocked(t *testing.T) {
	t.Parallel()
	unreachable := func(id string) *verifierv1.CriterionResult {
		r := result(id, errored)
		r.Error = "connect 127.0.0.1:3000: connection refused, 3 attempts"
		r.BlockReason = verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE
		return r
	}
	missing := result("P1", errored)
	missing.Error, missing.BlockReason = `program "k6" is not installed`, verifierv1.BlockReason_BLOCK_REASON_PROGRAM_MISSING
	r := &verifierv1.VerifyReport{Results: []*verifierv1.CriterionResult{
		result("F1", pass), unreachable("F2"), unreachable("F3"), missing, result("E1", fail),
	}}
	report.Finish(r, nil, nil)
	require.Equal(t, commonv1.Verdict_VERDICT_BLOCKED, r.GetVerdict())
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, r.GetBlockReason())
	require.Equal(t, `F2, F3: connect 127.0.0.1:3000: connection refused, 3 attempts; P1: program "k6" is not installed`, r.GetBlockDetail())
	require.Contains(t, r.GetBlockSuggestion(), "start the app")
	require.Equal(t, []string{"E1"}, r.GetFailedIds(), "failures are still listed")
}

func TestFinishDryRun(t *testing.T) {
	t.Parallel()
	r := &verifierv1.VerifyReport{DryRun: true, Results: []*verifierv1.CriterionResult{result("F1", skip)}}
	report.Finish(r, nil, nil)
	require.Equal(t, commonv1.Verdict_VERDICT_UNSPECIFIED, r.GetVerdict())
	require.Equal(t, int32(1), r.GetSkipCount())
}

func TestSanitizeAndShrink(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1<<16)
	r := &verifierv1.VerifyReport{Labels: map[string]string{"k": "a\x00b"}}
	for i := range 100 {
		r.Results = append(r.Results, &verifierv1.CriterionResult{
			CriterionId: "F" + string(rune('0'+i%10)),
			Evidence: &verifierv1.Evidence{Summary: "nul \x00 here", Kind: &verifierv1.Evidence_Command{Command: &verifierv1.CommandEvidence{
				StdoutTail: big, StderrTail: big, Argv: []string{"a\x00"},
			}}},
		})
	}
	report.Sanitize(r)
	require.Equal(t, "nul \uFFFD here", r.GetResults()[0].GetEvidence().GetSummary())
	require.Equal(t, "a\uFFFD", r.GetResults()[0].GetEvidence().GetCommand().GetArgv()[0])
	require.Equal(t, "a\uFFFDb", r.GetLabels()["k"])

	require.Greater(t, proto.Size(r), report.MaxBytes)
	report.Shrink(r, report.MaxBytes)
	require.LessOrEqual(t, proto.Size(r), report.MaxBytes)
	require.True(t, strings.HasSuffix(big, r.GetResults()[0].GetEvidence().GetCommand().GetStdoutTail()), "tails keep the end")
}

func TestSummary(t *testing.T) {
	t.Parallel()
	r := &verifierv1.VerifyReport{Id: "vr_1", Results: []*verifierv1.CriterionResult{result("F1", fail)}}
	report.Finish(r, nil, nil)
	s := report.Summary(r)
	require.Empty(t, s.GetResults())
	require.Empty(t, s.GetFailures())
	require.Empty(t, s.GetNextActions())
	require.Equal(t, []string{"F1"}, s.GetFailedIds())
	require.NotEmpty(t, r.GetResults(), "the report itself is untouched")
}
