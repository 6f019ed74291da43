package storetest

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/verifier/store"
)

// base is the create time of the suite's first report; later ones are a second apart.
var base = time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)

// newReport is a finished report of loop loopKey with results for F1 (status), E1 (PASS) and
// U1 (PENDING_HUMAN), created n seconds after base.
func newReport(id, loopKey string, iteration int32, n int, status verifierv1.CriterionStatus) *verifierv1.VerifyReport {
	verdict := commonv1.Verdict_VERDICT_CONVERGED
	r := &verifierv1.VerifyReport{
		Id:         id,
		LoopKey:    loopKey,
		Iteration:  iteration,
		Verdict:    verdict,
		CreateTime: timestamppb.New(base.Add(time.Duration(n) * time.Second)),
		Duration:   durationpb.New(1500 * time.Millisecond),
		Results: []*verifierv1.CriterionResult{
			{
				CriterionId: "F1", Name: "Export answers", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY, Status: status,
				Duration: durationpb.New(41 * time.Millisecond), Attempts: 1,
				Evidence: &verifierv1.Evidence{
					Summary: "GET http://127.0.0.1:3000/api/export → 500 in 41ms",
					Kind: &verifierv1.Evidence_Http{Http: &verifierv1.HttpEvidence{
						Method: "GET", Url: "http://127.0.0.1:3000/api/export", Status: 500, BodyExcerpt: "boom ✗",
						Headers: map[string]string{"Content-Type": "text/plain"}, Latency: durationpb.New(41 * time.Millisecond),
					}},
					Assertions: []*verifierv1.AssertionResult{{Expectation: "status == 200", Actual: "500 Internal Server Error"}},
				},
			},
			{CriterionId: "E1", Name: "Empty export", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY, Status: verifierv1.CriterionStatus_CRITERION_STATUS_PASS},
			{CriterionId: "U1", Name: "Button placement", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY, Status: verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN},
		},
		CriteriaHash: "ab" + fmt.Sprintf("%062d", 0),
		Target:       &verifierv1.ResolvedTarget{Description: "dir /srv/app + http://127.0.0.1:3000", Directory: "/srv/app", BaseUrl: "http://127.0.0.1:3000"},
		Labels:       map[string]string{"execution": "exec_1"},
		PassCount:    1, PendingHumanCount: 1,
	}
	switch status {
	case verifierv1.CriterionStatus_CRITERION_STATUS_PASS:
		r.PassCount++
	case verifierv1.CriterionStatus_CRITERION_STATUS_FAIL:
		r.Verdict, r.FailCount, r.FailedIds, r.FailureSignature = commonv1.Verdict_VERDICT_FAILED, 1, []string{"F1"}, "sig-F1"
		r.Failures = []*verifierv1.FailureDetail{{CriterionId: "F1", Expected: "status == 200", Actual: "500", Line: proto.Int32(3)}}
		r.NextActions = []*verifierv1.NextAction{{Priority: 1, CriterionId: "F1", Action: "Fix the export"}}
	case verifierv1.CriterionStatus_CRITERION_STATUS_ERROR:
		r.Verdict, r.ErrorCount = commonv1.Verdict_VERDICT_BLOCKED, 1
		r.BlockReason, r.BlockDetail = verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, "F1: connection refused"
	}
	return r
}

func requireSameReport(t *testing.T, want, got *verifierv1.VerifyReport) {
	t.Helper()
	if !proto.Equal(want, got) {
		require.Equal(t, prototext.Format(want), prototext.Format(got))
	}
}

func testReports(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := newReport("vr_1", "export", 1, 0, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL)
	require.NoError(t, s.InsertReport(ctx, proto.CloneOf(want), false))

	got, err := s.GetReport(ctx, "vr_1")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Seq)
	requireSameReport(t, want, got.VerifyReport)

	_, err = s.GetReport(ctx, "vr_nope")
	require.ErrorIs(t, err, store.ErrNotFound)

	// A second report of the loop is numbered after the first; one of another loop starts at 1.
	require.NoError(t, s.InsertReport(ctx, newReport("vr_2", "export", 2, 1, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false))
	require.NoError(t, s.InsertReport(ctx, newReport("vr_3", "import", 1, 2, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false))
	got, err = s.GetReport(ctx, "vr_2")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Seq)
	got, err = s.GetReport(ctx, "vr_3")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Seq)

	// The same id twice is refused, and nothing of it is kept.
	require.Error(t, s.InsertReport(ctx, newReport("vr_1", "other", 1, 3, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false))
	latest, _, err := s.Iterations(ctx, "other", 1)
	require.NoError(t, err)
	require.Zero(t, latest)

	// Dry runs are never stored.
	dry := newReport("vr_4", "export", 3, 4, verifierv1.CriterionStatus_CRITERION_STATUS_PASS)
	dry.Verdict = commonv1.Verdict_VERDICT_UNSPECIFIED
	require.Error(t, s.InsertReport(ctx, dry, false))
}

func testIterations(t *testing.T, s store.Store) {
	ctx := t.Context()
	latest, exists, err := s.Iterations(ctx, "export", 1)
	require.NoError(t, err)
	require.Zero(t, latest)
	require.False(t, exists)

	// Unset iterations are the next ones.
	r1 := newReport("vr_1", "export", 0, 0, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL)
	require.NoError(t, s.InsertReport(ctx, r1, true))
	require.Equal(t, int32(1), r1.GetIteration())
	r2 := newReport("vr_2", "export", 0, 1, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL)
	require.NoError(t, s.InsertReport(ctx, r2, true))
	require.Equal(t, int32(2), r2.GetIteration())
	got, err := s.GetReport(ctx, "vr_2")
	require.NoError(t, err)
	require.Equal(t, int32(2), got.GetIteration(), "the stored report carries the assigned iteration")

	// Requested iterations move forward, with gaps allowed.
	var existsErr *store.IterationExistsError
	require.ErrorAs(t, s.InsertReport(ctx, newReport("vr_3", "export", 2, 2, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false), &existsErr)
	require.Equal(t, int32(2), existsErr.Iteration)
	require.NoError(t, s.InsertReport(ctx, newReport("vr_3", "export", 5, 2, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false))
	var behind *store.IterationBehindError
	require.ErrorAs(t, s.InsertReport(ctx, newReport("vr_4", "export", 4, 3, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false), &behind)
	require.Equal(t, int32(5), behind.Latest)
	require.ErrorAs(t, s.InsertReport(ctx, newReport("vr_4", "export", 1, 3, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false), &existsErr,
		"an iteration the loop has is AlreadyExists, even below the latest")

	latest, exists, err = s.Iterations(ctx, "export", 2)
	require.NoError(t, err)
	require.Equal(t, int32(5), latest)
	require.True(t, exists)
	_, exists, err = s.Iterations(ctx, "export", 3)
	require.NoError(t, err)
	require.False(t, exists)
}

func testConcurrentInserts(t *testing.T, s store.Store) {
	// Verifications of one loop finishing together get distinct iterations and numbers.
	const n = 8
	var wg sync.WaitGroup
	reports := make([]*verifierv1.VerifyReport, n)
	errs := make([]error, n)
	for i := range n {
		reports[i] = newReport(fmt.Sprintf("vr_%d", i), "export", 0, i, verifierv1.CriterionStatus_CRITERION_STATUS_PASS)
		wg.Go(func() { errs[i] = s.InsertReport(t.Context(), reports[i], true) })
	}
	wg.Wait()
	seen := map[int32]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		require.False(t, seen[reports[i].GetIteration()], "iteration %d twice", reports[i].GetIteration())
		seen[reports[i].GetIteration()] = true
	}
	latest, _, err := s.Iterations(t.Context(), "export", 0)
	require.NoError(t, err)
	require.Equal(t, int32(n), latest)
}

func ids(reports []*verifierv1.VerifyReport) []string {
	out := make([]string, len(reports))
	for i, r := range reports {
		out[i] = r.GetId()
	}
	return out
}

func testListReports(t *testing.T, s store.Store) {
	ctx := t.Context()
	// vr_b and vr_c share a create time: the id breaks the tie.
	for _, r := range []*verifierv1.VerifyReport{
		newReport("vr_a", "export", 1, 0, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL),
		newReport("vr_b", "export", 2, 1, verifierv1.CriterionStatus_CRITERION_STATUS_PASS),
		newReport("vr_c", "import", 1, 1, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL),
		newReport("vr_d", "export", 3, 2, verifierv1.CriterionStatus_CRITERION_STATUS_ERROR),
	} {
		require.NoError(t, s.InsertReport(ctx, r, false))
	}
	list := func(q store.ListQuery) []*verifierv1.VerifyReport {
		t.Helper()
		if q.Limit == 0 {
			q.Limit = 100
		}
		out, err := s.ListReports(ctx, q)
		require.NoError(t, err)
		return out
	}
	all := list(store.ListQuery{})
	require.Equal(t, []string{"vr_d", "vr_c", "vr_b", "vr_a"}, ids(all))
	requireSameReport(t, newReport("vr_a", "export", 1, 0, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL), all[3])

	require.Equal(t, []string{"vr_d", "vr_b", "vr_a"}, ids(list(store.ListQuery{LoopKey: "export"})))
	require.Equal(t, []string{"vr_c", "vr_a"}, ids(list(store.ListQuery{Verdict: commonv1.Verdict_VERDICT_FAILED})))
	require.Equal(t, []string{"vr_a"}, ids(list(store.ListQuery{LoopKey: "export", Verdict: commonv1.Verdict_VERDICT_FAILED})))

	// Pages of two.
	page := list(store.ListQuery{Limit: 2})
	require.Equal(t, []string{"vr_d", "vr_c"}, ids(page))
	last := page[1]
	page = list(store.ListQuery{Limit: 2, After: &store.Cursor{CreateTime: last.GetCreateTime().AsTime(), ID: last.GetId()}})
	require.Equal(t, []string{"vr_b", "vr_a"}, ids(page))
	page = list(store.ListQuery{Limit: 2, After: &store.Cursor{CreateTime: page[1].GetCreateTime().AsTime(), ID: page[1].GetId()}})
	require.Empty(t, page)

	// The summary leaves out what makes a report big.
	sum := list(store.ListQuery{LoopKey: "export", Verdict: commonv1.Verdict_VERDICT_FAILED, Summary: true})
	require.Len(t, sum, 1)
	want := newReport("vr_a", "export", 1, 0, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL)
	want.Results, want.Failures, want.NextActions = nil, nil, nil
	requireSameReport(t, want, sum[0])
}

func testLatestReports(t *testing.T, s store.Store) {
	ctx := t.Context()
	r3 := newReport("vr_3", "export", 3, 2, verifierv1.CriterionStatus_CRITERION_STATUS_PASS)
	r3.Partial = true
	for _, r := range []*verifierv1.VerifyReport{
		newReport("vr_1", "export", 1, 0, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL),
		newReport("vr_2", "export", 2, 1, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL),
		r3,
		newReport("vr_4", "export", 4, 3, verifierv1.CriterionStatus_CRITERION_STATUS_PASS),
		newReport("vr_5", "import", 1, 4, verifierv1.CriterionStatus_CRITERION_STATUS_PASS),
	} {
		require.NoError(t, s.InsertReport(ctx, r, false))
	}
	latest, err := s.LatestReports(ctx, "export", 10)
	require.NoError(t, err)
	require.Len(t, latest, 3, "partial reports are not the loop's")
	require.Equal(t, "vr_4", latest[0].GetId())
	require.Equal(t, int64(4), latest[0].Seq)
	require.Equal(t, "vr_2", latest[1].GetId())
	require.Equal(t, "vr_1", latest[2].GetId())

	latest, err = s.LatestReports(ctx, "export", 1)
	require.NoError(t, err)
	require.Len(t, latest, 1)

	latest, err = s.LatestReports(ctx, "nope", 10)
	require.NoError(t, err)
	require.Empty(t, latest)
}

func testHumanVerdicts(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i, id := range []string{"vr_1", "vr_2", "vr_3"} {
		require.NoError(t, s.InsertReport(ctx, newReport(id, "export", int32(i+1), i, verifierv1.CriterionStatus_CRITERION_STATUS_PASS), false))
	}
	record := func(id, criterion string, decision verifierv1.HumanDecision, reviewed string) *verifierv1.HumanVerdict {
		t.Helper()
		v, err := s.InsertHumanVerdict(ctx, &verifierv1.HumanVerdict{
			Id: id, LoopKey: "export", CriterionId: criterion, Decision: decision, Who: "ana@example.com",
			Note: "looks " + id, ReportId: reviewed,
		})
		require.NoError(t, err)
		require.NotNil(t, v.GetCreateTime())
		require.Equal(t, id, v.GetId())
		require.Equal(t, decision, v.GetDecision())
		return v
	}
	passed, failed := verifierv1.HumanDecision_HUMAN_DECISION_PASS, verifierv1.HumanDecision_HUMAN_DECISION_FAIL
	hv1 := record("hv_1", "U1", passed, "vr_1")
	record("hv_2", "U2", failed, "vr_2")
	record("hv_3", "U1", failed, "vr_3")
	record("hv_4", "U2", passed, "vr_1") // recorded last, about an earlier report

	// The same public id twice is refused.
	_, err := s.InsertHumanVerdict(ctx, &verifierv1.HumanVerdict{Id: "hv_1", LoopKey: "export", CriterionId: "U1", Decision: passed, Who: "bo", ReportId: "vr_1"})
	require.Error(t, err)

	list := func(q store.HumanQuery) []string {
		t.Helper()
		q.LoopKey = "export"
		if q.Limit == 0 {
			q.Limit = 100
		}
		vs, err := s.ListHumanVerdicts(ctx, q)
		require.NoError(t, err)
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = v.GetId()
		}
		return out
	}
	require.Equal(t, []string{"hv_4", "hv_3", "hv_2", "hv_1"}, list(store.HumanQuery{}))
	require.Equal(t, []string{"hv_3", "hv_1"}, list(store.HumanQuery{CriterionID: "U1"}))
	require.Equal(t, []string{"hv_4", "hv_3"}, list(store.HumanQuery{Limit: 2}))
	require.Equal(t, []string{"hv_2", "hv_1"}, list(store.HumanQuery{Limit: 2, AfterID: "hv_3"}))
	require.Equal(t, []string{"hv_1"}, list(store.HumanQuery{CriterionID: "U1", AfterID: "hv_3"}))

	vs, err := s.ListHumanVerdicts(ctx, store.HumanQuery{LoopKey: "export", CriterionID: "U1", Limit: 1, AfterID: "hv_3"})
	require.NoError(t, err)
	got := vs[0]
	require.Equal(t, hv1.GetCreateTime().AsTime(), got.GetCreateTime().AsTime())
	got.CreateTime = nil
	require.True(t, proto.Equal(&verifierv1.HumanVerdict{Id: "hv_1", LoopKey: "export", CriterionId: "U1", Decision: passed,
		Who: "ana@example.com", Note: "looks hv_1", ReportId: "vr_1"}, got), "%v", got)

	// Sign-offs: per criterion, the latest recorded among those that reviewed report seq ≤ n.
	signoffs := func(upTo int64) map[string]string {
		t.Helper()
		m, err := s.Signoffs(ctx, "export", upTo)
		require.NoError(t, err)
		out := map[string]string{}
		for c, v := range m {
			out[c] = v.GetId()
		}
		return out
	}
	require.Equal(t, map[string]string{"U1": "hv_1", "U2": "hv_4"}, signoffs(1))
	require.Equal(t, map[string]string{"U1": "hv_1", "U2": "hv_4"}, signoffs(2))
	require.Equal(t, map[string]string{"U1": "hv_3", "U2": "hv_4"}, signoffs(3))
	require.Equal(t, map[string]string{"U1": "hv_3", "U2": "hv_4"}, signoffs(math.MaxInt64))
	m, err := s.Signoffs(ctx, "import", math.MaxInt64)
	require.NoError(t, err)
	require.Empty(t, m)
}
