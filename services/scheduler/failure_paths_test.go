package scheduler

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Issue 12 (failure paths), the Scheduler's side: a dead agent is reaped after the stale window
// and its locks released; a restarted agent's old session loses its work at once; a refusing
// Verifier ends the run BLOCKED; agent events keep their source time; wave entries their wave.

// bundleWith serves a Scheduler with opts (and a fast driver) on st.
func bundleWith(t *testing.T, st store.Store, opts ...Option) *testBundle {
	t.Helper()
	s := New(st, append([]Option{WithDriverInterval(20 * time.Millisecond), WithWorkDir(t.TempDir())}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s.Start(ctx)
	conn := servertest.Serve(t, server.Config{Name: "scheduler-test",
		Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}}})
	return &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}
}

// claimWithin claims as instance (session) until it gets an assignment or the deadline passes.
func (b *testBundle) claimWithin(t *testing.T, instance, session string, deadline time.Duration) *schedulerv1.ClaimedAssignment {
	t.Helper()
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		res, err := b.client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: instance, SessionId: session,
			Capabilities: agentCaps, Wait: durationpb.New(min(500*time.Millisecond, time.Until(end)))})
		require.NoError(t, err)
		if c := res.GetAssignment(); c != nil {
			return c
		}
	}
	return nil
}

func oneTask(name string) *schedulerv1.TaskListSpec {
	return &schedulerv1.TaskListSpec{Name: name, Tasks: []*commonv1.Task{
		{Id: "A", Title: "a", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "a.txt"}}}
}

func liveInRegistry(t *testing.T, reg registryv1.RegistryServiceClient, instance string) {
	t.Helper()
	_, err := reg.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: instance})
	require.NoError(t, err)
	_, err = reg.Heartbeat(t.Context(), &registryv1.HeartbeatRequest{InstanceId: instance, Status: commonv1.AgentStatus_AGENT_STATUS_RUNNING})
	require.NoError(t, err)
}

func lockFor(t *testing.T, reg registryv1.RegistryServiceClient, resource, holder string) *registryv1.Lock {
	t.Helper()
	res, err := reg.AcquireLock(t.Context(), &registryv1.AcquireLockRequest{Resource: resource, Holder: holder, Ttl: durationpb.New(10 * time.Minute)})
	require.NoError(t, err)
	require.True(t, res.GetGranted(), "lock %s for %s", resource, holder)
	return res.GetLock()
}

// Defects 2 and 3: with the default heartbeat (30 s: leases of 90 s, and the old rule waited
// 1.5 heartbeats = 45 s of silence), an agent that died right after its claim loses its task
// once the stale window (1 s here) has passed, its file lock is released first so the next
// agent gets it at once with a higher fencing token, and its late calls are refused.
func TestDeadAgentIsReapedAfterTheStaleWindowAndItsLocksReleased(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		reg := registryClient(t)
		b := bundleWith(t, st, WithRegistry(reg, time.Second))
		liveInRegistry(t, reg, "agent-dead")
		e := b.start(t, b.createList(t, oneTask("reap")), nil) // default heartbeat
		dead := b.claim(t, "agent-dead", 5*time.Second)
		require.NotNil(t, dead)
		require.Equal(t, 90*time.Second, dead.GetLeaseDuration().AsDuration())
		old := lockFor(t, reg, "a.txt", "agent-dead")

		// Far less than 45 s: the old rule could not have handed it out yet.
		liveInRegistry(t, reg, "agent-next")
		next := b.claimWithin(t, "agent-next", "", 15*time.Second)
		require.NotNil(t, next, "the dead agent's task is handed out again after the stale window")
		require.Equal(t, dead.GetAssignment().GetId(), next.GetAssignment().GetId())
		require.Equal(t, int32(2), next.GetAssignment().GetAttempt())
		require.Equal(t, "AGENT_STALE", next.GetPreviousErrors()[0].GetCode())

		// The lock was released before the requeue: the next agent gets it without waiting,
		// with a higher token; the dead holder can no longer renew or release it.
		_, err := reg.GetLock(t.Context(), &registryv1.GetLockRequest{Resource: "a.txt"})
		requireCode(t, err, codes.NotFound)
		fresh := lockFor(t, reg, "a.txt", "agent-next")
		require.Greater(t, fresh.GetToken(), old.GetToken())
		_, err = reg.RenewLock(t.Context(), &registryv1.RenewLockRequest{Resource: "a.txt", Holder: "agent-dead", Token: old.GetToken(), Ttl: durationpb.New(time.Minute)})
		require.Error(t, err, "the dead holder's renewal is refused")

		// The dead agent's late reports are refused by its fencing token.
		_, err = b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: dead.GetAssignment().GetId(),
			InstanceId: "agent-dead", FencingToken: dead.GetAssignment().GetFencingToken(), ReportSeq: 1})
		requireCode(t, err, codes.Aborted)
		_, err = b.complete(t.Context(), dead, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		requireCode(t, err, codes.Aborted)
		_ = e
	})
}

// locksDown is the real Registry with its lock calls failing as if the Registry went away
// between ListStaleAgents and ListLocks.
type locksDown struct {
	registryv1.RegistryServiceClient
}

func (locksDown) ListLocks(context.Context, *registryv1.ListLocksRequest, ...grpc.CallOption) (*registryv1.ListLocksResponse, error) {
	return nil, status.Error(codes.Unavailable, "registry: connection refused")
}

// Defect 3: a Registry that cannot release the dead agent's locks does not keep its task from
// being requeued (the locks then end with their TTL).
func TestDeadAgentIsRequeuedWhenItsLocksCannotBeReleased(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		reg := registryClient(t)
		b := bundleWith(t, st, WithRegistry(locksDown{reg}, time.Second))
		liveInRegistry(t, reg, "agent-dead")
		b.start(t, b.createList(t, oneTask("reap-no-locks")), nil)
		dead := b.claim(t, "agent-dead", 5*time.Second)
		require.NotNil(t, dead)
		lockFor(t, reg, "a.txt", "agent-dead")
		liveInRegistry(t, reg, "agent-next")
		next := b.claimWithin(t, "agent-next", "", 15*time.Second)
		require.NotNil(t, next)
		require.Equal(t, dead.GetAssignment().GetId(), next.GetAssignment().GetId())
		got, err := reg.GetLock(t.Context(), &registryv1.GetLockRequest{Resource: "a.txt"})
		require.NoError(t, err)
		require.Equal(t, "agent-dead", got.GetLock().GetHolder(), "the lock lives on to its TTL")
	})
}

// Defect 4: a claim from a new session of an instance takes back at once what the old session
// held (AGENT_RESTARTED), after releasing its locks; the old session's late calls are refused.
// Claims without a session, or from the same session, take nothing back.
func TestNewSessionTakesBackWhatTheOldSessionHeld(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		reg := registryClient(t)
		b := bundleWith(t, st, WithRegistry(reg, time.Hour))
		list := b.createList(t, &schedulerv1.TaskListSpec{Name: "sessions", Tasks: []*commonv1.Task{
			{Id: "A", Title: "a", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "a.txt"},
			{Id: "B", Title: "b", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "b.txt"}}})
		e := b.start(t, list, &schedulerv1.ExecutionOptions{MaxParallel: 2})
		liveInRegistry(t, reg, "agent-r")
		a1 := b.claimWithin(t, "agent-r", "boot-1", 5*time.Second)
		require.NotNil(t, a1)
		lock := lockFor(t, reg, a1.GetTask().GetFile(), "agent-r")
		b1 := b.claimWithin(t, "agent-r", "boot-1", 5*time.Second)
		require.NotNil(t, b1, "the same session claims again without losing anything")

		held := func() int {
			got, _, err := b.store.ListAssignments(t.Context(), store.ListAssignmentsQuery{ExecutionID: e.GetId(),
				Statuses: []schedulerv1.AssignmentStatus{schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_ASSIGNED}, PageSize: 10})
			require.NoError(t, err)
			return len(got)
		}
		res, err := b.client.ClaimTask(t.Context(), &schedulerv1.ClaimTaskRequest{InstanceId: "agent-r", Capabilities: agentCaps})
		require.NoError(t, err)
		require.Nil(t, res.GetAssignment(), "a claim without a session takes nothing back")
		require.Equal(t, 2, held())

		// The process restarts under the same instance id: the first claim of boot-2 gets
		// the old session's work back at once, long before any lease or stale window.
		again := b.claimWithin(t, "agent-r", "boot-2", 5*time.Second)
		require.NotNil(t, again)
		require.Equal(t, int32(2), again.GetAssignment().GetAttempt())
		require.Equal(t, "AGENT_RESTARTED", again.GetPreviousErrors()[0].GetCode())
		require.Contains(t, again.GetPreviousErrors()[0].GetMessage(), "session boot-2 replaced boot-1")
		_, err = reg.GetLock(t.Context(), &registryv1.GetLockRequest{Resource: lock.GetResource()})
		requireCode(t, err, codes.NotFound)

		// The old session's late calls are refused.
		_, err = b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: a1.GetAssignment().GetId(),
			InstanceId: "agent-r", FencingToken: a1.GetAssignment().GetFencingToken(), ReportSeq: 1})
		requireCode(t, err, codes.Aborted)
		_, err = b.complete(t.Context(), b1, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		requireCode(t, err, codes.Aborted)

		log, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(), Limit: 100,
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_REQUEUED}})
		require.NoError(t, err)
		require.Len(t, log.GetEntries(), 2, "both of boot-1's assignments were requeued")
	})
}

// answeringVerifier is a Verifier server whose n-th Verify answers answer(n).
type answeringVerifier struct {
	verifierv1.UnimplementedVerifierServiceServer
	calls  atomic.Int32
	answer func(n int32) (*verifierv1.VerifyResponse, error)
}

func (v *answeringVerifier) Verify(context.Context, *verifierv1.VerifyRequest) (*verifierv1.VerifyResponse, error) {
	return v.answer(v.calls.Add(1))
}

func serveVerifier(t *testing.T, v verifierv1.VerifierServiceServer) verifierv1.VerifierServiceClient {
	t.Helper()
	conn := servertest.Serve(t, server.Config{Name: "verifier-test",
		Services: []server.Service{{Desc: &verifierv1.VerifierService_ServiceDesc, Impl: v}}})
	return verifierv1.NewVerifierServiceClient(conn)
}

func withCriteria(name string) *schedulerv1.TaskListSpec {
	spec := oneTask(name)
	spec.DoneCriteria = "## F1: builds\nTag: AUTO_VERIFY\n```check\ncommand:\n  shell: true\n```\n"
	return spec
}

func logOf(t *testing.T, b *testBundle, id string, types ...commonv1.EventType) []*commonv1.LogEntry {
	t.Helper()
	res, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: id, Limit: 500, EventTypes: types})
	require.NoError(t, err)
	return res.GetEntries()
}

// Defect 5: a Verifier that refuses the request (InvalidArgument) is asked once; the run ends
// BLOCKED with the Verifier's code and message in the verdict entry, the summary and the status.
func TestRefusingVerifierEndsTheRunBlockedAtOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		v := &answeringVerifier{answer: func(int32) (*verifierv1.VerifyResponse, error) {
			return nil, status.Error(codes.InvalidArgument, "this verifier allows no local directories")
		}}
		b := bundleWith(t, st, WithVerifier(serveVerifier(t, v)), WithVerifyRetries(5, 10*time.Millisecond))
		e := b.start(t, b.createList(t, withCriteria("refused")), nil)
		b.work(t, "agent-1", e.GetId(), succeed)
		e = b.waitEnded(t, e.GetId())
		require.Equal(t, commonv1.Outcome_OUTCOME_BLOCKED, e.GetOutcome())
		require.Equal(t, commonv1.Verdict_VERDICT_BLOCKED, e.GetVerification().GetVerdict())
		const want = "InvalidArgument: this verifier allows no local directories"
		require.Contains(t, e.GetVerification().GetBlockReason(), want)
		require.Contains(t, e.GetStatusMessage(), want)
		verdicts := logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_VERDICT)
		require.Len(t, verdicts, 1)
		require.Contains(t, verdicts[0].GetMessage(), want)
		require.Equal(t, int32(1), v.calls.Load(), "a refusal is not retried")
		require.Empty(t, logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_WARNING))
	})
}

// Defect 5: a Verifier that answers Unavailable is asked again with backoff a bounded number of
// times, each try logged, then the run ends BLOCKED with the last error; one that recovers
// within the tries gives its verdict.
func TestUnavailableVerifierIsRetriedBoundedThenBlocked(t *testing.T) {
	t.Parallel()
	t.Run("Down", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, func(t *testing.T, st store.Store) {
			down := &answeringVerifier{answer: func(int32) (*verifierv1.VerifyResponse, error) {
				return nil, status.Error(codes.Unavailable, "connection refused")
			}}
			b := bundleWith(t, st, WithVerifier(serveVerifier(t, down)), WithVerifyRetries(3, 10*time.Millisecond))
			e := b.start(t, b.createList(t, withCriteria("down")), nil)
			b.work(t, "agent-1", e.GetId(), succeed)
			e = b.waitEnded(t, e.GetId())
			require.Equal(t, commonv1.Outcome_OUTCOME_BLOCKED, e.GetOutcome())
			require.Contains(t, e.GetVerification().GetBlockReason(), "failed 3 times, last: Unavailable: connection refused")
			require.Equal(t, int32(3), down.calls.Load())
			tries := logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_WARNING)
			require.Len(t, tries, 2, "each failed try before the last is logged")
			require.Contains(t, tries[0].GetMessage(), "Unavailable: connection refused (try 1 of 3)")
			require.Contains(t, tries[1].GetMessage(), "(try 2 of 3)")
		})
	})
	t.Run("Recovers", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, func(t *testing.T, st store.Store) {
			flaky := &answeringVerifier{answer: func(n int32) (*verifierv1.VerifyResponse, error) {
				if n == 1 {
					return nil, status.Error(codes.DeadlineExceeded, "slow")
				}
				return &verifierv1.VerifyResponse{Report: &verifierv1.VerifyReport{Id: "vr_1", Verdict: commonv1.Verdict_VERDICT_CONVERGED,
					PassCount: 1, CreateTime: timestamppb.Now()}}, nil
			}}
			b2 := bundleWith(t, st, WithVerifier(serveVerifier(t, flaky)), WithVerifyRetries(3, 10*time.Millisecond))
			e2 := b2.start(t, b2.createList(t, withCriteria("flaky")), nil)
			b2.work(t, "agent-1", e2.GetId(), succeed)
			e2 = b2.waitEnded(t, e2.GetId())
			require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED, e2.GetOutcome(), e2.GetStatusMessage())
			require.Equal(t, int32(2), flaky.calls.Load())
		})
	})
}

// Defect 9: an agent event's own time is the entry's source_time (GetExecutionLog and
// WatchExecution), the entry's time stays the store's.
func TestAgentEventTimeIsTheEntrysSourceTime(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, oneTask("times")), nil)
		c := b.claim(t, "agent-1", 5*time.Second)
		require.NotNil(t, c)
		started := time.Now().Add(-15 * time.Second).UTC().Truncate(time.Millisecond)
		_, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: c.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), ReportSeq: 1,
			Events: []*schedulerv1.AgentEvent{
				{EventType: commonv1.EventType_EVENT_TYPE_TASK_STARTED, Message: "started", Time: timestamppb.New(started)},
				{EventType: commonv1.EventType_EVENT_TYPE_INFO, Message: "no time of its own"}}})
		require.NoError(t, err)

		entries := logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_TASK_STARTED, commonv1.EventType_EVENT_TYPE_INFO)
		require.Len(t, entries, 2)
		require.True(t, entries[0].GetSourceTime().AsTime().Equal(started), "source time %s", entries[0].GetSourceTime().AsTime())
		require.True(t, entries[0].GetTime().AsTime().After(started.Add(10*time.Second)), "the entry's time is when it was received")
		require.Nil(t, entries[1].GetSourceTime())

		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		stream, err := b.client.WatchExecution(ctx, &schedulerv1.WatchExecutionRequest{ExecutionId: e.GetId(),
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_TASK_STARTED}})
		require.NoError(t, err)
		for {
			msg, err := stream.Recv()
			require.NoError(t, err)
			if en := msg.GetEntry(); en != nil {
				require.True(t, en.GetSourceTime().AsTime().Equal(started))
				break
			}
		}
	})
}

// Defect 9: every entry of a wave (wave started/completed, the integration's lease and events)
// carries its wave number, not only the task assignments'.
func TestWaveAndIntegrationEntriesCarryTheirWave(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := diamond("waves")
		spec.Validation = &schedulerv1.ValidationLevels{Codebase: &commonv1.TaskValidation{Command: "true"}}
		e := b.start(t, b.createList(t, spec), nil)
		b.work(t, "agent-1", e.GetId(), succeed)
		b.waitEnded(t, e.GetId())
		entries := logOf(t, b, e.GetId(), commonv1.EventType_EVENT_TYPE_WAVE_STARTED, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED,
			commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED,
			commonv1.EventType_EVENT_TYPE_LEASE_GRANTED)
		integrations := 0
		for _, en := range entries {
			require.NotZero(t, en.GetWaveNumber(), "%s: %s", en.GetEventType(), en.GetMessage())
			if strings.HasPrefix(en.GetMessage(), "integration of wave") {
				integrations++
				require.Empty(t, en.GetTaskId())
				require.Contains(t, en.GetMessage(), "integration of wave "+string(rune('0'+en.GetWaveNumber())))
			}
		}
		require.Equal(t, 3, integrations, "one integration lease per wave")
	})
}

// A task the agent gives back (CANCELLED with its own code: the Registry could not answer for its
// locks) goes back to the queue with the agent's reason, as the next attempt, instead of failing.
func TestTaskGivenBackIsRequeuedWithTheAgentsReason(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		e := b.start(t, b.createList(t, diamond("given-back")), nil)
		c := b.claim(t, "agent-1", time.Second)
		require.NotNil(t, c)
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED,
			Error: &commonv1.ErrorContext{Code: "LOCK_UNAVAILABLE", Message: "the Registry could not answer for 30s"}})
		require.NoError(t, err)

		again := b.claim(t, "agent-2", time.Second)
		require.NotNil(t, again)
		require.Equal(t, c.GetTask().GetId(), again.GetTask().GetId(), "the same task, back in the queue")
		require.Equal(t, int32(2), again.GetAssignment().GetAttempt())
		require.Equal(t, "LOCK_UNAVAILABLE", again.GetPreviousErrors()[0].GetCode())
		require.Equal(t, "the agent gave the task back: the Registry could not answer for 30s", again.GetPreviousErrors()[0].GetMessage())
		got, _ := b.execution(t, e.GetId())
		require.Zero(t, got.GetFailedTasks())
	})
}

// An assignment an agent held ahead and gives back unstarted (CANCELLED, NOT_STARTED: converge-agent
// --prefetch draining) goes back to the queue without using an attempt: given back more times
// than max_retries allows, it still runs, as attempt 1.
func TestTaskGivenBackUnstartedKeepsItsAttempt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		zero := int32(0)
		e := b.start(t, b.createList(t, diamond("held-ahead")), &schedulerv1.ExecutionOptions{MaxRetries: &zero})
		var task string
		for range 3 {
			c := b.claim(t, "agent-1", time.Second)
			require.NotNil(t, c)
			require.Equal(t, int32(1), c.GetAssignment().GetAttempt())
			if task == "" {
				task = c.GetTask().GetId()
			}
			require.Equal(t, task, c.GetTask().GetId(), "the same task, back in the queue")
			_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
				InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED,
				Error: &commonv1.ErrorContext{Code: "NOT_STARTED", Message: "the worker is draining or stopping"}})
			require.NoError(t, err)
		}
		again := b.claim(t, "agent-2", time.Second)
		require.NotNil(t, again)
		require.Equal(t, int32(1), again.GetAssignment().GetAttempt())
		require.Equal(t, "NOT_STARTED", again.GetPreviousErrors()[0].GetCode())
		require.Equal(t, "the agent gave the task back before starting it: the worker is draining or stopping", again.GetPreviousErrors()[0].GetMessage())
		got, _ := b.execution(t, e.GetId())
		require.Zero(t, got.GetFailedTasks())
		require.Equal(t, int32(1), got.GetRunningTasks(), "only agent-2's claim runs")
	})
}
