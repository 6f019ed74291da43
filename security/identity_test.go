package security

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
)

func requireDenied(t *testing.T, err error, what string) {
	t.Helper()
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%s: %v", what, err)
}

// Finding 1, the attacks of the review against the real binaries (no agent process runs: the
// test's callers play the agents, each with its own principal).
func TestAgentIdentityAttacks(t *testing.T) {
	c := startCluster(t, 0)
	op := principalOf(auth.RoleOperator)

	t.Run("AgentSignsOffHumanVerify", func(t *testing.T) {
		v := verifierv1.NewVerifierServiceClient(dialAs(t, c.VerifierAddr, agentA))
		_, err := v.RecordHumanVerdict(t.Context(), &verifierv1.RecordHumanVerdictRequest{LoopKey: "loop-1", CriterionId: "U1",
			Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "a trusted human"})
		requireDenied(t, err, "an agent's RecordHumanVerdict")
		require.Contains(t, status.Convert(err).Message(), "RecordHumanVerdict: it needs one of the roles operator")

		// A loop whose report has a HUMAN_VERIFY criterion: still refused to an agent and to a
		// verify client; an operator's sign-off records the principal as who.
		ops := verifierv1.NewVerifierServiceClient(dialAs(t, c.VerifierAddr, op))
		_, err = ops.Verify(t.Context(), &verifierv1.VerifyRequest{LoopKey: "loop-1",
			CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
				{Id: "U1", Name: "Button placement", Tag: verifierv1.CriterionTag_CRITERION_TAG_HUMAN_VERIFY}}}},
			Target: &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: c.WorkDir}}})
		require.NoError(t, err)
		signOff := &verifierv1.RecordHumanVerdictRequest{LoopKey: "loop-1", CriterionId: "U1",
			Decision: verifierv1.HumanDecision_HUMAN_DECISION_PASS, Who: "Alice Smith"}
		_, err = v.RecordHumanVerdict(t.Context(), signOff)
		requireDenied(t, err, "an agent's RecordHumanVerdict on a real loop")
		_, err = verifierv1.NewVerifierServiceClient(dialAs(t, c.VerifierAddr, principalOf(auth.RoleVerifyClient))).RecordHumanVerdict(t.Context(), signOff)
		requireDenied(t, err, "a verify client's RecordHumanVerdict")
		res, err := ops.RecordHumanVerdict(t.Context(), signOff)
		require.NoError(t, err)
		require.Equal(t, op+" (Alice Smith)", res.GetHumanVerdict().GetWho(), "who is the authenticated principal")
	})

	t.Run("AgentCompletesAnotherAgentsAssignment", func(t *testing.T) {
		ops := schedulerv1.NewSchedulerServiceClient(dialAs(t, c.SchedulerAddr(0), op))
		tl, err := ops.CreateTaskList(t.Context(), &schedulerv1.CreateTaskListRequest{Spec: &schedulerv1.TaskListSpec{Name: "victim",
			Tasks: []*commonv1.Task{{Id: "1", Title: "one", File: "a.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE, Command: "true"}}}})
		require.NoError(t, err)
		_, err = ops.StartExecution(t.Context(), &schedulerv1.StartExecutionRequest{TaskListId: tl.GetTaskList().GetId()})
		require.NoError(t, err)

		a := schedulerv1.NewSchedulerServiceClient(dialAs(t, c.SchedulerAddr(0), agentA))
		b := schedulerv1.NewSchedulerServiceClient(dialAs(t, c.SchedulerAddr(0), agentB))
		// A registers its instance with the Registry (the Scheduler admits registered agents only).
		_, err = registryv1.NewRegistryServiceClient(dialAs(t, c.RegistryAddr, agentA)).RegisterAgent(t.Context(),
			&registryv1.RegisterAgentRequest{InstanceId: "inst-a", SessionId: "s1"})
		require.NoError(t, err)
		var claimed *schedulerv1.ClaimedAssignment
		require.Eventually(t, func() bool {
			res, err := a.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "inst-a", SessionId: "s1",
				Capabilities: []string{"executor:command"}, Wait: durationpb.New(2 * time.Second)})
			require.NoError(t, err)
			claimed = res.GetAssignment()
			return claimed != nil
		}, 60*time.Second, 10*time.Millisecond)
		as := claimed.GetAssignment()
		require.Equal(t, agentA, as.GetPrincipal())

		// B knows the assignment, the instance and the (small, sequential) fencing token.
		complete := &schedulerv1.CompleteTaskRequest{AssignmentId: as.GetId(), InstanceId: "inst-a", FencingToken: as.GetFencingToken(),
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED}
		_, err = b.CompleteTask(t.Context(), complete)
		requireDenied(t, err, "B completing A's assignment")
		_, err = b.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: as.GetId(), InstanceId: "inst-a",
			FencingToken: as.GetFencingToken(), ReportSeq: 1})
		requireDenied(t, err, "B reporting A's progress")
		_, err = b.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "inst-a", SessionId: "s2", Capabilities: []string{"executor:command"}})
		requireDenied(t, err, "B claiming as A's instance (which would take A's lease back)")
		_, err = b.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "inst-a", SessionId: "s1", Capabilities: []string{"executor:command"}})
		requireDenied(t, err, "B claiming as A's instance, registered to A in the Registry")
		_, err = b.ListAssignments(t.Context(), &schedulerv1.ListAssignmentsRequest{ExecutionId: as.GetExecutionId()})
		requireDenied(t, err, "an agent listing assignments (and their tokens)")

		// A, whose assignment it is, completes it.
		_, err = a.CompleteTask(t.Context(), complete)
		require.NoError(t, err)
		// With nothing held, the Registry's record still says whose the instance is.
		_, err = b.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "inst-a", Capabilities: []string{"executor:command"}})
		requireDenied(t, err, "B claiming as the instance A registered")
	})

	t.Run("AgentReleasesAnotherHoldersLock", func(t *testing.T) {
		a := registryv1.NewRegistryServiceClient(dialAs(t, c.RegistryAddr, agentA))
		b := registryv1.NewRegistryServiceClient(dialAs(t, c.RegistryAddr, agentB))
		_, err := a.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: "lock-a", SessionId: "s1"})
		require.NoError(t, err)
		_, err = b.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: "lock-b", SessionId: "s1"})
		require.NoError(t, err)
		got, err := a.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{Resource: "src/main.go", Holder: "lock-a", Ttl: durationpb.New(time.Minute)})
		require.NoError(t, err)
		require.True(t, got.GetGranted())

		lock, err := b.GetLock(t.Context(), &registryv1.GetLockRequest{Resource: "src/main.go"})
		require.NoError(t, err)
		_, err = b.ReleaseLock(t.Context(), &registryv1.ReleaseLockRequest{Resource: "src/main.go", Holder: "lock-a", Token: lock.GetLock().GetToken()})
		requireDenied(t, err, "B releasing A's lock")
		_, err = b.RenewLock(t.Context(), &registryv1.RenewLockRequest{Resource: "src/main.go", Holder: "lock-a", Token: lock.GetLock().GetToken(), Ttl: durationpb.New(time.Hour)})
		requireDenied(t, err, "B renewing A's lock")
		_, err = b.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{Resource: "src/other.go", Holder: "lock-a", Ttl: durationpb.New(time.Minute)})
		requireDenied(t, err, "B locking as A")
		_, err = b.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{Resource: "src/other.go", Holder: "never-registered", Ttl: durationpb.New(time.Minute)})
		requireDenied(t, err, "B locking as an instance nobody registered")
		_, err = b.Heartbeat(t.Context(), &registryv1.HeartbeatRequest{InstanceId: "lock-a", Status: commonv1.AgentStatus_AGENT_STATUS_FAILED})
		requireDenied(t, err, "B heartbeating as A")
		_, err = b.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: "lock-a", SessionId: "s9"})
		requireDenied(t, err, "B re-registering A's instance (which would release A's locks)")

		// B still locks as itself; A releases its own lock.
		_, err = b.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{Resource: "src/other.go", Holder: "lock-b", Ttl: durationpb.New(time.Minute)})
		require.NoError(t, err)
		_, err = a.ReleaseLock(t.Context(), &registryv1.ReleaseLockRequest{Resource: "src/main.go", Holder: "lock-a", Token: got.GetLock().GetToken()})
		require.NoError(t, err)
	})
}

// Finding 1: an agent's token drains no agent (AgentService/Drain is operators').
func TestAgentDrainsAnotherAgent(t *testing.T) {
	c := startCluster(t, 1)
	id := c.Agents()[0]
	b := agentv1.NewAgentServiceClient(dialAs(t, c.AgentAddr(id), agentB))
	_, err := b.Drain(t.Context(), &agentv1.DrainRequest{})
	requireDenied(t, err, "an agent draining another")
	st, err := agentv1.NewAgentServiceClient(dialAs(t, c.AgentAddr(id), principalOf(auth.RoleOperator))).GetStatus(t.Context(), &agentv1.GetStatusRequest{})
	require.NoError(t, err)
	require.False(t, st.GetDraining(), "the agent must not be draining")
}
