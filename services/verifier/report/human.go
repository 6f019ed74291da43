package report

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Human sign-off rules (RecordHumanVerdict in the contract):
//
//   - a sign-off applies to the report the person reviewed and to later reports of the loop,
//     until a later sign-off on the same criterion supersedes it;
//   - except a FAIL: it applies to the reviewed report only. Once a later report exists the build
//     has had its iteration to fix it, and the criterion is PENDING_HUMAN again for re-review.
//
// So for a report R and a HUMAN_VERIFY criterion, what counts is the latest sign-off (in
// recording order) among those that reviewed R or an earlier report of the loop.

// HumanStatus answers the status of a HUMAN_VERIFY criterion in report reportID, given v: the
// latest sign-off on it that reviewed reportID or an earlier report (nil when there is none). It
// also reports whether v decided it.
func HumanStatus(v *verifierv1.HumanVerdict, reportID string) (verifierv1.CriterionStatus, bool) {
	switch {
	case v == nil:
		return verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN, false
	case v.GetDecision() == verifierv1.HumanDecision_HUMAN_DECISION_PASS:
		return verifierv1.CriterionStatus_CRITERION_STATUS_PASS, true
	case v.GetDecision() == verifierv1.HumanDecision_HUMAN_DECISION_FAIL && v.GetReportId() == reportID:
		return verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, true
	default:
		return verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN, false
	}
}

// HumanResult is the result of a HUMAN_VERIFY criterion of report reportID given v (see
// HumanStatus).
func HumanResult(c *verifierv1.Criterion, v *verifierv1.HumanVerdict, reportID string) *verifierv1.CriterionResult {
	res := &verifierv1.CriterionResult{
		CriterionId: c.GetId(),
		Name:        c.GetName(),
		Tag:         c.GetTag(),
	}
	decide(res, v, reportID)
	return res
}

// decide sets res from v.
func decide(res *verifierv1.CriterionResult, v *verifierv1.HumanVerdict, reportID string) {
	status, applied := HumanStatus(v, reportID)
	res.Status = status
	res.HumanVerdict, res.Evidence = nil, nil
	if !applied {
		return
	}
	res.HumanVerdict = v
	word := "passed"
	if status == verifierv1.CriterionStatus_CRITERION_STATUS_FAIL {
		word = "failed"
	}
	summary := fmt.Sprintf("%s by %s", word, v.GetWho())
	if v.GetNote() != "" {
		summary += ": " + v.GetNote()
	}
	if len(summary) > 512 {
		summary = cutHead(summary, 512) + "…"
	}
	res.Evidence = &verifierv1.Evidence{Summary: summary}
}

// Reevaluate answers a copy of r with its HUMAN_VERIFY criteria decided by signoffs (criterion
// id → the latest sign-off that reviewed r or an earlier report) and its counts, failed ids,
// signature and verdict recomputed. A BLOCKED report stays BLOCKED.
func Reevaluate(r *verifierv1.VerifyReport, signoffs map[string]*verifierv1.HumanVerdict) *verifierv1.VerifyReport {
	out := proto.CloneOf(r)
	for _, res := range out.Results {
		if res.GetTag() == verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY &&
			res.GetStatus() != verifierv1.CriterionStatus_CRITERION_STATUS_SKIP {
			decide(res, signoffs[res.GetCriterionId()], r.GetId())
		}
	}
	count(out)
	return out
}

// LoopVerdict is the verdict of a loop whose latest complete report is r, with signoffs applied
// (see Reevaluate).
func LoopVerdict(r *verifierv1.VerifyReport, signoffs map[string]*verifierv1.HumanVerdict) *verifierv1.LoopVerdict {
	re := Reevaluate(r, signoffs)
	lv := &verifierv1.LoopVerdict{
		LoopKey:           r.GetLoopKey(),
		ReportId:          r.GetId(),
		Iteration:         r.GetIteration(),
		AutomatedVerdict:  r.GetVerdict(),
		Verdict:           re.GetVerdict(),
		PassCount:         re.GetPassCount(),
		FailCount:         re.GetFailCount(),
		PendingHumanCount: re.GetPendingHumanCount(),
		FailedIds:         re.GetFailedIds(),
		FailureSignature:  re.GetFailureSignature(),
	}
	for _, res := range re.Results {
		if res.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN {
			lv.PendingHumanIds = append(lv.PendingHumanIds, res.GetCriterionId())
		}
	}
	switch {
	case lv.Verdict == commonv1.Verdict_VERDICT_BLOCKED:
		lv.Outcome = commonv1.Outcome_OUTCOME_BLOCKED
	case lv.Verdict == commonv1.Verdict_VERDICT_FAILED:
		lv.Outcome = commonv1.Outcome_OUTCOME_FAILED
	case lv.PendingHumanCount > 0:
		lv.Outcome = commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN
	default:
		lv.Outcome = commonv1.Outcome_OUTCOME_CONVERGED
	}
	return lv
}
