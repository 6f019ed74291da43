package registry_test

// Issue 12, defects 2 and 4 on the Registry's side: stale agents are found whatever their
// status, silent agents turn STALE then GONE, and a restarted agent process (a new session of
// the same instance) gets its predecessor's locks released at once.

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/registry"
)

const (
	staleStatus = commonv1.AgentStatus_AGENT_STATUS_STALE
	goneStatus  = commonv1.AgentStatus_AGENT_STATUS_GONE
)

// silence moves an agent's last sign of life (its last heartbeat, or its registration before
// the first) to ago before the store's clock, as if it had fallen silent then: the store's time
// comes from the store, so a test moves the rows instead of waiting.
func silence(t *testing.T, e *env, id string, ago time.Duration) {
	t.Helper()
	sq := harness.RequireSQL(t, e.store)
	now, err := e.store.Now(t.Context())
	require.NoError(t, err)
	var at any = now.Add(-ago)
	if sq.Dialect() == database.DialectSQLite {
		at = database.FormatSQLiteTime(now.Add(-ago))
	}
	harness.Exec(t, sq, `UPDATE build_agent_instances SET last_heartbeat = ? WHERE instance_id = ? AND last_heartbeat IS NOT NULL`, at, id)
	harness.Exec(t, sq, `UPDATE build_agent_instances SET spawned_at = ? WHERE instance_id = ? AND last_heartbeat IS NULL`, at, id)
}

// An agent that dies is stale whatever it last reported: initializing (it registered and died
// before its first heartbeat), idle (it had just claimed a task), stuck or running. A finished
// agent never is.
func TestListStaleAgentsWhateverTheStatus(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot).client
		ctx := t.Context()
		paths := map[string][]commonv1.AgentStatus{
			"dead-initializing": nil,
			"dead-running":      {running},
			"dead-idle":         {running, idle},
			"dead-stuck":        {running, stuck},
			"dead-completed":    {running, completed},
			"dead-failed":       {failed},
			"live-idle":         {running, idle},
			"live-initializing": nil,
		}
		for id, steps := range paths {
			register(t, c, id, "exec-1")
			for _, st := range steps {
				heartbeat(t, c, id, st)
			}
			if id[:4] == "dead" {
				silence(t, e, id, 2*time.Minute)
			}
		}
		// The staleness index still holds the times of the calls above; it is rebuilt from the
		// durable store, whose rows now say the dead agents fell silent two minutes ago.
		c = serve(t, e, e.lose(t)).client

		res, err := c.ListStaleAgents(ctx, &registryv1.ListStaleAgentsRequest{OlderThan: durationpb.New(time.Minute)})
		require.NoError(t, err)
		var got []string
		for _, sa := range res.GetAgents() {
			got = append(got, sa.GetAgent().GetInstanceId())
			require.GreaterOrEqual(t, sa.GetSecondsSinceHeartbeat(), int64(120), sa.GetAgent().GetInstanceId())
		}
		require.ElementsMatch(t, []string{"dead-initializing", "dead-running", "dead-idle", "dead-stuck"}, got)
	})
}

// A non-final agent silent past the stale window (default 60 s) is STALE, past the gone window
// (default 10 × stale) GONE, with the status it last reported kept; ListAgents leaves GONE out
// unless asked for it; a heartbeat brings the agent back.
func TestSilentAgentsTurnStaleThenGone(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot).client
		ctx := t.Context()
		for _, id := range []string{"fresh", "stale-idle", "stale-init", "gone-running", "gone-stuck", "done", "old-done"} {
			register(t, c, id, "exec-1")
		}
		heartbeat(t, c, "fresh", running)
		heartbeat(t, c, "stale-idle", running)
		heartbeat(t, c, "stale-idle", idle)
		heartbeat(t, c, "gone-running", running)
		heartbeat(t, c, "gone-stuck", running)
		heartbeat(t, c, "gone-stuck", stuck)
		heartbeat(t, c, "done", running)
		heartbeat(t, c, "done", completed)
		heartbeat(t, c, "old-done", failed)
		silence(t, e, "stale-idle", 90*time.Second)
		silence(t, e, "stale-init", 2*time.Minute)
		silence(t, e, "gone-running", 11*time.Minute)
		silence(t, e, "gone-stuck", time.Hour)
		silence(t, e, "old-done", time.Hour)

		want := map[string][2]commonv1.AgentStatus{ // status, reported status
			"fresh":        {running, 0},
			"stale-idle":   {staleStatus, idle},
			"stale-init":   {staleStatus, initializing},
			"gone-running": {goneStatus, running},
			"gone-stuck":   {goneStatus, stuck},
			"done":         {completed, 0},
			"old-done":     {failed, 0},
		}
		for id, w := range want {
			res, err := c.GetAgent(ctx, &registryv1.GetAgentRequest{InstanceId: id})
			require.NoError(t, err)
			require.Equal(t, w[0].String(), res.GetAgent().GetStatus().String(), id)
			require.Equal(t, w[1].String(), res.GetAgent().GetReportedStatus().String(), id)
		}

		list := func(req *registryv1.ListAgentsRequest) []string {
			var out []string
			for {
				res, err := c.ListAgents(ctx, req)
				require.NoError(t, err)
				for _, a := range res.GetAgents() {
					require.Equal(t, want[a.GetInstanceId()][0].String(), a.GetStatus().String(), a.GetInstanceId())
					require.Equal(t, want[a.GetInstanceId()][1].String(), a.GetReportedStatus().String(), a.GetInstanceId())
					out = append(out, a.GetInstanceId())
				}
				if res.GetNextPageToken() == "" {
					slices.Sort(out)
					return out
				}
				req.PageToken = res.GetNextPageToken()
			}
		}
		require.Equal(t, []string{"done", "fresh", "old-done", "stale-idle", "stale-init"}, list(&registryv1.ListAgentsRequest{PageSize: 2}),
			"GONE is left out without a filter")
		require.Equal(t, []string{"gone-running", "gone-stuck"}, list(&registryv1.ListAgentsRequest{Statuses: []commonv1.AgentStatus{goneStatus}, PageSize: 1}))
		require.Equal(t, []string{"stale-idle", "stale-init"}, list(&registryv1.ListAgentsRequest{Statuses: []commonv1.AgentStatus{staleStatus}, PageSize: 1}))
		require.Equal(t, []string{"fresh", "gone-running", "gone-stuck"}, list(&registryv1.ListAgentsRequest{Statuses: []commonv1.AgentStatus{goneStatus, running}, PageSize: 1}),
			"a filter matches the status as the Registry sees it")
		require.Empty(t, list(&registryv1.ListAgentsRequest{Statuses: []commonv1.AgentStatus{idle, stuck}}),
			"a silent agent is no longer in the status it reported")

		// A heartbeat brings a GONE agent back, in the status it reports.
		back := heartbeat(t, c, "gone-stuck", running).GetAgent()
		require.Equal(t, running.String(), back.GetStatus().String())
		require.Equal(t, commonv1.AgentStatus_AGENT_STATUS_UNSPECIFIED.String(), back.GetReportedStatus().String())
		res, err := c.GetAgent(ctx, &registryv1.GetAgentRequest{InstanceId: "gone-stuck"})
		require.NoError(t, err)
		require.Equal(t, running.String(), res.GetAgent().GetStatus().String())

		// Nobody reports STALE or GONE.
		for _, st := range []commonv1.AgentStatus{staleStatus, goneStatus} {
			_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "fresh", Status: st})
			requireInvalid(t, err, "status")
		}
	})
}

// acquireAs takes resource for holder and answers the lock.
func acquireAs(t *testing.T, c registryv1.RegistryServiceClient, resource, holder string) *registryv1.Lock {
	t.Helper()
	res, err := c.AcquireLock(t.Context(), acquire(resource, holder, time.Minute, 0))
	require.NoError(t, err)
	require.True(t, res.GetGranted(), "%s for %s", resource, holder)
	return res.GetLock()
}

// An agent restarted under the same instance id registers with a new session: the instance
// starts afresh whatever its status, and every lock its previous process held is released at
// once, with fencing: the old process's renewals and releases are refused, and the next grant has
// a higher token. The old process's heartbeats are refused with Aborted.
func TestANewSessionReleasesTheOldSessionsLocks(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		reg := func(id, session string) *registryv1.RegisterAgentResponse {
			t.Helper()
			res, err := c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: id, ExecutionId: "exec-1", SessionId: session})
			require.NoError(t, err)
			return res
		}
		first := reg("agent-1", "boot-1")
		require.Equal(t, "boot-1", first.GetAgent().GetSessionId())
		require.Empty(t, first.GetReplacedSessionId())
		_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, CurrentTaskId: "1.2", SessionId: "boot-1"})
		require.NoError(t, err)
		a := acquireAs(t, c, "src/a.go", "agent-1")
		bl := acquireAs(t, c, "src/b.go", "agent-1")
		other := acquireAs(t, c, "src/c.go", "agent-2")

		// The same session again, or none, is the idempotent answer: nothing is released.
		for _, session := range []string{"boot-1", ""} {
			again := reg("agent-1", session)
			require.Empty(t, again.GetReplacedSessionId())
			require.Empty(t, again.GetReleasedLocks())
			require.Equal(t, running.String(), again.GetAgent().GetStatus().String())
			require.Equal(t, "boot-1", again.GetAgent().GetSessionId())
		}
		got, err := c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "src/a.go"})
		require.NoError(t, err)
		require.Equal(t, a.GetToken(), got.GetLock().GetToken(), "still held")

		// The process restarts: a new session.
		restarted := reg("agent-1", "boot-2")
		require.Equal(t, "boot-1", restarted.GetReplacedSessionId())
		ra := restarted.GetAgent()
		require.Equal(t, initializing.String(), ra.GetStatus().String())
		require.Equal(t, "boot-2", ra.GetSessionId())
		require.Empty(t, ra.GetCurrentTaskId())
		var released []string
		for _, l := range restarted.GetReleasedLocks() {
			released = append(released, l.GetResource())
			require.Equal(t, "agent-1", l.GetHolder())
		}
		require.ElementsMatch(t, []string{"src/a.go", "src/b.go"}, released)
		for _, r := range []string{"src/a.go", "src/b.go"} {
			_, err := c.GetLock(ctx, &registryv1.GetLockRequest{Resource: r})
			requireCode(t, codes.NotFound, err)
		}
		kept, err := c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "src/c.go"})
		require.NoError(t, err)
		require.Equal(t, other.GetToken(), kept.GetLock().GetToken(), "another holder's lock is not touched")

		// The old process wakes up: its heartbeat is refused, so are its renewal and release.
		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, SessionId: "boot-1"})
		requireCode(t, codes.Aborted, err)
		require.ErrorContains(t, err, `session "boot-1"`)
		require.ErrorContains(t, err, `"boot-2"`)
		require.ErrorContains(t, err, "must stop")
		_, err = c.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: "src/b.go", Holder: "agent-1", Token: bl.GetToken(), Ttl: durationpb.New(time.Minute)})
		requireCode(t, codes.FailedPrecondition, err)

		// The next grant of a released resource has a higher token; the old token is stale.
		next := acquireAs(t, c, "src/a.go", "agent-1")
		require.Greater(t, next.GetToken(), a.GetToken())
		_, err = c.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: "src/a.go", Holder: "agent-1", Token: a.GetToken(), Ttl: durationpb.New(time.Minute)})
		requireCode(t, codes.Aborted, err)
		_, err = c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "src/a.go", Holder: "agent-1", Token: a.GetToken()})
		requireCode(t, codes.Aborted, err)

		// The new process goes on.
		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, SessionId: "boot-2"})
		require.NoError(t, err)
		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running})
		require.NoError(t, err, "a heartbeat without a session is not checked")

		// A finished instance restarted starts afresh too.
		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: failed, SessionId: "boot-2",
			ErrorContext: &commonv1.ErrorContext{Code: "E", Message: "crashed"}})
		require.NoError(t, err)
		again := reg("agent-1", "boot-3")
		require.Equal(t, "boot-2", again.GetReplacedSessionId())
		require.Equal(t, initializing.String(), again.GetAgent().GetStatus().String())
		require.Nil(t, again.GetAgent().GetErrorContext(), "the error is cleared")
		require.Nil(t, again.GetAgent().GetCompleteTime())
		require.ElementsMatch(t, []string{"src/a.go"}, resources(again.GetReleasedLocks()))
		_, err = c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, SessionId: "boot-3"})
		require.NoError(t, err, "heartbeats again")

		// Another execution is still refused, session or not.
		_, err = c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: "agent-1", ExecutionId: "exec-2", SessionId: "boot-4"})
		requireCode(t, codes.AlreadyExists, err)
	})
}

func resources(locks []*registryv1.Lock) []string {
	var out []string
	for _, l := range locks {
		out = append(out, l.GetResource())
	}
	return out
}

// WithAgentWindows sets the windows: here 1 minute stale and 3 minutes gone.
func TestAgentWindows(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := b.open(t)
		c := serve(t, e, e.hot, registry.WithAgentWindows(time.Minute, 3*time.Minute)).client
		for _, id := range []string{"quiet-45s", "quiet-2m", "quiet-4m"} {
			register(t, c, id, "exec-1")
			heartbeat(t, c, id, running)
		}
		silence(t, e, "quiet-45s", 45*time.Second)
		silence(t, e, "quiet-2m", 2*time.Minute)
		silence(t, e, "quiet-4m", 4*time.Minute)
		for id, want := range map[string]commonv1.AgentStatus{"quiet-45s": running, "quiet-2m": staleStatus, "quiet-4m": goneStatus} {
			res, err := c.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: id})
			require.NoError(t, err)
			require.Equal(t, want.String(), res.GetAgent().GetStatus().String(), id)
		}

		// Without a gone window, it is 10 stale windows.
		c = serve(t, e, e.hot, registry.WithAgentWindows(10*time.Second, 0)).client
		for id, want := range map[string]commonv1.AgentStatus{"quiet-45s": staleStatus, "quiet-2m": goneStatus} {
			res, err := c.GetAgent(t.Context(), &registryv1.GetAgentRequest{InstanceId: id})
			require.NoError(t, err)
			require.Equal(t, want.String(), res.GetAgent().GetStatus().String(), id)
		}
	})
}
