package scheduler

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// loopVerifier is a scripted Verifier for the loop's decisions: criteria F1..F3 (AUTO_VERIFY),
// the n-th Verify fails the criteria failing(n) names; reports are kept for GetReport, and
// AnalyzeThrashing answers the seed's §13.2 questions on them. (The real Verifier runs in
// cmd/converge's feature-build tests.)
type loopVerifier struct {
	verifierv1.UnimplementedVerifierServiceServer
	failing   func(n int) []string
	blocked   func(n int) bool
	knowledge *knowledgeRecorder
	mu        sync.Mutex
	reqs      []*verifierv1.VerifyRequest
	reports   []*verifierv1.VerifyReport
}

var loopCriteria = []string{"F1", "F2", "F3"}

func (v *loopVerifier) ParseCriteria(_ context.Context, req *verifierv1.ParseCriteriaRequest) (*verifierv1.ParseCriteriaResponse, error) {
	if strings.Contains(req.GetMarkdown(), "BROKEN") {
		st, _ := status.New(codes.InvalidArgument, "criteria do not parse").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "markdown:L2", Description: `unknown check kind "ftp"`}}})
		return nil, st.Err()
	}
	res := &verifierv1.ParseCriteriaResponse{}
	for _, id := range loopCriteria {
		res.Criteria = append(res.Criteria, &verifierv1.Criterion{Id: id, Name: "criterion " + id, Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			RelatedFiles: []string{"src/" + strings.ToLower(id) + ".go"}})
	}
	return res, nil
}

func (v *loopVerifier) Verify(_ context.Context, req *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reqs = append(v.reqs, req)
	n := len(v.reqs)
	rep := &verifierv1.VerifyReport{Id: fmt.Sprintf("vr_%d", n), LoopKey: req.GetLoopKey(), Iteration: int32(n)}
	failing := v.failing(n)
	for _, id := range loopCriteria {
		r := &verifierv1.CriterionResult{CriterionId: id, Name: "criterion " + id, Status: verifierv1.CriterionStatus_CRITERION_STATUS_PASS}
		if slices.Contains(failing, id) {
			r.Status = verifierv1.CriterionStatus_CRITERION_STATUS_FAIL
			r.Evidence = &verifierv1.Evidence{Summary: "exit status 1", Kind: &verifierv1.Evidence_Command{Command: &verifierv1.CommandEvidence{StderrTail: id + ": want 7 columns, got 6"}}}
			rep.Failures = append(rep.Failures, &verifierv1.FailureDetail{CriterionId: id, CriterionName: "criterion " + id,
				Expected: "7 columns", Actual: "6 columns", Gap: "location missing", File: "src/" + strings.ToLower(id) + ".go", SuggestedFix: "add location"})
			rep.FailCount++
		} else {
			rep.PassCount++
		}
		rep.Results = append(rep.Results, r)
	}
	rep.FailedIds = failing
	rep.FailureSignature = signature(failing)
	switch {
	case v.blocked != nil && v.blocked(n):
		rep.Verdict, rep.BlockDetail = commonv1.Verdict_VERDICT_BLOCKED, "connect 127.0.0.1:8080: connection refused"
	case len(failing) > 0:
		rep.Verdict = commonv1.Verdict_VERDICT_FAILED
	default:
		rep.Verdict = commonv1.Verdict_VERDICT_CONVERGED
	}
	v.reports = append(v.reports, rep)
	return &verifierv1.VerifyResponse{Report: rep}, nil
}

func (v *loopVerifier) GetReport(_ context.Context, req *verifierv1.GetReportRequest) (*verifierv1.GetReportResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range v.reports {
		if r.GetId() == req.GetId() {
			return &verifierv1.GetReportResponse{Report: r}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "no report")
}

func (v *loopVerifier) AnalyzeThrashing(_ context.Context, req *verifierv1.AnalyzeThrashingRequest) (*verifierv1.AnalyzeThrashingResponse, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var reps []*verifierv1.VerifyReport
	for _, r := range v.reports {
		if r.GetLoopKey() == req.GetLoopKey() {
			reps = append(reps, r)
		}
	}
	res := &verifierv1.AnalyzeThrashingResponse{LoopKey: req.GetLoopKey(), Recommendation: verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_CONTINUE}
	n := len(reps)
	if n == 0 {
		return nil, status.Error(codes.NotFound, "no report")
	}
	sig := func(i int) string { return reps[i].GetFailureSignature() }
	if n >= 2 {
		for _, r := range reps[n-2].GetResults() {
			if r.GetStatus() == verifierv1.CriterionStatus_CRITERION_STATUS_PASS && slices.Contains(reps[n-1].GetFailedIds(), r.GetCriterionId()) {
				res.Regressions = append(res.Regressions, &verifierv1.Regression{CriterionId: r.GetCriterionId(), Current: true})
			}
		}
	}
	switch {
	case n >= 2 && sig(n-1) == sig(n-2):
		res.Recommendation, res.Explanation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_REPEATING, "same signature twice"
	case n >= 3 && sig(n-1) == sig(n-3):
		res.Recommendation, res.Explanation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_STUCK_OSCILLATING, "A → B → A"
	case len(res.Regressions) > 0:
		res.Recommendation = verifierv1.LoopRecommendation_LOOP_RECOMMENDATION_REGRESSION
	}
	return res, nil
}

func (v *loopVerifier) requests() []*verifierv1.VerifyRequest {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.reqs)
}

// knowledgeRecorder is a Knowledge server that keeps the items recorded.
type knowledgeRecorder struct {
	knowledgev1.UnimplementedKnowledgeServiceServer
	mu    sync.Mutex
	items []*knowledgev1.RecordItemRequest
}

func (k *knowledgeRecorder) RecordItem(_ context.Context, req *knowledgev1.RecordItemRequest) (*knowledgev1.RecordItemResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.items = append(k.items, req)
	return &knowledgev1.RecordItemResponse{}, nil
}

func (k *knowledgeRecorder) recorded() []*knowledgev1.RecordItemRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.items)
}

// buildBundle serves a Scheduler with the scripted Verifier, a Knowledge recorder (v.knowledge)
// and an agent that completes every assignment it gets.
func buildBundle(t *testing.T, st store.Store, v *loopVerifier, opts ...Option) *testBundle {
	t.Helper()
	v.knowledge = &knowledgeRecorder{}
	kconn := servertest.Serve(t, server.Config{Name: "knowledge-test",
		Services: []server.Service{{Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: v.knowledge}}})
	b := bundleWith(t, st, append([]Option{WithVerifier(serveVerifier(t, v)), WithKnowledge(knowledgev1.NewKnowledgeServiceClient(kconn))}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			res, err := b.client.ClaimTask(ctx, &schedulerv1.ClaimTaskRequest{InstanceId: "agent-1", Capabilities: agentCaps, Wait: durationpb.New(200 * time.Millisecond)})
			if err != nil || res.GetAssignment() == nil {
				continue
			}
			a := res.GetAssignment().GetAssignment()
			_, _ = b.client.CompleteTask(ctx, &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetId(), InstanceId: a.GetInstanceId(),
				FencingToken: a.GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, Usage: agentUsage})
		}
	}()
	return b
}

const loopDoneCriteria = "## F1: one\n## F2: two\n## F3: three\n"

func (b *testBundle) startBuild(t *testing.T, req *schedulerv1.StartFeatureBuildRequest) *schedulerv1.FeatureBuild {
	t.Helper()
	if req.GetTaskListSource() == nil {
		req.TaskListSource = &schedulerv1.StartFeatureBuildRequest_TaskListId{TaskListId: b.createList(t, diamond("feature"))}
	}
	if req.GetDoneCriteria() == "" {
		req.DoneCriteria = loopDoneCriteria
	}
	res, err := b.client.StartFeatureBuild(t.Context(), req)
	require.NoError(t, err)
	require.NotEmpty(t, res.GetFeatureBuild().GetId())
	return res.GetFeatureBuild()
}

// waitBuild polls until the build has ended.
func (b *testBundle) waitBuild(t *testing.T, id string) *schedulerv1.FeatureBuild {
	t.Helper()
	var fb *schedulerv1.FeatureBuild
	require.Eventually(t, func() bool {
		res, err := b.client.GetFeatureBuild(t.Context(), &schedulerv1.GetFeatureBuildRequest{Key: &schedulerv1.GetFeatureBuildRequest_FeatureBuildId{FeatureBuildId: id}})
		require.NoError(t, err)
		fb = res.GetFeatureBuild()
		return store.FeatureBuildEnded(fb.GetStatus())
	}, 60*time.Second, 20*time.Millisecond)
	return fb
}

// Iteration 1 runs the list and leaves F2 and F3 failing; iteration 2 runs one fix task per failed
// criterion (from the failure details, with the criterion's files), on the same build, and
// converges: SUCCESS with the seed's success report.
func TestFeatureBuildConvergesInTwoIterations(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		v := &loopVerifier{failing: func(n int) []string {
			if n == 1 {
				return []string{"F2", "F3"}
			}
			return nil
		}}
		b := buildBundle(t, st, v)
		fb := b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "inventory-export"}).GetId())
		require.Equal(t, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_COMPLETED, fb.GetStatus(), fb.GetExitMessage())
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, fb.GetOutcome())
		require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_SUCCESS, fb.GetExitReason())
		require.Len(t, fb.GetIterations(), 2)
		require.EqualValues(t, 2, fb.GetCurrentIteration())
		require.EqualValues(t, 100, fb.GetProgressPercent())
		require.EqualValues(t, 33, fb.GetIterations()[0].GetProgressPercent())
		require.Equal(t, []string{"F2", "F3"}, fb.GetIterations()[0].GetVerification().GetFailedCriteria())
		require.Contains(t, fb.GetExitMessage(), "## Build Feature - CONVERGED ✅")
		require.Contains(t, fb.GetExitMessage(), "| 2 | 3/3 | Fixed F2, F3 |")

		for _, r := range v.requests() {
			require.Equal(t, fb.GetId(), r.GetLoopKey(), "every iteration verifies in the build's loop")
		}
		ex1, _ := b.execution(t, fb.GetIterations()[0].GetExecutionId())
		ex2, _ := b.execution(t, fb.GetIterations()[1].GetExecutionId())
		for _, ex := range []*schedulerv1.Execution{ex1, ex2} {
			require.Equal(t, schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_FEATURE_BUILD, ex.GetTriggeredBy())
			require.Equal(t, fb.GetId(), ex.GetFeatureBuildId())
		}
		require.Equal(t, fb.GetTaskListId(), ex1.GetTaskListId())
		tl, err := b.client.GetTaskList(t.Context(), &schedulerv1.GetTaskListRequest{TaskListId: ex2.GetTaskListId()})
		require.NoError(t, err)
		tasks := tl.GetTaskList().GetSpec().GetTasks()
		require.Len(t, tasks, 2, "only the fix tasks: every task of iteration 1 completed")
		fix := tasks[0]
		require.Equal(t, "fix-F2", fix.GetId())
		require.Equal(t, "src/f2.go", fix.GetFile())
		for _, want := range []string{"Expected: 7 columns", "Actual: 6 columns", "Gap: location missing", "Suggested fix", "F2: want 7 columns, got 6",
			"Iteration 1 (FAILED)", "Do NOT regress these passing criteria: F1"} {
			require.Contains(t, fix.GetDescription(), want)
		}
		list, err := b.client.ListExecutions(t.Context(), &schedulerv1.ListExecutionsRequest{FeatureBuildId: fb.GetId()})
		require.NoError(t, err)
		require.Len(t, list.GetExecutions(), 2)
		var started int
		for _, e := range logOf(t, b, ex2.GetId(), commonv1.EventType_EVENT_TYPE_INFO) {
			if strings.Contains(e.GetMessage(), "Iteration 2 of 5") {
				started++
			}
		}
		require.Equal(t, 1, started, "the iteration's start is on its execution's event stream")
		// What fixed F2 and F3 is Knowledge on their files, tagged with the criterion and signature.
		require.Eventually(t, func() bool { return len(v.knowledge.recorded()) == 2 }, 10*time.Second, 10*time.Millisecond)
		k := v.knowledge.recorded()[0]
		require.Equal(t, knowledgev1.ItemType_ITEM_TYPE_GOTCHA, k.GetType())
		require.Equal(t, "src/f2.go", k.GetFilePattern())
		require.Contains(t, k.GetTags(), "criterion-f2")
		require.Contains(t, k.GetTags(), "signature-"+signature([]string{"F2", "F3"})[:12])
		require.Contains(t, k.GetContent(), "Done-criterion F2 of feature inventory-export failed")
		require.Contains(t, k.GetContent(), "Gap: location missing")
		require.Equal(t, "fix-F2", k.GetSource().GetTaskId())
		require.Eventually(t, func() bool { // logged right after the build ended
			for _, e := range logOf(t, b, ex2.GetId(), commonv1.EventType_EVENT_TYPE_INFO) {
				if strings.Contains(e.GetMessage(), "Build Feature - exit SUCCESS (CONVERGED)") {
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond, "so is the build's exit")
	})
}

// The exits of §12.2 / §17.1, each with its report.
func TestFeatureBuildExits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		failing  func(n int) []string
		blocked  func(n int) bool
		req      *schedulerv1.StartFeatureBuildRequest
		reason   schedulerv1.ExitReason
		outcome  commonv1.Outcome
		iters    int
		contains string
	}{
		{name: "stuck repeating", failing: func(int) []string { return []string{"F2"} },
			reason: schedulerv1.ExitReason_EXIT_REASON_STUCK, outcome: commonv1.Outcome_OUTCOME_ESCALATED, iters: 2, contains: "### Stuck Point"},
		{name: "stuck oscillating", failing: func(n int) []string { return [][]string{{"F2"}, {"F3"}}[(n-1)%2] },
			req:    &schedulerv1.StartFeatureBuildRequest{Autonomy: schedulerv1.Autonomy_AUTONOMY_AUTONOMOUS}, // regressions do not stop it
			reason: schedulerv1.ExitReason_EXIT_REASON_STUCK, outcome: commonv1.Outcome_OUTCOME_ESCALATED, iters: 3, contains: "A → B → A"},
		{name: "regression", failing: func(n int) []string { return [][]string{{"F2"}, {"F1"}}[min(n, 2)-1] },
			reason: schedulerv1.ExitReason_EXIT_REASON_REGRESSION, outcome: commonv1.Outcome_OUTCOME_ESCALATED, iters: 2, contains: "F1 passed in iteration 1 and fail in iteration 2"},
		{name: "max iterations", failing: func(n int) []string { return [][]string{{"F1", "F2"}, {"F2"}}[min(n, 2)-1] },
			req:    &schedulerv1.StartFeatureBuildRequest{MaxIterations: ptr(int32(2))},
			reason: schedulerv1.ExitReason_EXIT_REASON_MAX_ITERATIONS, outcome: commonv1.Outcome_OUTCOME_ESCALATED, iters: 2, contains: "Maximum iterations (2)"},
		{name: "blocked", failing: func(int) []string { return nil }, blocked: func(int) bool { return true },
			reason: schedulerv1.ExitReason_EXIT_REASON_BLOCKED, outcome: commonv1.Outcome_OUTCOME_BLOCKED, iters: 1, contains: "connection refused"},
		{name: "cautious", failing: func(int) []string { return []string{"F3"} },
			req:    &schedulerv1.StartFeatureBuildRequest{Autonomy: schedulerv1.Autonomy_AUTONOMY_CAUTIOUS},
			reason: schedulerv1.ExitReason_EXIT_REASON_BLOCKED, outcome: commonv1.Outcome_OUTCOME_BLOCKED, iters: 1, contains: "Cautious autonomy"},
		{name: "skip verify", failing: func(int) []string { return nil },
			req:    &schedulerv1.StartFeatureBuildRequest{SkipVerify: true},
			reason: schedulerv1.ExitReason_EXIT_REASON_VERIFY_SKIPPED, outcome: commonv1.Outcome_OUTCOME_ESCALATED, iters: 1, contains: "Verification skipped"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := &loopVerifier{failing: tc.failing, blocked: tc.blocked}
			b := buildBundle(t, backends["sqlite"](t), v)
			req := tc.req
			if req == nil {
				req = &schedulerv1.StartFeatureBuildRequest{}
			}
			req.Feature = "f"
			fb := b.waitBuild(t, b.startBuild(t, req).GetId())
			require.Equal(t, tc.reason, fb.GetExitReason(), fb.GetExitMessage())
			require.Equal(t, tc.outcome, fb.GetOutcome())
			require.Equal(t, schedulerv1.FeatureBuildStatus_FEATURE_BUILD_STATUS_FAILED, fb.GetStatus())
			require.Len(t, fb.GetIterations(), tc.iters)
			require.Contains(t, fb.GetExitMessage(), tc.contains)
			require.Contains(t, fb.GetExitMessage(), "converge build f --resume")
			if req.GetSkipVerify() {
				require.Empty(t, v.requests(), "nothing was verified")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A spent wall-time budget ends the build ESCALATED with exit reason BUDGET (not MAX_ITERATIONS)
// and the figure: the clock jumps two hours once iteration 1 has been verified.
func TestFeatureBuildWallTimeBudgetExitsBudget(t *testing.T) {
	t.Parallel()
	var late atomic.Bool
	v := &loopVerifier{failing: func(int) []string {
		late.Store(true)
		return []string{"F2"}
	}}
	clock := func() time.Time {
		if late.Load() {
			return time.Now().Add(2 * time.Hour)
		}
		return time.Now()
	}
	b := buildBundle(t, backends["sqlite"](t), v, WithClock(clock))
	fb := b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "budget",
		Options: &schedulerv1.ExecutionOptions{MaxWallTime: durationpb.New(time.Hour)}}).GetId())
	require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_BUDGET, fb.GetExitReason(), fb.GetExitMessage())
	require.Equal(t, commonv1.Outcome_OUTCOME_ESCALATED, fb.GetOutcome())
	require.Contains(t, fb.GetExitMessage(), "Budget spent: wall time 1h0m0s (max_wall_time)")
}

// agentUsage is the model usage buildBundle's agent reports with every completion.
var agentUsage = &schedulerv1.Usage{InputTokens: 1000, OutputTokens: 200, CostUsdMicros: 5000}

// The usage the agents report with CompleteTask is summed per execution and per build; once it
// passes max_tokens after an iteration, the build ends ESCALATED with exit reason BUDGET (not
// MAX_ITERATIONS) and the figures, spent vs budget.
func TestFeatureBuildTokenBudgetExitsBudget(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		v := &loopVerifier{failing: func(int) []string { return []string{"F2"} }}
		b := buildBundle(t, st, v)
		fb := b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "tokens", MaxTokens: 2000}).GetId())
		require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_BUDGET, fb.GetExitReason(), fb.GetExitMessage())
		require.Equal(t, commonv1.Outcome_OUTCOME_ESCALATED, fb.GetOutcome())
		require.Len(t, fb.GetIterations(), 1)
		ex, _ := b.execution(t, fb.GetIterations()[0].GetExecutionId())
		n := ex.GetUsage().GetInputTokens() / agentUsage.GetInputTokens()
		require.Positive(t, n, "the execution sums its completions' usage")
		require.True(t, proto.Equal(&schedulerv1.Usage{InputTokens: n * 1000, OutputTokens: n * 200, CostUsdMicros: n * 5000}, ex.GetUsage()), "%v", ex.GetUsage())
		require.True(t, proto.Equal(ex.GetUsage(), fb.GetUsage()), "%v", fb.GetUsage())
		require.Contains(t, fb.GetExitMessage(), fmt.Sprintf("Budget spent: %d tokens (%d input, %d output) of max_tokens 2000 after 1 iterations", n*1200, n*1000, n*200))

		// The cost budget, the same way.
		fb = b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "cost", MaxCostUsdMicros: 7500}).GetId())
		require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_BUDGET, fb.GetExitReason(), fb.GetExitMessage())
		require.Contains(t, fb.GetExitMessage(), "of max_cost $0.007500")
	})
}

// A build BLOCKED by its verdict (every task done, nothing failed: the app was down) resumes with a
// verify-only iteration, no execution, and converges: resume_count 1, two iterations.
func TestFeatureBuildResumeAfterBlockedVerifiesAgain(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		v := &loopVerifier{failing: func(int) []string { return nil }, blocked: func(n int) bool { return n == 1 }}
		b := buildBundle(t, st, v)
		fb := b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "export"}).GetId())
		require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_BLOCKED, fb.GetExitReason(), fb.GetExitMessage())
		require.Contains(t, fb.GetExitMessage(), "## Build Feature - BLOCKED")

		res, err := b.client.StartFeatureBuild(t.Context(), &schedulerv1.StartFeatureBuildRequest{Feature: "export", Resume: true})
		require.NoError(t, err)
		require.Equal(t, fb.GetId(), res.GetFeatureBuild().GetId())
		fb = b.waitBuild(t, fb.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, fb.GetOutcome(), fb.GetExitMessage())
		require.EqualValues(t, 1, fb.GetResumeCount())
		require.Len(t, fb.GetIterations(), 2)
		require.Empty(t, fb.GetIterations()[1].GetExecutionId(), "nothing was left to build: Verify Done ran again")
		require.Len(t, v.requests(), 2)
		require.Equal(t, fb.GetId(), v.requests()[1].GetLoopKey())
	})
}

// A start command that exits before the app is ready is a build error on start (seed §5.2, §5.6):
// the loop answers it with one fix task carrying the output, then starts the app again, twice at
// most; a third failure ends BLOCKED with the error.
func TestFeatureBuildAppBuildErrorGetsAFixTaskThenRestart(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	v := &loopVerifier{failing: func(int) []string { return nil }}
	b := buildBundle(t, backends["sqlite"](t), v)
	fb := b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "app", App: &schedulerv1.AppUnderTest{
		StartCommand: "echo 'main.go:3:2: undefined: foo' >&2; exit 2", ReadyUrl: fmt.Sprintf("http://127.0.0.1:%d/health", port)}}).GetId())
	require.Equal(t, schedulerv1.ExitReason_EXIT_REASON_BLOCKED, fb.GetExitReason(), fb.GetExitMessage())
	require.Contains(t, fb.GetExitMessage(), "build error on start: the app exited (exit status 2)")
	require.Len(t, fb.GetIterations(), 3, "two fix-and-restart iterations after the first failure")
	for _, it := range fb.GetIterations()[1:] {
		ex, _ := b.execution(t, it.GetExecutionId())
		tl, err := b.client.GetTaskList(t.Context(), &schedulerv1.GetTaskListRequest{TaskListId: ex.GetTaskListId()})
		require.NoError(t, err)
		tasks := tl.GetTaskList().GetSpec().GetTasks()
		require.Len(t, tasks, 1, "one fix task")
		require.Equal(t, "fix-app-start", tasks[0].GetId())
		require.Contains(t, tasks[0].GetDescription(), "main.go:3:2: undefined: foo")
	}
	require.Empty(t, v.requests(), "the app never ran: nothing was verified")
	var starts int
	for _, e := range fb.GetRecoveryLog() {
		if e.GetIssue() == "Build errors on start" {
			starts++
		}
	}
	require.Equal(t, 3, starts, "one start per iteration: a build error is not retried as is")
	// Each recovery action is also on its iteration's execution event stream.
	var events []string
	for _, e := range logOf(t, b, fb.GetIterations()[0].GetExecutionId(), commonv1.EventType_EVENT_TYPE_INFO) {
		if strings.HasPrefix(e.GetMessage(), "Build Feature - recovery: ") {
			events = append(events, e.GetMessage())
		}
	}
	require.NotEmpty(t, events)
	require.Contains(t, events[0], "Build errors on start")
}

// --app-ready grpc://host:port: the app is ready when grpc.health.v1 answers SERVING, and its
// address is the target of the Verifier's grpc checks. (The "app" here is a long sleep on a free
// port; the health server it would serve is the test's.)
func TestFeatureBuildAppReadyOverGRPCHealth(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := health.NewServer()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(l) }()
	t.Cleanup(gs.Stop)
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	appPort := free.Addr().(*net.TCPAddr).Port
	require.NoError(t, free.Close())
	v := &loopVerifier{failing: func(int) []string { return nil }}
	b := buildBundle(t, backends["sqlite"](t), v)
	fb := b.waitBuild(t, b.startBuild(t, &schedulerv1.StartFeatureBuildRequest{Feature: "grpc-app", App: &schedulerv1.AppUnderTest{
		StartCommand: "exec sleep 60", ReadyUrl: "grpc://" + l.Addr().String(), Port: int32(appPort)}}).GetId())
	require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, fb.GetOutcome(), fb.GetExitMessage())
	require.Len(t, v.requests(), 1)
	require.Equal(t, l.Addr().String(), v.requests()[0].GetTarget().GetGrpcAddress())
	require.Empty(t, v.requests()[0].GetTarget().GetBaseUrl())
}
