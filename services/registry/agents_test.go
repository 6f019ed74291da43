package registry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/store"
)

const (
	initializing = commonv1.AgentStatus_AGENT_STATUS_INITIALIZING
	running      = commonv1.AgentStatus_AGENT_STATUS_RUNNING
	idle         = commonv1.AgentStatus_AGENT_STATUS_IDLE
	completed    = commonv1.AgentStatus_AGENT_STATUS_COMPLETED
	failed       = commonv1.AgentStatus_AGENT_STATUS_FAILED
	stuck        = commonv1.AgentStatus_AGENT_STATUS_STUCK
)

func register(t *testing.T, c registryv1.RegistryServiceClient, id, execution string) *registryv1.AgentInstance {
	t.Helper()
	res, err := c.RegisterAgent(t.Context(), &registryv1.RegisterAgentRequest{InstanceId: id, ExecutionId: execution})
	require.NoError(t, err)
	return res.GetAgent()
}

func heartbeat(t *testing.T, c registryv1.RegistryServiceClient, id string, status commonv1.AgentStatus) *registryv1.HeartbeatResponse {
	t.Helper()
	res, err := c.Heartbeat(t.Context(), &registryv1.HeartbeatRequest{InstanceId: id, Status: status})
	require.NoError(t, err, "%s → %v", id, status)
	return res
}

func TestRegisterAgent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		res, err := c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{
			InstanceId: "agent-1", ExecutionId: "exec-1", WaveNumber: 2, Host: "build-7 pid 4242",
		})
		require.NoError(t, err)
		a := res.GetAgent()
		require.Equal(t, "agent-1", a.GetInstanceId())
		require.Equal(t, "exec-1", a.GetExecutionId())
		require.Equal(t, "build-agent", a.GetAgentType())
		require.Equal(t, int32(2), a.GetWaveNumber())
		require.Equal(t, initializing, a.GetStatus())
		require.Equal(t, "build-7 pid 4242", a.GetHost())
		require.NotNil(t, a.GetSpawnTime())
		require.Nil(t, a.GetLastHeartbeatTime())
		cfg := a.GetConfig()
		require.Equal(t, int32(3), cfg.GetMaxRetries())
		require.Equal(t, 30*time.Second, cfg.GetHeartbeatInterval().AsDuration())
		require.Equal(t, 300*time.Second, cfg.GetTaskTimeout().AsDuration())
		require.Equal(t, 120*time.Second, cfg.GetValidationTimeout().AsDuration())

		zero := int32(0)
		res, err = c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{
			InstanceId: "agent-2", AgentType: "verifier-agent",
			Config: &commonv1.AgentConfig{MaxRetries: &zero, HeartbeatInterval: durationpb.New(5 * time.Second)},
		})
		require.NoError(t, err)
		require.Equal(t, int32(0), res.GetAgent().GetConfig().GetMaxRetries(), "0 is no retry, not the default")
		require.Equal(t, 5*time.Second, res.GetAgent().GetConfig().GetHeartbeatInterval().AsDuration())
		require.Empty(t, res.GetAgent().GetExecutionId(), "a pool agent")

		again, err := c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: "agent-1", ExecutionId: "exec-1"})
		require.NoError(t, err)
		require.Equal(t, a.GetSpawnTime().AsTime(), again.GetAgent().GetSpawnTime().AsTime(), "the existing record")
		_, err = c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: "agent-1", ExecutionId: "exec-2"})
		requireCode(t, codes.AlreadyExists, err)
		require.ErrorContains(t, err, `execution "exec-1"`)

		got, err := c.GetAgent(ctx, &registryv1.GetAgentRequest{InstanceId: "agent-1"})
		require.NoError(t, err)
		require.Equal(t, "exec-1", got.GetAgent().GetExecutionId())
		_, err = c.GetAgent(ctx, &registryv1.GetAgentRequest{InstanceId: "nobody"})
		requireCode(t, codes.NotFound, err)
	})
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "nobody", Status: running})
		requireCode(t, codes.NotFound, err)

		register(t, c, "agent-1", "exec-1")
		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: idle})
		requireCode(t, codes.FailedPrecondition, err)
		require.ErrorContains(t, err, "cannot go from initializing to idle")

		res, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{
			InstanceId: "agent-1", Status: running, CurrentTaskId: "1.2", ProgressPercent: 40, MemoryUsageMb: 512, CpuPercent: 87.5,
		})
		require.NoError(t, err)
		a := res.GetAgent()
		require.Equal(t, running, a.GetStatus())
		require.Equal(t, "1.2", a.GetCurrentTaskId())
		require.Equal(t, int32(40), a.GetProgressPercent())
		require.Equal(t, int32(512), a.GetMemoryUsageMb())
		require.InDelta(t, 87.5, a.GetCpuPercent(), 1e-9)
		require.NotNil(t, a.GetLastHeartbeatTime())
		require.Equal(t, 30*time.Second, res.GetNextHeartbeat().AsDuration(), "the agent's heartbeat interval")

		heartbeat(t, c, "agent-1", stuck)
		heartbeat(t, c, "agent-1", running)
		res, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{
			InstanceId: "agent-1", Status: failed,
			ErrorContext: &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "3 tests failed", TaskId: "1.2"},
		})
		require.NoError(t, err)
		require.Equal(t, failed, res.GetAgent().GetStatus())
		require.NotNil(t, res.GetAgent().GetCompleteTime())
		require.Equal(t, "VALIDATION_FAILED", res.GetAgent().GetErrorContext().GetCode())

		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: failed})
		requireCode(t, codes.FailedPrecondition, err)
		require.ErrorContains(t, err, "already failed")
	})
}

func TestListAgents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		for _, a := range []struct{ id, exec string }{{"a1", "exec-1"}, {"a2", "exec-1"}, {"a3", "exec-2"}, {"a4", "exec-1"}, {"a5", ""}} {
			register(t, c, a.id, a.exec)
		}
		heartbeat(t, c, "a2", running)
		heartbeat(t, c, "a4", running)
		heartbeat(t, c, "a4", idle)

		ids := func(req *registryv1.ListAgentsRequest) []string {
			var out []string
			for {
				res, err := c.ListAgents(ctx, req)
				require.NoError(t, err)
				for _, a := range res.GetAgents() {
					out = append(out, a.GetInstanceId())
				}
				if res.GetNextPageToken() == "" {
					return out
				}
				req.PageToken = res.GetNextPageToken()
			}
		}
		all := ids(&registryv1.ListAgentsRequest{PageSize: 2})
		require.Len(t, all, 5)
		sorted := slices.Clone(all)
		slices.Sort(sorted)
		require.Equal(t, []string{"a1", "a2", "a3", "a4", "a5"}, sorted)
		require.ElementsMatch(t, []string{"a1", "a2", "a4"}, ids(&registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 1}))
		require.ElementsMatch(t, []string{"a2", "a4"}, ids(&registryv1.ListAgentsRequest{Statuses: []commonv1.AgentStatus{running, idle}}))
		require.ElementsMatch(t, []string{"a4"}, ids(&registryv1.ListAgentsRequest{ExecutionId: "exec-1", Statuses: []commonv1.AgentStatus{idle, idle}}))
	})
}

// A heartbeat that stops shows the agent in ListStaleAgents once the threshold has passed,
// whatever it last reported (an agent that registered and never beat included); one that goes
// on does not; nor does an agent that finished.
func TestListStaleAgents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot).client
		ctx := t.Context()
		for _, id := range []string{"stops", "goes-on", "idles", "other-exec"} {
			exec := "exec-1"
			if id == "other-exec" {
				exec = "exec-2"
			}
			register(t, c, id, exec)
			heartbeat(t, c, id, running)
		}
		register(t, c, "never-beats", "exec-1")
		stopped := heartbeat(t, c, "stops", running).GetAgent().GetLastHeartbeatTime().AsTime()
		heartbeat(t, c, "idles", idle)

		// The threshold is 1 s, the smallest the contract allows: let a little more pass.
		time.Sleep(1200 * time.Millisecond) //nolint:forbidigo // the smallest threshold the contract allows is 1 s of store time
		heartbeat(t, c, "goes-on", running)
		heartbeat(t, c, "idles", idle)

		staleIDs := func(c registryv1.RegistryServiceClient, req *registryv1.ListStaleAgentsRequest) []string {
			res, err := c.ListStaleAgents(ctx, req)
			require.NoError(t, err)
			var out []string
			for _, sa := range res.GetAgents() {
				out = append(out, sa.GetAgent().GetInstanceId())
				require.GreaterOrEqual(t, sa.GetSecondsSinceHeartbeat(), int64(1))
				require.Contains(t, []commonv1.AgentStatus{running, initializing}, sa.GetAgent().GetStatus(), "silent for less than the stale window")
			}
			return out
		}
		oneSecond := durationpb.New(time.Second)
		require.ElementsMatch(t, []string{"stops", "other-exec", "never-beats"}, staleIDs(c, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond}))
		require.Equal(t, []string{"never-beats", "stops"}, staleIDs(c, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond, ExecutionId: "exec-1"}), "oldest first")
		require.Len(t, staleIDs(c, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond, Limit: 1}), 1)
		require.Empty(t, staleIDs(c, &registryv1.ListStaleAgentsRequest{}), "the default threshold is 60 s")

		res, err := c.ListStaleAgents(ctx, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond, ExecutionId: "exec-1"})
		require.NoError(t, err)
		require.Equal(t, stopped, res.GetAgents()[1].GetAgent().GetLastHeartbeatTime().AsTime())

		// The hot state is lost (Redis flushed, dev restarted): the index is rebuilt from the
		// durable store and the stopped agent is still found.
		after := serve(t, e, e.lose(t)).client
		require.ElementsMatch(t, []string{"stops", "other-exec", "never-beats"}, staleIDs(after, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond}))

		// It beats again: no longer stale. It completes (or fails): never stale again.
		heartbeat(t, after, "stops", running)
		require.ElementsMatch(t, []string{"other-exec", "never-beats"}, staleIDs(after, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond}))
		heartbeat(t, after, "other-exec", completed)
		heartbeat(t, after, "never-beats", failed)
		require.Empty(t, staleIDs(after, &registryv1.ListStaleAgentsRequest{OlderThan: oneSecond}))
	})
}

// The service deletes samples older than the retention by itself, on its clock.
func TestHeartbeatRetention(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot).client
		register(t, c, "agent-1", "exec-1")
		heartbeat(t, c, "agent-1", running)
		heartbeat(t, c, "agent-1", idle)
		samples, err := e.store.Heartbeats(t.Context(), "agent-1", 10)
		require.NoError(t, err)
		require.Len(t, samples, 2)
		newest := samples[0].CreatedAt

		// A service whose clock says the samples are not yet 24 hours old keeps them.
		type pass struct {
			deleted int64
			err     error
		}
		// hook reports the retention passes of one server on a channel of its own, never
		// blocking the loop.
		hook := func() (registry.Option, chan pass) {
			ch := make(chan pass, 16)
			return registry.WithCleanupHook(func(n int64, err error) {
				select {
				case ch <- pass{n, err}:
				default:
				}
			}), ch
		}
		keep, kept := hook()
		serve(t, e, e.hot, keep, registry.WithClock(func() time.Time { return newest.Add(23 * time.Hour) }))
		require.Equal(t, pass{}, <-kept)
		samples, err = e.store.Heartbeats(t.Context(), "agent-1", 10)
		require.NoError(t, err)
		require.Len(t, samples, 2)

		// One whose clock is past 24 hours deletes them, in its first pass.
		drop, dropped := hook()
		serve(t, e, e.hot, drop, registry.WithClock(func() time.Time { return newest.Add(24*time.Hour + time.Millisecond) }))
		require.Equal(t, pass{deleted: 2}, <-dropped)
		samples, err = e.store.Heartbeats(t.Context(), "agent-1", 10)
		require.NoError(t, err)
		require.Empty(t, samples)
		_, err = e.store.GetAgent(t.Context(), "agent-1", store.AgentWindows{})
		require.NoError(t, err, "the agent stays")

		// The loop goes on every interval.
		again, passes := hook()
		serve(t, e, e.hot, again, registry.WithCleanupInterval(time.Millisecond))
		require.NoError(t, (<-passes).err)
		require.NoError(t, (<-passes).err)
	})
}

// The sampling rule: one sample per period per agent, and one on every change of status or task.
func TestHeartbeatSampling(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot, registry.WithHeartbeatSampling(time.Hour)).client
		register(t, c, "agent-1", "exec-1")
		for range 5 {
			heartbeat(t, c, "agent-1", running)
		}
		_, err := c.Heartbeat(t.Context(), &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, CurrentTaskId: "2.1"})
		require.NoError(t, err)
		heartbeat(t, c, "agent-1", idle)
		samples, err := e.store.Heartbeats(t.Context(), "agent-1", 100)
		require.NoError(t, err)
		var got []store.AgentStatus
		for _, s := range samples {
			got = append(got, s.Status)
		}
		require.Equal(t, []store.AgentStatus{store.AgentIdle, store.AgentRunning, store.AgentRunning}, got)
	})
}
