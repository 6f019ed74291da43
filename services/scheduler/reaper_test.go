package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	registrylite "github.com/converge-dev/converge/services/registry/store/sqlite"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// A real Registry (SQLite store, in-process locks) over its gRPC server.
func registryClient(t *testing.T) registryv1.RegistryServiceClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := registrylite.New(ctx, dbtest.SQLite(t), database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	hot := inproc.New(st, "inproc")
	t.Cleanup(func() { _ = hot.Close() })
	reg := registry.New(st, hot)
	reg.Start(ctx)
	conn := servertest.Serve(t, server.Config{Name: "registry-test",
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: reg, Ready: reg.Ready}}})
	return registryv1.NewRegistryServiceClient(conn)
}

// An agent whose Registry heartbeat stopped, and that stopped reporting to the Scheduler, loses
// its assignment before its lease runs out; one that keeps reporting keeps it even while the
// Registry calls it stale.
func TestStaleAgentsAssignmentsAreTakenBackBeforeTheLeaseEnds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		reg := registryClient(t)
		s := New(st, WithDriverInterval(20*time.Millisecond), WithWorkDir(t.TempDir()), WithRegistry(reg, 2*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		s.Start(ctx)
		conn := servertest.Serve(t, server.Config{Name: "scheduler-test",
			Services: []server.Service{{Desc: &schedulerv1.SchedulerService_ServiceDesc, Impl: s, Ready: st.Ping}}})
		b := &testBundle{client: schedulerv1.NewSchedulerServiceClient(conn), store: st}

		// Both agents heartbeat to the Registry once, then fall silent there.
		for _, id := range []string{"agent-dead", "agent-cut-off"} {
			_, err := reg.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: id})
			require.NoError(t, err)
			_, err = reg.Heartbeat(t.Context(), &registryv1.HeartbeatRequest{InstanceId: id, Status: commonv1.AgentStatus_AGENT_STATUS_RUNNING})
			require.NoError(t, err)
		}
		// A 15 s lease (heartbeat 5 s): the taking back below cannot be an expiry. The
		// Scheduler waits for the stale window (2 s) of silence to it too; agent-cut-off reports
		// about every 250 ms, so only a stall of 2 s on a loaded machine could cut it off (1 s
		// windows with 500 ms reports did, under load 20).
		opts := &schedulerv1.ExecutionOptions{MaxParallel: 2,
			AgentConfig: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(5 * time.Second)}}
		list := b.createList(t, &schedulerv1.TaskListSpec{Name: "two", Tasks: []*commonv1.Task{
			{Id: "A", Title: "a", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "a.txt"},
			{Id: "B", Title: "b", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "b.txt"}}})
		e := b.start(t, list, opts)
		liveInRegistry(t, reg, "agent-new")
		dead := b.claim(t, "agent-dead", 5*time.Second)
		require.NotNil(t, dead)
		live := b.claim(t, "agent-cut-off", 5*time.Second)
		require.NotNil(t, live)
		leaseEnds := dead.GetAssignment().GetLeaseExpireTime().AsTime()

		// agent-cut-off keeps reporting to the Scheduler; agent-dead says nothing.
		var next *schedulerv1.ClaimedAssignment
		for i := int64(1); next == nil && i <= 50; i++ {
			_, err := b.client.ReportProgress(t.Context(), &schedulerv1.ReportProgressRequest{AssignmentId: live.GetAssignment().GetId(),
				InstanceId: "agent-cut-off", FencingToken: live.GetAssignment().GetFencingToken(), ReportSeq: i})
			require.NoError(t, err, "the agent that still reports keeps its lease")
			next = b.claim(t, "agent-new", 250*time.Millisecond)
		}
		require.NotNil(t, next, "agent-dead's task is handed out again")
		require.Equal(t, dead.GetAssignment().GetId(), next.GetAssignment().GetId())
		require.Equal(t, int32(2), next.GetAssignment().GetAttempt())
		require.Equal(t, "AGENT_STALE", next.GetPreviousErrors()[0].GetCode())
		got, _, err := st.ListAssignments(t.Context(), store.ListAssignmentsQuery{ExecutionID: e.GetId(), InstanceID: "agent-new", PageSize: 10})
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.True(t, got[0].GetAssignTime().AsTime().Before(leaseEnds), "taken back before the lease ended")

		// The dead agent's late completion is refused by its fencing token.
		_, err = b.complete(t.Context(), dead, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
		requireCode(t, err, codes.Aborted)
	})
}
