// Package report turns criterion results into the seed's Verify Done result: counts, verdict,
// failure details for the next build iteration, next actions, the failure signature and the
// block reason. It also re-evaluates a report with human sign-offs (the loop's verdict).
package report

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// Location is where a failed check says its failure is (see check.Result).
type Location struct {
	// File is target-relative.
	File string
	// Line is 1-based; 0 when unknown.
	Line int32
}

// Signature is the failure signature of failed ids: the lowercase hex SHA-256 of the ids sorted
// by byte order, each followed by "\n"; "" when nothing failed.
func Signature(failedIDs []string) string {
	if len(failedIDs) == 0 {
		return ""
	}
	ids := append([]string(nil), failedIDs...)
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Finish computes everything of r that follows from r.Results (which must be in criteria
// order): counts, verdict, failed ids and signature, failure details, next actions and, for
// BLOCKED, the block reason, detail and suggestion. criteria are the criteria the results
// belong to (for descriptions, fix hints and related files) and locations what the checks
// located. A dry run keeps the UNSPECIFIED verdict.
func Finish(r *verifierv1.VerifyReport, criteria []*verifierv1.Criterion, locations map[string]Location) {
	byID := make(map[string]*verifierv1.Criterion, len(criteria))
	for _, c := range criteria {
		byID[c.GetId()] = c
	}
	count(r)
	r.Failures, r.NextActions = nil, nil
	for _, res := range r.Results {
		if res.GetStatus() != verifierv1.CriterionStatus_CRITERION_STATUS_FAIL {
			continue
		}
		f := failure(res, byID[res.GetCriterionId()], locations[res.GetCriterionId()])
		r.Failures = append(r.Failures, f)
		r.NextActions = append(r.NextActions, &verifierv1.NextAction{
			Priority:    int32(len(r.NextActions) + 1),
			CriterionId: f.CriterionId,
			Action:      fmt.Sprintf("Make %s pass: %s", f.CriterionId, f.SuggestedFix),
			File:        f.File,
		})
	}
	block(r)
	if r.DryRun {
		r.Verdict = commonv1.Verdict_VERDICT_UNSPECIFIED
	}
}

// count sets the counts, failed ids, signature and verdict from the results.
func count(r *verifierv1.VerifyReport) {
	r.PassCount, r.FailCount, r.SkipCount, r.PendingHumanCount, r.ErrorCount = 0, 0, 0, 0, 0
	r.FailedIds = nil
	for _, res := range r.Results {
		switch res.GetStatus() {
		case verifierv1.CriterionStatus_CRITERION_STATUS_PASS:
			r.PassCount++
		case verifierv1.CriterionStatus_CRITERION_STATUS_FAIL:
			r.FailCount++
			r.FailedIds = append(r.FailedIds, res.GetCriterionId())
		case verifierv1.CriterionStatus_CRITERION_STATUS_SKIP:
			r.SkipCount++
		case verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN:
			r.PendingHumanCount++
		case verifierv1.CriterionStatus_CRITERION_STATUS_ERROR:
			r.ErrorCount++
		}
	}
	sort.Strings(r.FailedIds)
	r.FailureSignature = Signature(r.FailedIds)
	switch {
	case r.ErrorCount > 0:
		r.Verdict = commonv1.Verdict_VERDICT_BLOCKED
	case r.FailCount > 0:
		r.Verdict = commonv1.Verdict_VERDICT_FAILED
	default:
		r.Verdict = commonv1.Verdict_VERDICT_CONVERGED
	}
}

// failure explains one FAIL result for the next iteration.
func failure(res *verifierv1.CriterionResult, c *verifierv1.Criterion, loc Location) *verifierv1.FailureDetail {
	f := &verifierv1.FailureDetail{
		CriterionId:   res.GetCriterionId(),
		CriterionName: res.GetName(),
		Confidence:    verifierv1.Confidence_CONFIDENCE_LOW,
	}
	var failed []*verifierv1.AssertionResult
	total := len(res.GetEvidence().GetAssertions())
	for _, a := range res.GetEvidence().GetAssertions() {
		if !a.GetPassed() {
			failed = append(failed, a)
		}
	}
	var expected, actual, gaps []string
	for _, a := range failed {
		expected = append(expected, a.GetExpectation())
		actual = append(actual, a.GetActual())
		gaps = append(gaps, fmt.Sprintf("expected %s, got %s", a.GetExpectation(), a.GetActual()))
	}
	f.Expected = strings.Join(expected, "; ")
	if f.Expected == "" {
		f.Expected = c.GetDescription()
	}
	f.Actual = strings.Join(actual, "; ")
	if f.Actual == "" {
		f.Actual = res.GetEvidence().GetSummary()
	}
	switch {
	case len(failed) > 0:
		f.Gap = fmt.Sprintf("%d of %d assertions failed: %s", len(failed), total, strings.Join(gaps, "; "))
	default:
		f.Gap = "the criterion is not met"
	}

	switch {
	case loc.File != "":
		f.File = loc.File
		if loc.Line > 0 {
			line := loc.Line
			f.Line = &line
		}
		f.Confidence = verifierv1.Confidence_CONFIDENCE_HIGH
	case len(c.GetRelatedFiles()) > 0:
		f.File = c.GetRelatedFiles()[0]
		f.Confidence = verifierv1.Confidence_CONFIDENCE_MEDIUM
	}
	switch {
	case c.GetFixHint() != "":
		f.SuggestedFix = c.GetFixHint()
		if f.Confidence == verifierv1.Confidence_CONFIDENCE_LOW {
			f.Confidence = verifierv1.Confidence_CONFIDENCE_MEDIUM
		}
	case len(failed) > 0:
		f.SuggestedFix = fmt.Sprintf("%s so that %s (now: %s)", subject(res.GetEvidence(), f.File), failed[0].GetExpectation(), failed[0].GetActual())
		if last := lastOutputLine(res.GetEvidence().GetCommand()); last != "" {
			f.SuggestedFix += fmt.Sprintf("; its output ends with %q", last)
		}
	default:
		f.SuggestedFix = "make the criterion true: " + c.GetDescription()
	}
	return f
}

// subject says what has to change for a failed check, from its evidence.
func subject(ev *verifierv1.Evidence, file string) string {
	switch {
	case ev.GetCommand() != nil:
		argv := ev.GetCommand().GetArgv()
		cmd := strings.Join(argv, " ")
		if len(argv) == 3 && argv[0] == "sh" && argv[1] == "-c" {
			cmd = argv[2]
		}
		if len(cmd) > 80 {
			cmd = cutHead(cmd, 80) + "…"
		}
		return fmt.Sprintf("fix what `%s` checks", cmd)
	case ev.GetHttp() != nil:
		return fmt.Sprintf("change what answers %s %s", ev.GetHttp().GetMethod(), ev.GetHttp().GetUrl())
	case ev.GetGrpc() != nil:
		return fmt.Sprintf("change what answers %s at %s", ev.GetGrpc().GetMethod(), ev.GetGrpc().GetAddress())
	case file != "":
		return "change " + file
	case ev.GetFile() != nil:
		return "change the files matching " + ev.GetFile().GetPattern()
	default:
		return "change the target"
	}
}

// lastOutputLine is the last non-empty line of a command's stderr, else of its stdout.
func lastOutputLine(ev *verifierv1.CommandEvidence) string {
	for _, out := range []string{ev.GetStderrTail(), ev.GetStdoutTail()} {
		lines := strings.Split(strings.TrimRight(out, "\n\r\t "), "\n")
		if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
			if len(last) > 120 {
				last = "…" + cutTail(last, 120)
			}
			return last
		}
	}
	return ""
}

// block sets the block reason, detail and suggestion of a report with ERROR results.
func block(r *verifierv1.VerifyReport) {
	r.BlockReason, r.BlockDetail, r.BlockSuggestion = verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, "", ""
	if r.ErrorCount == 0 {
		return
	}
	// Criteria blocked for the same reason are named together: "F2, F3: connect ...".
	type group struct {
		ids []string
		msg string
	}
	var groups []*group
	byMsg := map[string]*group{}
	for _, res := range r.Results {
		if res.GetStatus() != verifierv1.CriterionStatus_CRITERION_STATUS_ERROR {
			continue
		}
		if r.BlockReason == verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED {
			r.BlockReason = res.GetBlockReason()
		}
		g, ok := byMsg[res.GetError()]
		if !ok {
			g = &group{msg: res.GetError()}
			byMsg[g.msg] = g
			groups = append(groups, g)
		}
		g.ids = append(g.ids, res.GetCriterionId())
	}
	if r.BlockReason == verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED {
		r.BlockReason = verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT
	}
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = strings.Join(g.ids, ", ") + ": " + g.msg
	}
	r.BlockDetail = strings.Join(parts, "; ")
	r.BlockSuggestion = suggestions[r.BlockReason]
}

// suggestions are the human actions that remove each kind of blocker (seed §5.7: "specific human
// action needed").
var suggestions = map[verifierv1.BlockReason]string{
	verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE: "make the target available to the verifier (the directory must exist " +
		"inside its allowed roots; the repository and ref must be fetchable), then verify again",
	verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE: "start the app (or the server the check calls) so that it accepts " +
		"connections at the address in block_detail, then verify again",
	verifierv1.BlockReason_BLOCK_REASON_PROGRAM_MISSING: "install the missing program on the verifier's host (or put it on the " +
		"verifier's PATH), then verify again",
	verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING: "set the missing environment variable on the verifier (credentials never " +
		"go in the criteria), then verify again",
	verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED: "point the check at an address the verifier's destination policy allows, " +
		"or ask its operator to allow this one (--allow-destination), then verify again",
	verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT: "fix the verifier's host (scratch space, process limits; see " +
		"block_detail), then verify again",
}

// Summary is r without results, failures and next actions (the SUMMARY view).
func Summary(r *verifierv1.VerifyReport) *verifierv1.VerifyReport {
	s := proto.CloneOf(r)
	s.Results, s.Failures, s.NextActions = nil, nil, nil
	return s
}

// MaxBytes is the size a report is kept under by shortening its evidence excerpts.
const MaxBytes = 4 << 20

// Shrink shortens r's evidence excerpts (output tails, body, response and content excerpts)
// until r encodes in at most maxBytes, halving the excerpt length each round.
func Shrink(r *verifierv1.VerifyReport, maxBytes int) {
	limit := 1 << 16
	for proto.Size(r) > maxBytes && limit > 0 {
		limit /= 2
		for _, res := range r.Results {
			ev := res.GetEvidence()
			if ev == nil {
				continue
			}
			if c := ev.GetCommand(); c != nil {
				c.StdoutTail = cutTail(c.StdoutTail, limit)
				c.StderrTail = cutTail(c.StderrTail, limit)
			}
			if h := ev.GetHttp(); h != nil {
				h.BodyExcerpt = cutHead(h.BodyExcerpt, limit)
			}
			if f := ev.GetFile(); f != nil {
				f.ContentExcerpt = cutHead(f.ContentExcerpt, limit)
			}
			if g := ev.GetGrpc(); g != nil {
				g.ResponseExcerpt = cutHead(g.ResponseExcerpt, limit)
			}
		}
	}
}

func cutHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func cutTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[len(s)-n:], "")
}

// Sanitize replaces NUL characters in every text of r: command output may hold them, and
// Postgres' jsonb cannot store them (SQLite could; every backend stores the same report).
func Sanitize(r *verifierv1.VerifyReport) {
	sanitize(r.ProtoReflect())
}

func sanitize(m protoreflect.Message) {
	fix := func(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
	// Fields are collected first: a message must not be changed while it is ranged over.
	var fields []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fields = append(fields, fd)
		return true
	})
	for _, fd := range fields {
		v := m.Get(fd)
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				switch fd.Kind() {
				case protoreflect.MessageKind:
					sanitize(list.Get(i).Message())
				case protoreflect.StringKind:
					list.Set(i, protoreflect.ValueOfString(fix(list.Get(i).String())))
				}
			}
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.StringKind {
				continue
			}
			mp := v.Map()
			var keys []protoreflect.MapKey
			mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k)
				return true
			})
			for _, k := range keys {
				mp.Set(k, protoreflect.ValueOfString(fix(mp.Get(k).String())))
			}
		case fd.Kind() == protoreflect.MessageKind:
			sanitize(v.Message())
		case fd.Kind() == protoreflect.StringKind:
			if s := v.String(); strings.Contains(s, "\x00") {
				m.Set(fd, protoreflect.ValueOfString(fix(s)))
			}
		}
	}
}
