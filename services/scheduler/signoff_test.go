package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// signingVerifier answers Verify CONVERGED with criterion U1 waiting for a person, and keeps the
// human verdicts the test records, as the Verifier's RecordHumanVerdict would.
type signingVerifier struct {
	verifierv1.UnimplementedVerifierServiceServer
	mu       sync.Mutex
	verdicts []*verifierv1.HumanVerdict // newest first
}

func (v *signingVerifier) Verify(_ context.Context, req *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	return &verifierv1.VerifyResponse{Report: &verifierv1.VerifyReport{Id: "vr_" + req.GetLoopKey(), LoopKey: req.GetLoopKey(),
		Verdict: commonv1.Verdict_VERDICT_CONVERGED, PassCount: 1, PendingHumanCount: 1}}, nil
}

func (v *signingVerifier) GetReport(_ context.Context, req *verifierv1.GetReportRequest) (*verifierv1.GetReportResponse, error) {
	return &verifierv1.GetReportResponse{Report: &verifierv1.VerifyReport{Id: req.GetId(), Results: []*verifierv1.CriterionResult{
		{CriterionId: "F1", Status: verifierv1.CriterionStatus_CRITERION_STATUS_PASS},
		{CriterionId: "U1", Status: verifierv1.CriterionStatus_CRITERION_STATUS_PENDING_HUMAN}}}}, nil
}

func (v *signingVerifier) ListHumanVerdicts(_ context.Context, req *verifierv1.ListHumanVerdictsRequest) (*verifierv1.ListHumanVerdictsResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	res := &verifierv1.ListHumanVerdictsResponse{}
	for _, hv := range v.verdicts {
		if hv.GetLoopKey() == req.GetLoopKey() {
			res.HumanVerdicts = append(res.HumanVerdicts, hv)
		}
	}
	return res, nil
}

func (v *signingVerifier) sign(loop string, d verifierv1.HumanDecision, note string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.verdicts = append([]*verifierv1.HumanVerdict{{LoopKey: loop, CriterionId: "U1", Decision: d, Who: "alice", Note: note}}, v.verdicts...)
}

// Issue 15 part 13: a PASS sign-off of the last pending HUMAN_VERIFY criterion turns the
// execution's CONVERGED_PENDING_HUMAN into CONVERGED, a FAIL ends it FAILED; each with a VERDICT
// and an EXECUTION_COMPLETED entry on its log.
func TestHumanSignOffReachesTheRun(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		v := &signingVerifier{}
		b := bundleWith(t, st, WithVerifier(serveVerifier(t, v)))
		run := func(name string) *schedulerv1.Execution {
			e := b.start(t, b.createList(t, withCriteria(name)), nil)
			b.work(t, "agent-1", e.GetId(), succeed)
			got := b.waitEnded(t, e.GetId())
			require.Eventually(t, func() bool {
				got, _ = b.execution(t, e.GetId())
				return got.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN
			}, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, got.GetStatus())
			return got
		}

		pass := run("sign-pass")
		v.sign(pass.GetId(), verifierv1.HumanDecision_HUMAN_DECISION_PASS, "looks right")
		var got *schedulerv1.Execution
		require.Eventually(t, func() bool {
			got, _ = b.execution(t, pass.GetId())
			return got.GetOutcome() == commonv1.Outcome_OUTCOME_CONVERGED
		}, 15*time.Second, 20*time.Millisecond)
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, got.GetStatus())
		require.Equal(t, "converged: alice signed off U1", got.GetStatusMessage())
		require.Zero(t, got.GetVerification().GetPendingHumanCount())
		verdicts := logOf(t, b, pass.GetId(), commonv1.EventType_EVENT_TYPE_VERDICT)
		require.Contains(t, verdicts[len(verdicts)-1].GetMessage(), "Verify Done after sign-off: CONVERGED")
		ends := logOf(t, b, pass.GetId(), commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED)
		require.Len(t, ends, 2)
		require.Equal(t, "execution CONVERGED: converged: alice signed off U1", ends[1].GetMessage())

		fail := run("sign-fail")
		v.sign(fail.GetId(), verifierv1.HumanDecision_HUMAN_DECISION_FAIL, "the page is blank")
		require.Eventually(t, func() bool {
			got, _ = b.execution(t, fail.GetId())
			return got.GetStatus() == schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED
		}, 15*time.Second, 20*time.Millisecond)
		require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, got.GetOutcome())
		require.Equal(t, "sign-off: alice failed criterion U1: the page is blank", got.GetStatusMessage())
		require.Equal(t, []string{"U1"}, got.GetVerification().GetFailedCriteria())
	})
}
