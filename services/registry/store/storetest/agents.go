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

// windows are the Registry's default windows of silence.
var windows = store.AgentWindows{Stale: 30 * time.Second, Gone: 5 * time.Minute}

// register registers a new agent with defaults and fails the test if it cannot.
func register(t *testing.T, s store.Store, id, execution string) store.Agent {
	t.Helper()
	reg, err := s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: id, ExecutionID: execution, Config: store.AgentConfig{MaxRetries: store.DefaultMaxRetries}})
	require.NoError(t, err)
	require.True(t, reg.Created)
	return reg.Agent
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

// setSpawnedAt moves id's registration to ago before the store's clock, as if it had registered
// then.
func setSpawnedAt(t *testing.T, s store.Store, id string, ago time.Duration) {
	t.Helper()
	sq := harness.RequireSQL(t, s)
	now, err := s.Now(t.Context())
	require.NoError(t, err)
	var at any = now.Add(-ago)
	if sq.Dialect() == database.DialectSQLite {
		at = database.FormatSQLiteTime(now.Add(-ago))
	}
	harness.Exec(t, sq, `UPDATE build_agent_instances SET spawned_at = ? WHERE instance_id = ?`, at, id)
}

// runAgents checks agent registration, heartbeats, listing and staleness.
func runAgents(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RegisterAgentFillsDefaults", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		reg, err := s.RegisterAgent(t.Context(), store.NewAgent{
			InstanceID: "agent-1", ExecutionID: "exec-1", WaveNumber: 2, Host: "host-1 pid 42",
			Config: store.AgentConfig{MaxRetries: 0, TaskTimeout: 10 * time.Minute}, SessionID: "boot-1",
		})
		require.NoError(t, err)
		require.Equal(t, store.Registration{Agent: reg.Agent, Created: true}, reg)
		a := reg.Agent
		require.Equal(t, "agent-1", a.InstanceID)
		require.Equal(t, "exec-1", a.ExecutionID)
		require.Equal(t, store.DefaultAgentType, a.AgentType)
		require.Equal(t, int32(2), a.WaveNumber)
		require.Equal(t, store.AgentInitializing, a.Status)
		require.Equal(t, store.AgentInitializing, a.ReportedStatus)
		require.Equal(t, "boot-1", a.SessionID)
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

		got, err := s.GetAgent(t.Context(), "agent-1", windows)
		require.NoError(t, err)
		require.Equal(t, a, got)
	})
	t.Run("RegisterAgentAgain", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		first := register(t, s, "agent-1", "exec-1")
		again, err := s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "agent-1", ExecutionID: "exec-1", WaveNumber: 7})
		require.NoError(t, err)
		require.Equal(t, store.Registration{Agent: first}, again, "the existing record, unchanged")

		_, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "agent-1", ExecutionID: "exec-2"})
		var exists *store.AlreadyExistsError
		require.ErrorAs(t, err, &exists)
		require.Equal(t, "exec-1", exists.ExecutionID)

		register(t, s, "pool-1", "")
		_, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "pool-1", ExecutionID: "exec-1"})
		require.ErrorAs(t, err, &exists)
		_, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "pool-1", ExecutionID: "exec-1", SessionID: "boot-2"})
		require.ErrorAs(t, err, &exists, "a new session does not move an agent to another execution")
		reg, err := s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "pool-1"})
		require.NoError(t, err)
		require.False(t, reg.Created)
	})
	t.Run("ThePrincipalOfTheFirstRegistrationIsKept", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		reg, err := s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "owned", SessionID: "s1", Principal: "pool-a"})
		require.NoError(t, err)
		require.Equal(t, "pool-a", reg.Agent.Principal)
		// A new session registered by someone else (an operator) keeps the owner.
		reg, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "owned", SessionID: "s2", Principal: "ops"})
		require.NoError(t, err)
		require.True(t, reg.Replaced)
		require.Equal(t, "pool-a", reg.Agent.Principal)
		got, err := s.GetAgent(t.Context(), "owned", windows)
		require.NoError(t, err)
		require.Equal(t, "pool-a", got.Principal)
		// An instance registered with no principal takes the first one that comes.
		_, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "open", SessionID: "s1"})
		require.NoError(t, err)
		reg, err = s.RegisterAgent(t.Context(), store.NewAgent{InstanceID: "open", SessionID: "s2", Principal: "pool-b"})
		require.NoError(t, err)
		require.Equal(t, "pool-b", reg.Agent.Principal)
	})

	t.Run("GetAgentUnknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		_, err := s.GetAgent(t.Context(), "nobody", windows)
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
				before, err := s.GetAgent(t.Context(), id, windows)
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
				unchanged, err := s.GetAgent(t.Context(), id, windows)
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

		got, err := s.GetAgent(t.Context(), "agent-1", windows)
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
	t.Run("StaleAgentsWhateverTheStatus", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ids := []string{"old-running", "older-running", "fresh-running", "old-idle", "old-stuck", "never-beat",
			"old-never-beat", "old-completed", "old-failed", "old-other-exec"}
		for _, id := range ids {
			exec := "exec-1"
			if id == "old-other-exec" {
				exec = "exec-2"
			}
			register(t, s, id, exec)
		}
		for _, id := range []string{"old-running", "older-running", "fresh-running", "old-other-exec"} {
			beat(t, s, id, store.AgentRunning)
		}
		for id, steps := range map[string][]store.AgentStatus{
			"old-idle":      {store.AgentRunning, store.AgentIdle},
			"old-stuck":     {store.AgentRunning, store.AgentStuck},
			"old-completed": {store.AgentRunning, store.AgentCompleted},
			"old-failed":    {store.AgentFailed},
		} {
			for _, st := range steps {
				beat(t, s, id, st)
			}
		}
		setLastHeartbeat(t, s, "old-running", 2*time.Minute)
		for _, id := range []string{"older-running", "old-idle", "old-stuck", "old-completed", "old-failed", "old-other-exec"} {
			setLastHeartbeat(t, s, id, 10*time.Minute)
		}
		setSpawnedAt(t, s, "old-never-beat", 10*time.Minute)

		everyone := append(slices.Clone(ids), "unknown")
		stale, err := s.StaleAgents(t.Context(), store.StaleQuery{InstanceIDs: everyone, OlderThan: time.Minute})
		require.NoError(t, err)
		var got []string
		for _, sa := range stale {
			got = append(got, sa.Agent.InstanceID)
			require.False(t, sa.Agent.ReportedStatus.Final())
			require.Equal(t, sa.Agent.ReportedStatus, sa.Agent.Status, "no windows: nothing derived")
		}
		require.ElementsMatch(t, []string{"older-running", "old-idle", "old-stuck", "old-never-beat", "old-other-exec", "old-running"}, got,
			"every unfinished agent silent for long enough, whatever it reported; registering counts as a sign of life")
		require.Equal(t, "old-running", got[len(got)-1], "oldest first")
		for _, sa := range stale {
			least := int64(600)
			if sa.Agent.InstanceID == "old-running" {
				least = 120
			}
			require.GreaterOrEqual(t, sa.SecondsSinceHeartbeat, least, sa.Agent.InstanceID)
		}

		stale, err = s.StaleAgents(t.Context(), store.StaleQuery{InstanceIDs: everyone, OlderThan: 5 * time.Minute, ExecutionID: "exec-2", Windows: windows})
		require.NoError(t, err)
		require.Len(t, stale, 1)
		require.Equal(t, "old-other-exec", stale[0].Agent.InstanceID)
		require.Equal(t, store.AgentGone, stale[0].Agent.Status, "derived with the windows given")
		require.Equal(t, store.AgentRunning, stale[0].Agent.ReportedStatus)

		stale, err = s.StaleAgents(t.Context(), store.StaleQuery{InstanceIDs: []string{"fresh-running", "never-beat"}, OlderThan: time.Minute})
		require.NoError(t, err)
		require.Empty(t, stale, "only the candidates named are considered")
		stale, err = s.StaleAgents(t.Context(), store.StaleQuery{OlderThan: time.Minute})
		require.NoError(t, err)
		require.Empty(t, stale, "no candidates, no answer")
	})
	t.Run("SilentAgentsAreStaleThenGone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, id := range []string{"fresh", "stale-idle", "stale-init", "gone-running", "done"} {
			register(t, s, id, "exec-1")
		}
		beat(t, s, "fresh", store.AgentRunning)
		beat(t, s, "stale-idle", store.AgentRunning)
		beat(t, s, "stale-idle", store.AgentIdle)
		beat(t, s, "gone-running", store.AgentRunning)
		beat(t, s, "done", store.AgentFailed)
		setLastHeartbeat(t, s, "stale-idle", time.Minute)
		setSpawnedAt(t, s, "stale-init", 2*time.Minute)
		setLastHeartbeat(t, s, "gone-running", 6*time.Minute)
		setLastHeartbeat(t, s, "done", time.Hour)

		want := map[string][2]store.AgentStatus{ // as seen, as reported
			"fresh":        {store.AgentRunning, store.AgentRunning},
			"stale-idle":   {store.AgentStale, store.AgentIdle},
			"stale-init":   {store.AgentStale, store.AgentInitializing},
			"gone-running": {store.AgentGone, store.AgentRunning},
			"done":         {store.AgentFailed, store.AgentFailed},
		}
		for id, w := range want {
			a, err := s.GetAgent(t.Context(), id, windows)
			require.NoError(t, err)
			require.Equal(t, w, [2]store.AgentStatus{a.Status, a.ReportedStatus}, id)
			raw, err := s.GetAgent(t.Context(), id, store.AgentWindows{})
			require.NoError(t, err)
			require.Equal(t, w[1], raw.Status, "%s without windows: as reported", id)
		}
		list := func(statuses ...store.AgentStatus) []string {
			var out []string
			for _, a := range listAll(t, s, store.ListAgentsQuery{Statuses: statuses, Windows: windows}, 1) {
				require.Equal(t, want[a.InstanceID], [2]store.AgentStatus{a.Status, a.ReportedStatus}, a.InstanceID)
				out = append(out, a.InstanceID)
			}
			slices.Sort(out)
			return out
		}
		require.Equal(t, []string{"done", "fresh", "gone-running", "stale-idle", "stale-init"}, list())
		require.Equal(t, []string{"stale-idle", "stale-init"}, list(store.AgentStale))
		require.Equal(t, []string{"fresh", "gone-running"}, list(store.AgentGone, store.AgentRunning))
		require.Empty(t, list(store.AgentIdle, store.AgentInitializing), "matched as derived, not as reported")

		back := beat(t, s, "gone-running", store.AgentIdle)
		require.Equal(t, store.AgentIdle, back.Status, "a heartbeat brings it back")
		a, err := s.GetAgent(t.Context(), "gone-running", windows)
		require.NoError(t, err)
		require.Equal(t, store.AgentIdle, a.Status)

		for _, st := range []store.AgentStatus{store.AgentStale, store.AgentGone} {
			_, _, err := s.Heartbeat(t.Context(), store.Beat{InstanceID: "fresh", Status: st})
			var te *store.TransitionError
			require.ErrorAs(t, err, &te, "%s is never reported", st)
		}
	})
	t.Run("ANewSessionStartsTheInstanceAfresh", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		ctx := t.Context()
		registerAs := func(session string, wave int32) store.Registration {
			t.Helper()
			reg, err := s.RegisterAgent(ctx, store.NewAgent{InstanceID: "agent-1", ExecutionID: "exec-1", WaveNumber: wave, SessionID: session, Host: "pid " + session})
			require.NoError(t, err)
			return reg
		}
		first := registerAs("boot-1", 1)
		require.True(t, first.Created)
		stamp := time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)
		_, _, err := s.Heartbeat(ctx, store.Beat{InstanceID: "agent-1", Status: store.AgentRunning, CurrentTaskID: "1.1", ProgressPercent: 50, SessionID: "boot-1"})
		require.NoError(t, err)
		stuck, _, err := s.Heartbeat(ctx, store.Beat{InstanceID: "agent-1", Status: store.AgentStuck, SessionID: "boot-1",
			ErrorContext: &store.ErrorContext{Code: "E", Message: "m", Timestamp: stamp}})
		require.NoError(t, err)

		for _, session := range []string{"boot-1", ""} {
			again := registerAs(session, 9)
			require.Equal(t, store.Registration{Agent: stuck}, again, "the same session, or none: the record unchanged")
		}

		restarted := registerAs("boot-2", 2)
		require.True(t, restarted.Replaced)
		require.False(t, restarted.Created)
		require.True(t, restarted.ReleaseLocks)
		require.Equal(t, "boot-1", restarted.ReplacedSession)
		a := restarted.Agent
		require.Equal(t, store.AgentInitializing, a.Status)
		require.Equal(t, "boot-2", a.SessionID)
		require.Equal(t, int32(2), a.WaveNumber)
		require.Equal(t, "pid boot-2", a.Host)
		require.Empty(t, a.CurrentTaskID)
		require.Zero(t, a.ProgressPercent)
		require.Nil(t, a.ErrorContext)
		require.True(t, a.LastHeartbeat.IsZero())
		require.False(t, a.SpawnedAt.Before(stuck.LastHeartbeat), "spawned anew")
		got, err := s.GetAgent(ctx, "agent-1", windows)
		require.NoError(t, err)
		require.Equal(t, a, got)

		// Until the locks are released, registering again says so.
		retry := registerAs("boot-2", 2)
		require.Equal(t, store.Registration{Agent: a, ReplacedSession: "boot-1", ReleaseLocks: true}, retry)
		require.NoError(t, s.LocksReleased(ctx, "agent-1", "boot-1"), "another session's release changes nothing")
		require.True(t, registerAs("boot-2", 2).ReleaseLocks)
		require.NoError(t, s.LocksReleased(ctx, "agent-1", "boot-2"))
		require.Equal(t, store.Registration{Agent: a}, registerAs("boot-2", 2))

		// The old process's heartbeats are refused; the new one's and unchecked ones are not.
		_, _, err = s.Heartbeat(ctx, store.Beat{InstanceID: "agent-1", Status: store.AgentRunning, SessionID: "boot-1"})
		var replaced *store.SessionReplacedError
		require.ErrorAs(t, err, &replaced)
		require.Equal(t, store.SessionReplacedError{InstanceID: "agent-1", Session: "boot-1", Current: "boot-2"}, *replaced)
		unchanged, err := s.GetAgent(ctx, "agent-1", windows)
		require.NoError(t, err)
		require.Equal(t, a, unchanged, "a refused heartbeat changes nothing")
		beat(t, s, "agent-1", store.AgentRunning)
		_, _, err = s.Heartbeat(ctx, store.Beat{InstanceID: "agent-1", Status: store.AgentCompleted, SessionID: "boot-2"})
		require.NoError(t, err)

		// A finished instance restarted starts afresh too.
		third := registerAs("boot-3", 3)
		require.True(t, third.Replaced)
		require.Equal(t, "boot-2", third.ReplacedSession)
		require.Equal(t, store.AgentInitializing, third.Agent.Status)
		require.True(t, third.Agent.CompletedAt.IsZero())
		beat(t, s, "agent-1", store.AgentRunning)

		// A registration without a session followed by one with: the first session is new.
		register(t, s, "agent-2", "exec-1")
		later := func() store.Registration {
			reg, err := s.RegisterAgent(ctx, store.NewAgent{InstanceID: "agent-2", ExecutionID: "exec-1", SessionID: "boot-1"})
			require.NoError(t, err)
			return reg
		}()
		require.True(t, later.Replaced)
		require.Empty(t, later.ReplacedSession)
		require.Equal(t, "boot-1", later.Agent.SessionID)
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
