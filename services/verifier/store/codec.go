package store

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// This file holds what the backends share: how a report becomes columns and JSON and back.

// MaxInsertAttempts is how often a backend retries InsertReport when a concurrent insert into
// the same loop took the report number it chose.
const MaxInsertAttempts = 8

// ReportRow is the columns of verify_reports for a report (seq and created_at aside).
type ReportRow struct {
	ID, LoopKey                                                    string
	Iteration                                                      int32
	Verdict                                                        string
	PassCount, FailCount, SkipCount, PendingHumanCount, ErrorCount int32
	FailureSignature                                               string
	BlockReason                                                    *string
	CriteriaHash                                                   string
	Partial                                                        bool
	CreateTime                                                     time.Time
}

// ResultRow is the columns of verify_criterion_results for one result.
type ResultRow struct {
	CriterionID string
	Position    int
	Name        string
	Tag         string
	Status      string
	Evidence    *string
	Error       *string
	DurationMS  *int64
}

// Rows answers the columns of r and of its results. r must carry a verdict (dry runs are not
// stored) and a create time.
func Rows(r *verifierv1.VerifyReport) (ReportRow, []ResultRow, error) {
	if r.GetVerdict() == commonv1.Verdict_VERDICT_UNSPECIFIED {
		return ReportRow{}, nil, fmt.Errorf("store: report %s has no verdict", r.GetId())
	}
	if r.GetCreateTime() == nil {
		return ReportRow{}, nil, fmt.Errorf("store: report %s has no create time", r.GetId())
	}
	row := ReportRow{
		ID:                r.GetId(),
		LoopKey:           r.GetLoopKey(),
		Iteration:         r.GetIteration(),
		Verdict:           ShortName(r.GetVerdict()),
		PassCount:         r.GetPassCount(),
		FailCount:         r.GetFailCount(),
		SkipCount:         r.GetSkipCount(),
		PendingHumanCount: r.GetPendingHumanCount(),
		ErrorCount:        r.GetErrorCount(),
		FailureSignature:  r.GetFailureSignature(),
		CriteriaHash:      r.GetCriteriaHash(),
		Partial:           r.GetPartial(),
		CreateTime:        r.GetCreateTime().AsTime(),
	}
	if r.GetBlockReason() != verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED {
		s := ShortName(r.GetBlockReason())
		row.BlockReason = &s
	}
	results := make([]ResultRow, len(r.GetResults()))
	for i, res := range r.GetResults() {
		rr := ResultRow{
			CriterionID: res.GetCriterionId(),
			Position:    i,
			Name:        res.GetName(),
			Tag:         ShortName(res.GetTag()),
			Status:      ShortName(res.GetStatus()),
		}
		if s := res.GetEvidence().GetSummary(); s != "" {
			rr.Evidence = &s
		}
		if e := res.GetError(); e != "" {
			rr.Error = &e
		}
		if d := res.GetDuration(); d != nil {
			ms := d.AsDuration().Milliseconds()
			rr.DurationMS = &ms
		}
		results[i] = rr
	}
	return row, results, nil
}

// EncodeReport is the JSON kept in the report column.
func EncodeReport(r *verifierv1.VerifyReport) (string, error) {
	b, err := protojson.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("store: encode report %s: %w", r.GetId(), err)
	}
	return string(b), nil
}

// DecodeReport reads the JSON of the report column.
func DecodeReport(s string) (*verifierv1.VerifyReport, error) {
	r := new(verifierv1.VerifyReport)
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(s), r); err != nil {
		return nil, fmt.Errorf("store: decode report: %w", err)
	}
	return r, nil
}

// enum is a generated protobuf enum.
type enum interface {
	Descriptor() protoreflect.EnumDescriptor
	Number() protoreflect.EnumNumber
}

// ShortName is an enum value's name without its prefix, as the schema spells it:
// VERDICT_CONVERGED → CONVERGED, CRITERION_TAG_AUTO_VERIFY → AUTO_VERIFY.
func ShortName(e enum) string {
	v := e.Descriptor().Values().ByNumber(e.Number())
	if v == nil {
		return fmt.Sprint(e.Number())
	}
	name := string(v.Name())
	prefix := enumPrefix(e.Descriptor())
	return strings.TrimPrefix(name, prefix)
}

// enumPrefix is "VERDICT_" for Verdict, "CRITERION_TAG_" for CriterionTag.
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	var b strings.Builder
	for i, r := range string(ed.Name()) {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String()) + "_"
}

// Decision is the pass column of a human decision.
func Decision(d verifierv1.HumanDecision) bool {
	return d == verifierv1.HumanDecision_HUMAN_DECISION_PASS
}

// DecisionOf is the human decision of a pass column.
func DecisionOf(pass bool) verifierv1.HumanDecision {
	if pass {
		return verifierv1.HumanDecision_HUMAN_DECISION_PASS
	}
	return verifierv1.HumanDecision_HUMAN_DECISION_FAIL
}

// LatestPerCriterion picks, from human verdicts newest first, the first of each criterion.
func LatestPerCriterion(newestFirst []*verifierv1.HumanVerdict) map[string]*verifierv1.HumanVerdict {
	out := map[string]*verifierv1.HumanVerdict{}
	for _, v := range newestFirst {
		if _, ok := out[v.GetCriterionId()]; !ok {
			out[v.GetCriterionId()] = v
		}
	}
	return out
}
