package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// signoffPlan is gatedPlan whose phase 1 gate requires a person's sign-off.
var signoffPlan = "# Execution Plan: gated\n\n## Phase 1: Foundation\n\n**Gate:** `make check`\n**Sign-off:** required\n\n" +
	"| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T1.1 | Schema | — | `db/schema.sql` |\n| T1.2 | Store | — | `store/store.go` |\n\n" +
	"## Phase 2: API\n\n| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T2.1 | Routes | — | `api/routes.go` |\n| T2.2 | Handlers | — | `api/handlers.go` |\n"

// serveScheduler serves a Scheduler (driver running) on st with cfg until the test ends, or until
// stop is called (its driver stops; a "restarted" Scheduler is a second one on the same store).
func serveScheduler(t *testing.T, st store.Store, cfg server.Config) (b *testBundle, stop context.CancelFunc) {
	t.Helper()
	s := New(st, WithDriverInterval(20*time.Millisecond), WithWorkDir(t.TempDir()))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.Start(ctx)
	cfg.Name = "scheduler-test"
	cfg.Services = []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}}
	conn := servertest.Serve(t, cfg)
	return &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}, cancel
}

func (b *testBundle) importPlan(ctx context.Context, t *testing.T, plan string) string {
	t.Helper()
	res, err := b.client.ImportTaskList(ctx, &schedulerv1.ImportTaskListRequest{
		Format: schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, Content: []byte(plan)})
	require.NoError(t, err)
	return res.GetTaskList().GetId()
}

// workUntil claims and completes assignments as one agent until the execution awaits a gate's
// sign-off or has ended; it answers the tasks run, in order.
func (b *testBundle) workUntil(ctx context.Context, t *testing.T, instance, execution string) ([]string, *schedulerv1.Execution) {
	t.Helper()
	return b.workUntilAs(ctx, ctx, t, instance, execution)
}

// workUntilAs is workUntil with the agent's calls made with ctx and the reads of the execution
// with readCtx (on a server that authenticates, an agent may not read executions).
func (b *testBundle) workUntilAs(ctx, readCtx context.Context, t *testing.T, instance, execution string) ([]string, *schedulerv1.Execution) {
	t.Helper()
	var order []string
	for {
		res, err := b.client.GetExecution(readCtx, &schedulerv1.GetExecutionRequest{ExecutionId: execution})
		require.NoError(t, err)
		if e := res.GetExecution(); ended(e) || e.GetAwaitingSignoffGate() != "" {
			return order, e
		}
		got, err := b.client.ClaimTask(ctx, &schedulerv1.ClaimTaskRequest{InstanceId: instance, Capabilities: agentCaps, Wait: durationpb.New(200 * time.Millisecond)})
		require.NoError(t, err)
		c := got.GetAssignment()
		if c == nil {
			continue
		}
		order = append(order, c.GetAssignment().GetTaskId())
		_, err = b.complete(ctx, c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		require.NoError(t, err)
	}
}

// Issue 15 part 9: a gate that requires a sign-off pauses the run once its check passed — the next
// phase's waves do not start, the status and the stream name the gate, ResumeExecution is refused
// — and the wait survives a Scheduler restart; a PASS then runs phase 2 to completion.
func TestGateSignoffPassContinuesTheRun(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		b, stop := serveScheduler(t, st, server.Config{})
		e := b.start(t, b.importPlan(ctx, t, signoffPlan), nil)
		require.Equal(t, int32(3), e.GetWaveCount())
		order, e := b.workUntil(ctx, t, "agent-1", e.GetId())
		require.ElementsMatch(t, []string{"T1.1", "T1.2"}, order[:2])
		require.Equal(t, []string{"GATE-P1"}, order[2:])
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED, e.GetStatus())
		require.Equal(t, "GATE-P1", e.GetAwaitingSignoffGate())
		require.Equal(t, fmt.Sprintf("awaiting the sign-off of gate GATE-P1 (Gate of Phase 1: Foundation): its check passed; "+
			"sign it off with converge signoff %s GATE-P1 --pass|--fail --note TEXT", e.GetId()), e.GetStatusMessage())
		require.Equal(t, int32(2), e.GetCurrentWave(), "the gate's wave: phase 2's has not started")
		require.Nil(t, b.claim(t, "agent-1", 50*time.Millisecond), "nothing to claim while the gate awaits its sign-off")

		// The stream says so: an EXECUTION_PAUSED entry naming the gate, with a snapshot.
		stream, err := b.client.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(), IncludeSnapshots: true,
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED}})
		require.NoError(t, err)
		for {
			msg, err := stream.Recv()
			require.NoError(t, err)
			if msg.GetEntry() == nil {
				continue
			}
			require.Equal(t, commonv1.EventType_EVENT_TYPE_EXECUTION_PAUSED, msg.GetEntry().GetEventType())
			require.Equal(t, "GATE-P1", msg.GetEntry().GetContext().GetFields()["gate"].GetStringValue())
			require.Contains(t, msg.GetEntry().GetMessage(), "awaiting the sign-off of gate GATE-P1")
			require.Equal(t, "GATE-P1", msg.GetExecution().GetAwaitingSignoffGate())
			break
		}

		_, err = b.client.ResumeExecution(ctx, &schedulerv1.ResumeExecutionRequest{ExecutionId: e.GetId()})
		requireCode(t, err, codes.FailedPrecondition)
		require.ErrorContains(t, err, "awaits the sign-off of gate GATE-P1")
		for _, id := range []string{"GATE-P9", "T1.1"} {
			_, err = b.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: id, Decision: schedulerv1.GateDecision_GATE_DECISION_PASS})
			requireCode(t, err, codes.NotFound)
		}
		_, err = b.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1", Decision: schedulerv1.GateDecision_GATE_DECISION_FAIL})
		requireCode(t, err, codes.InvalidArgument) // a FAIL needs a note
		_, err = b.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1", Decision: schedulerv1.GateDecision_GATE_DECISION_PASS, Note: "bad\x00"})
		requireCode(t, err, codes.InvalidArgument)

		// A restarted Scheduler (a new one on the same store) finds the run waiting at the gate.
		stop()
		b2, _ := serveScheduler(t, st, server.Config{})
		again, _ := b2.execution(t, e.GetId())
		require.Equal(t, "GATE-P1", again.GetAwaitingSignoffGate())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_PAUSED, again.GetStatus())

		res, err := b2.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1",
			Decision: schedulerv1.GateDecision_GATE_DECISION_PASS, Who: "alice", Note: "schema reviewed"})
		require.NoError(t, err)
		require.Equal(t, "alice", res.GetSignoff().GetWho())
		require.NotNil(t, res.GetSignoff().GetTime())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, res.GetExecution().GetStatus())
		require.Empty(t, res.GetExecution().GetAwaitingSignoffGate())
		require.Equal(t, int32(3), res.GetExecution().GetCurrentWave(), "phase 2's wave opened")

		order, got := b2.workUntil(ctx, t, "agent-1", e.GetId())
		require.ElementsMatch(t, []string{"T2.1", "T2.2"}, order)
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, got.GetStatus())
		require.Equal(t, int32(5), got.GetCompletedTasks())
		require.Len(t, got.GetGateSignoffs(), 1)
		require.Equal(t, "GATE-P1", got.GetGateSignoffs()[0].GetGateId())
		require.Equal(t, schedulerv1.GateDecision_GATE_DECISION_PASS, got.GetGateSignoffs()[0].GetDecision())
		require.Equal(t, "schema reviewed", got.GetGateSignoffs()[0].GetNote())

		log, err := b2.client.GetExecutionLog(ctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(),
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_EXECUTION_RESUMED}})
		require.NoError(t, err)
		require.Len(t, log.GetEntries(), 1)
		require.Equal(t, "resumed: gate GATE-P1 (Gate of Phase 1: Foundation) signed off PASS by alice: schema reviewed", log.GetEntries()[0].GetMessage())

		_, err = b2.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1", Decision: schedulerv1.GateDecision_GATE_DECISION_PASS})
		requireCode(t, err, codes.FailedPrecondition)
	})
}

// Issue 15 part 9: a FAIL sign-off ends the run FAILED naming the gate; phase 2 never starts.
func TestGateSignoffFailStopsTheRun(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		b := runBundle(t, st)
		e := b.start(t, b.importPlan(ctx, t, signoffPlan), nil)
		_, err := b.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1", Decision: schedulerv1.GateDecision_GATE_DECISION_PASS})
		requireCode(t, err, codes.FailedPrecondition) // its check has not passed yet
		require.ErrorContains(t, err, "does not await the sign-off of gate GATE-P1 yet")

		order, e := b.workUntil(ctx, t, "agent-1", e.GetId())
		require.Len(t, order, 3)
		require.Equal(t, "GATE-P1", e.GetAwaitingSignoffGate())
		res, err := b.client.SignOffGate(ctx, &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1",
			Decision: schedulerv1.GateDecision_GATE_DECISION_FAIL, Who: "bob", Note: "the schema misses an index"})
		require.NoError(t, err)
		got := res.GetExecution()
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, got.GetStatus())
		require.Equal(t, commonv1.Outcome_OUTCOME_FAILED, got.GetOutcome())
		require.Equal(t, "gate GATE-P1 (Gate of Phase 1: Foundation) signed off FAIL by bob: the schema misses an index", got.GetStatusMessage())
		require.Empty(t, got.GetAwaitingSignoffGate())
		require.Equal(t, int32(3), got.GetCompletedTasks(), "phase 2 never ran")
		require.Len(t, got.GetGateSignoffs(), 1)
		require.Equal(t, schedulerv1.GateDecision_GATE_DECISION_FAIL, got.GetGateSignoffs()[0].GetDecision())
		require.Nil(t, b.claim(t, "agent-1", 50*time.Millisecond))
	})
}

// Issue 15 part 9: only an operator signs a gate off; an agent's principal is refused
// (PermissionDenied), and the sign-off records the operator's principal as who decided.
func TestGateSignoffNeedsAnOperator(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`principals:
  - {name: ops, roles: [operator], token_sha256: ["%s"]}
  - {name: pool-a, roles: [agent], token_sha256: ["%s"]}
`, auth.HashToken("tok-ops"), auth.HashToken("tok-agent"))), 0o600))
	b, _ := serveScheduler(t, backends["sqlite"](t), server.Config{AuthFile: path})
	as := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
	}
	e := b.startAs(as("tok-ops"), t, b.importPlan(as("tok-ops"), t, signoffPlan))
	_, e = b.workUntilAs(as("tok-agent"), as("tok-ops"), t, "pool-a", e.GetId())
	require.Equal(t, "GATE-P1", e.GetAwaitingSignoffGate())

	req := &schedulerv1.SignOffGateRequest{ExecutionId: e.GetId(), GateId: "GATE-P1", Decision: schedulerv1.GateDecision_GATE_DECISION_PASS, Who: "alice"}
	_, err := b.client.SignOffGate(as("tok-agent"), req)
	requireCode(t, err, codes.PermissionDenied)
	res, err := b.client.SignOffGate(as("tok-ops"), req)
	require.NoError(t, err)
	require.Equal(t, "ops (alice)", res.GetSignoff().GetWho())
	require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING, res.GetExecution().GetStatus())
}

func (b *testBundle) startAs(ctx context.Context, t *testing.T, list string) *schedulerv1.Execution {
	t.Helper()
	res, err := b.client.StartExecution(ctx, &schedulerv1.StartExecutionRequest{TaskListId: list})
	require.NoError(t, err)
	return res.GetExecution()
}
