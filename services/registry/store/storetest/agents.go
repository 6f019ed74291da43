package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/registry/store"
)

var allStatuses = []store.AgentStatus{
	store.AgentInitializing, store.AgentRunning, store.AgentIdle,
	store.AgentCompleted, store.AgentFailed, store.AgentStuck,
}

// pathTo is a legal sequence of reports that brings a new agent to each status.
var pathTo = map[store.AgentStatus][]store.AgentStatus{
	store.AgentInitializing: nil,
	store.AgentRunning:      {store.AgentRunning},
	store.AgentIdle:         {store.AgentRunning, store.AgentIdle},
	store.AgentCompleted:    {store.AgentRunning, store.AgentCompleted},
	store.AgentFailed:       {store.AgentFailed},
	store.AgentStuck:        {store.AgentRunning, store.AgentStuck},
}

// register registers a new agent with defaults and fails the test if it cannot.
func register(t *testing.T, s store.Store, id, execution string) store.Agent {
	t.Helper()
	a, created, err := s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: id, ExecutionID: execution, Config: store.AgentConfig{MaxRetries: store.DefaultMaxRetries}})
	require.NoError(t, err)
	require.True(t, created)
	return a
}

// beat reports status for id and fails the test if the store refuses it.
func beat(t *testing.T, s store.Store, id string, status store.AgentStatus) store.Agent {
	t.Helper()
	a, _, err := s.Heartbeat(t.Context(), store.Beat{InstanceID: id, Status: status, SampleEvery: time.Hour})
	require.NoError(t, err, "%s → %s", id, status)
	return a
}

// setLastHeartbeat moves id's last heartbeat to ago before the store's clock, as if it had
// stopped then: staleness tests need an old heartbeat without waiting for one.
func setLastHeartbeat(t *testing.T, s store.Store, id string, ago time.Duration) {
	t.Helper()
	sq := harness.RequireSQL(t, s)
	now, err := s.Now(t.Context())
	require.NoError(t, err)
	var at any = now.Add(-ago)
	if sq.Dialect() == database.DialectSQLite {
		at = database.FormatSQLiteTime(now.Add(-ago))
	}
	harness.Exec(t, sq, `UPDATE build_agent_instances SET last_heartbeat = ? WHERE instance_id = ?`, at, id)
}

// runAgents checks agent registration, heartbeats, listing and staleness.
func runAgents(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RegisterAgentFillsDefaults", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		a, created, err := s.RegisterAgent(t.Context(), store.NewAgent{
			InstanceID: "agent-1", ExecutionID: "exec-1", WaveNumber: 2, Host: "host-1 pid 42",
			Config: store.AgentConfig{MaxRetries: 0, TaskTimeout: 10 * time.Minute},
		})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, "agent-1", a.InstanceID)
		require.Equal(t, "exec-1", a.ExecutionID)
		require.Equal(t, store.DefaultAgentType, a.AgentType)
		require.Equal(t, int32(2), a.WaveNumber)
		require.Equal(t, store.AgentInitializing, a.Status)
		require.Equal(t, "host-1 pid 42", a.Host)
		require.Equal(t, store.AgentConfig{
			MaxRetries:        0, // explicitly no retry
			HeartbeatInterval: store.DefaultHeartbeatInterval,
			TaskTimeout:       10 * time.Minute,
			ValidationTimeout: store.DefaultValidationTimeout,
		}, a.Config)
		require.False(t, a.SpawnedAt.IsZero())
		require.True(t, a.LastHeartbeat.IsZero(), "no heartbeat yet")
		require.True(t, a.CompletedAt.IsZero())
		require.Nil(t, a.ErrorContext)

		got, err := s.GetAgent(t.Context(), "agent-1")
		require.NoError(t, err)
		require.Equal(t, a, got)
	})
	t.Run("RegisterAgentAgain", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := register(t, s, "agent-1", "exec-1")
		again, created, err := s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "agent-1", ExecutionID: "exec-1", WaveNumber: 7})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, first, again, "the existing record, unchanged")

		_, _, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "agent-1", ExecutionID: "exec-2"})
		var exists *store.AlreadyExistsError
		require.ErrorAs(t, err, &exists)
		require.Equal(t, "exec-1", exists.ExecutionID)

		register(t, s, "pool-1", "")
		_, _, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "pool-1", ExecutionID: "exec-1"})
		require.ErrorAs(t, err, &exists)
		_, created, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "pool-1"})
		require.NoError(t, err)
		require.False(t, created)
	})
	t.Run("GetAgentUnknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.GetAgent(t.Context(), "nobody")
		require.True(t, isNotFound(err), "%v", err)
		_, _, err = s.Heartbeat(t.Context(), store.Beat{InstanceID: "nobody", Status: store.AgentRunning})
		require.True(t, isNotFound(err), "%v", err)
	})
	t.Run("HeartbeatFollowsTheStateMachine", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, from := range allStatuses {
			for _, to := range allStatuses {
				id := fmt.Sprintf("%s-to-%s", from, to)
				register(t, s, id, "exec-1")
				for _, step := range pathTo[from] {
					beat(t, s, id, step)
				}
				before, err := s.GetAgent(t.Context(), id)
				require.NoError(t, err)
				require.Equal(t, from, before.Status)

				after, _, err := s.Heartbeat(t.Context(), store.Beat{InstanceID: id, Status: to, SampleEvery: time.Hour})
				if store.CanTransition(from, to) {
					require.NoError(t, err, "%s → %s", from, to)
					require.Equal(t, to, after.Status)
					continue
				}
				var te *store.TransitionError
				require.ErrorAs(t, err, &te, "%s → %s must be refused", from, to)
				require.Equal(t, store.TransitionError{InstanceID: id, From: from, To: to}, *te)
				unchanged, err := s.GetAgent(t.Context(), id)
				require.NoError(t, err)
				require.Equal(t, before, unchanged, "a refused heartbeat changes nothing")
			}
		}
	})
	t.Run("HeartbeatRecordsTheReport", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		register(t, s, "agent-1", "exec-1")
		a, _, err := s.Heartbeat(t.Context(), store.Beat{
			InstanceID: "agent-1", Status: store.AgentRunning, CurrentTaskID: "1.2",
			ProgressPercent: 40, MemoryUsageMB: 512, CPUPercent: 150.5, SampleEvery: time.Hour,
		})
		require.NoError(t, err)
		require.Equal(t, store.AgentRunning, a.Status)
		require.Equal(t, "1.2", a.CurrentTaskID)
		require.Equal(t, int32(40), a.ProgressPercent)
		require.Equal(t, int32(512), a.MemoryUsageMB)
		require.InDelta(t, 150.5, a.CPUPercent, 1e-9)
		require.False(t, a.LastHeartbeat.IsZero())
		require.True(t, a.CompletedAt.IsZero())

		stamp := time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)
		ec := &store.ErrorContext{Code: "VALIDATION_FAILED", Message: "tests failed", TaskID: "1.2", StackTrace: "...", Timestamp: stamp}
		failed, _, err := s.Heartbeat(t.Context(), store.Beat{InstanceID: "agent-1", Status: store.AgentFailed, ErrorContext: ec, SampleEvery: time.Hour})
		require.NoError(t, err)
		require.Equal(t, store.AgentFailed, failed.Status)
		require.Empty(t, failed.CurrentTaskID)
		require.Equal(t, ec, failed.ErrorContext)
		require.False(t, failed.CompletedAt.IsZero(), "a final status sets the completion time")
		require.False(t, failed.LastHeartbeat.Before(a.LastHeartbeat))

		got, err := s.GetAgent(t.Context(), "agent-1")
		require.NoError(t, err)
		require.Equal(t, failed, got)
	})
	t.Run("HeartbeatSamples", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		register(t, s, "agent-1", "exec-1")
		report := func(status store.AgentStatus, task string, every time.Duration) bool {
			_, sampled, err := s.Heartbeat(t.Context(), store.Beat{InstanceID: "agent-1", Status: status, CurrentTaskID: task, ProgressPercent: 10, SampleEvery: every})
			require.NoError(t, err)
			return sampled
		}
		require.True(t, report(store.AgentRunning, "1.1", time.Hour), "the first heartbeat is sampled")
		require.False(t, report(store.AgentRunning, "1.1", time.Hour), "same report within the period")
		require.True(t, report(store.AgentRunning, "1.2", time.Hour), "a new task is sampled")
		require.True(t, report(store.AgentIdle, "", time.Hour), "a new status is sampled")
		require.False(t, report(store.AgentIdle, "", time.Hour))
		require.True(t, report(store.AgentIdle, "", 0), "a period of 0 samples every heartbeat")

		samples, err := s.Heartbeats(t.Context(), "agent-1", 10)
		require.NoError(t, err)
		require.Len(t, samples, 4)
		var got []string
		for _, h := range samples {
			got = append(got, string(h.Status)+"/"+h.CurrentTaskID)
			require.Equal(t, "agent-1", h.InstanceID)
			require.Equal(t, int32(10), h.ProgressPercent)
		}
		require.Equal(t, []string{"idle/", "idle/", "running/1.2", "running/1.1"}, got, "newest first")
		require.True(t, slices.IsSortedFunc(samples, func(a, b store.HeartbeatSample) int { return b.CreatedAt.Compare(a.CreatedAt) }))
	})
	t.Run("DeleteHeartbeatsBefore", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		register(t, s, "agent-1", "exec-1")
		a := beat(t, s, "agent-1", store.AgentRunning)
		samples, err := s.Heartbeats(t.Context(), "agent-1", 10)
		require.NoError(t, err)
		require.Len(t, samples, 1)
		require.Equal(t, a.LastHeartbeat, samples[0].CreatedAt, "a sample carries the heartbeat's store time")

		n, err := s.DeleteHeartbeatsBefore(t.Context(), samples[0].CreatedAt)
		require.NoError(t, err)
		require.Zero(t, n, "a sample taken at the cutoff is kept")
		n, err = s.DeleteHeartbeatsBefore(t.Context(), samples[0].CreatedAt.Add(time.Millisecond))
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		samples, err = s.Heartbeats(t.Context(), "agent-1", 10)
		require.NoError(t, err)
		require.Empty(t, samples)
	})
	t.Run("ListAgents", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for i := range 7 {
			exec := "exec-a"
			if i%2 == 1 {
				exec = "exec-b"
			}
			register(t, s, fmt.Sprintf("agent-%d", i), exec)
		}
		beat(t, s, "agent-2", store.AgentRunning)
		beat(t, s, "agent-3", store.AgentRunning)
		beat(t, s, "agent-4", store.AgentFailed)

		all := listAll(t, s, store.ListAgentsQuery{}, 3)
		require.Len(t, all, 7)
		require.True(t, slices.IsSortedFunc(all, func(a, b store.Agent) int {
			if c := b.SpawnedAt.Compare(a.SpawnedAt); c != 0 {
				return c
			}
			return -compareStrings(a.InstanceID, b.InstanceID)
		}), "newest first")

		ids := func(agents []store.Agent) []string {
			var out []string
			for _, a := range agents {
				out = append(out, a.InstanceID)
			}
			slices.Sort(out)
			return out
		}
		require.Equal(t, []string{"agent-0", "agent-2", "agent-4", "agent-6"}, ids(listAll(t, s, store.ListAgentsQuery{ExecutionID: "exec-a"}, 2)))
		require.Equal(t, []string{"agent-2", "agent-3", "agent-4"}, ids(listAll(t, s, store.ListAgentsQuery{Statuses: []store.AgentStatus{store.AgentRunning, store.AgentFailed}}, 2)))
		require.Equal(t, []string{"agent-2", "agent-4"}, ids(listAll(t, s, store.ListAgentsQuery{ExecutionID: "exec-a", Statuses: []store.AgentStatus{store.AgentRunning, store.AgentFailed}}, 1)))
		require.Empty(t, listAll(t, s, store.ListAgentsQuery{ExecutionID: "exec-z"}, 2))
	})
	t.Run("StaleAgentsIsTheSeedQuery", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, id := range []string{"old-running", "older-running", "fresh-running", "old-idle", "never-beat", "old-other-exec"} {
			exec := "exec-1"
			if id == "old-other-exec" {
				exec = "exec-2"
			}
			register(t, s, id, exec)
		}
		for _, id := range []string{"old-running", "older-running", "fresh-running", "old-other-exec"} {
			beat(t, s, id, store.AgentRunning)
		}
		beat(t, s, "old-idle", store.AgentRunning)
		beat(t, s, "old-idle", store.AgentIdle)
		setLastHeartbeat(t, s, "old-running", 2*time.Minute)
		setLastHeartbeat(t, s, "older-running", 10*time.Minute)
		setLastHeartbeat(t, s, "old-idle", 10*time.Minute)
		setLastHeartbeat(t, s, "old-other-exec", 10*time.Minute)

		everyone := []string{"old-running", "older-running", "fresh-running", "old-idle", "never-beat", "old-other-exec", "unknown"}
		stale, err := s.StaleAgents(t.Context(), store.StaleQuery{InstanceIDs: everyone, OlderThan: time.Minute})
		require.NoError(t, err)
		var got []string
		for _, sa := range stale {
			got = append(got, sa.Agent.InstanceID)
			require.Equal(t, store.AgentRunning, sa.Agent.Status)
		}
		require.ElementsMatch(t, []string{"older-running", "old-other-exec", "old-running"}, got)
		require.Equal(t, "old-running", got[2], "oldest heartbeat first")
		for _, sa := range stale {
			least := int64(600)
			if sa.Agent.InstanceID == "old-running" {
				least = 120
			}
			require.GreaterOrEqual(t, sa.SecondsSinceHeartbeat, least, sa.Agent.InstanceID)
		}

		stale, err = s.StaleAgents(t.Context(), store.StaleQuery{InstanceIDs: everyone, OlderThan: 5 * time.Minute, ExecutionID: "exec-1"})
		require.NoError(t, err)
		require.Len(t, stale, 1)
		require.Equal(t, "older-running", stale[0].Agent.InstanceID)

		stale, err = s.StaleAgents(t.Context(), store.StaleQuery{InstanceIDs: []string{"fresh-running"}, OlderThan: time.Minute})
		require.NoError(t, err)
		require.Empty(t, stale, "only the candidates named are considered")
		stale, err = s.StaleAgents(t.Context(), store.StaleQuery{OlderThan: time.Minute})
		require.NoError(t, err)
		require.Empty(t, stale, "no candidates, no answer")
	})
	t.Run("LiveAgents", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		registered := map[string]store.Agent{}
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			registered[id] = register(t, s, id, "exec-1")
		}
		running := beat(t, s, "b", store.AgentRunning)
		beat(t, s, "c", store.AgentFailed)
		beat(t, s, "d", store.AgentRunning)
		beat(t, s, "d", store.AgentCompleted)

		var got []store.LiveAgent
		after := ""
		for {
			page, err := s.LiveAgents(t.Context(), after, 2)
			require.NoError(t, err)
			got = append(got, page...)
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].InstanceID
		}
		require.Equal(t, []store.LiveAgent{
			{InstanceID: "a", LastSeen: registered["a"].SpawnedAt},
			{InstanceID: "b", LastSeen: running.LastHeartbeat},
			{InstanceID: "e", LastSeen: registered["e"].SpawnedAt},
		}, got)
	})
}

// listAll pages through ListAgents with pages of size.
func listAll(t *testing.T, s store.Store, q store.ListAgentsQuery, size int) []store.Agent {
	t.Helper()
	q.Limit = size
	var out []store.Agent
	for {
		page, err := s.ListAgents(t.Context(), q)
		require.NoError(t, err)
		out = append(out, page...)
		if len(page) < size {
			return out
		}
		last := page[len(page)-1]
		q.After = &store.AgentCursor{SpawnedAt: last.SpawnedAt, InstanceID: last.InstanceID}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
