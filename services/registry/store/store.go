// Package store is the Registry's storage: the [Store] interface its backends implement
// (postgres for production, sqlite embedded) and the SQL migrations they apply.
//
// The Registry owns its tables, and no other service reads or writes them: agent instances and
// heartbeats, file ownership, fencing high-water marks and SQL-backed file locks. The conformance
// suite in ./storetest holds every backend to the same behaviour.
package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/converge-dev/converge/platform/database"
)

// Service is the name the Registry's migrations are recorded under (version table
// converge_registry_migrations) and the suffix of its Postgres application_name.
const Service = "registry"

// migrations holds migrations/<dialect>/NNNN_name.sql, goose-annotated.
//
//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrations embed.FS

// Migrations returns the Registry's migration files for dialect d, NNNN_name.sql at the root
// of the returned file system. It panics for a dialect without migrations, a programming error.
func Migrations(d database.Dialect) fs.FS {
	switch d {
	case database.DialectPostgres, database.DialectSQLite:
		sub, err := fs.Sub(migrations, "migrations/"+string(d))
		if err != nil {
			panic(fmt.Sprintf("store: migrations for %s: %v", d, err))
		}
		return sub
	default:
		panic(fmt.Sprintf("store: no migrations for dialect %q", d))
	}
}

// Store is the Registry's durable state: ownership patterns, registered agents with their
// last reported state and sampled heartbeats, and the epochs of the lock backends' fencing
// tokens. Locks and live heartbeats are hot state and live elsewhere (package hot). Every
// backend implements all of it and passes ./storetest.
//
// Times are the store's: a backend stamps rows with its database's clock (Postgres now(),
// SQLite's 'now'), never with the caller's.
type Store interface {
	// Ping reports whether the store can serve requests. The server's health is NOT_SERVING
	// until it succeeds, and a closed store fails it.
	Ping(ctx context.Context) error
	// Close releases the store's connections. It may be called more than once.
	Close() error

	// Now answers the store's clock, the time every row is stamped with.
	Now(ctx context.Context) (time.Time, error)

	// NextLockEpoch increments and answers the fencing epoch of the lock backend called name
	// (1 the first time). A lock backend takes a new epoch whenever its own state may have
	// been lost (see package hot), so that its tokens keep increasing.
	NextLockEpoch(ctx context.Context, name string) (int64, error)

	// SetOwner records that owner owns the normalised pattern (see repopath.CleanGlob),
	// replacing the pattern's previous owner, which it answers ("" when the pattern is new).
	SetOwner(ctx context.Context, pattern, owner string) (own Ownership, previous string, err error)
	// OwnerOf answers the ownership of the most specific pattern matching the normalised path
	// p (see repopath.MoreSpecific), or a *NotFoundError when no pattern matches.
	OwnerOf(ctx context.Context, p string) (Ownership, error)
	// ReleaseOwner removes pattern if owner owns it: a *NotFoundError when there is no such
	// pattern, a *WrongOwnerError when another owner has it.
	ReleaseOwner(ctx context.Context, pattern, owner string) error
	// ListOwners lists ownership patterns in pattern order.
	ListOwners(ctx context.Context, q ListOwnersQuery) ([]Ownership, error)

	// RegisterAgent records a new agent instance in status initializing (created), or answers
	// the existing one when the same instance registers again for the same execution; another
	// execution is an *AlreadyExistsError. A registration whose session is set and differs from
	// the stored one (the agent process restarted) starts the instance afresh: status
	// initializing whatever it was, task, error, progress and heartbeat cleared, spawn time now,
	// the registration's type, wave, configuration and host; it records the replaced session and
	// that the instance's locks are to be released (see LocksReleased). Without a session, or
	// with the stored one, the existing record is answered unchanged.
	RegisterAgent(ctx context.Context, a NewAgent) (Registration, error)
	// LocksReleased records that the locks of instanceID's sessions before session were
	// released, so that a later registration of session does not release them again. A newer
	// session in the meantime keeps its own pending release.
	LocksReleased(ctx context.Context, instanceID, session string) error
	// Heartbeat records an agent's report at the store's time: its new status (a legal
	// transition, see CanTransition; else a *TransitionError; stale and gone are never
	// reported), task, progress and resource use. It keeps a sample in the heartbeat history when
	// the status or the task changed or the last sample is at least b.SampleEvery old. An unknown
	// agent is a *NotFoundError; a beat whose session is set and is not the stored one a
	// *SessionReplacedError.
	Heartbeat(ctx context.Context, b Beat) (agent Agent, sampled bool, err error)
	// GetAgent answers one agent, its status derived with w (see AgentWindows), or a
	// *NotFoundError.
	GetAgent(ctx context.Context, instanceID string, w AgentWindows) (Agent, error)
	// ListAgents lists agents newest first (spawn time, then instance id, descending), their
	// statuses derived with q.Windows.
	ListAgents(ctx context.Context, q ListAgentsQuery) ([]Agent, error)
	// StaleAgents answers, among the agents named by q.InstanceIDs, the ones that are not
	// finished and whose last sign of life (last heartbeat, or registration before the first)
	// is older than q.OlderThan by the store's clock, whatever status they last reported, oldest
	// first: the seed's stale-heartbeat query restricted to candidates.
	StaleAgents(ctx context.Context, q StaleQuery) ([]StaleAgent, error)
	// LiveAgents lists the agents that are not finished (neither completed nor failed) with
	// the time of their last heartbeat (their spawn time before the first), in instance id
	// order after the id after: what a lost liveness index is rebuilt from.
	LiveAgents(ctx context.Context, after string, limit int) ([]LiveAgent, error)
	// Heartbeats answers an agent's sampled heartbeats, newest first, at most limit.
	Heartbeats(ctx context.Context, instanceID string, limit int) ([]HeartbeatSample, error)
	// DeleteHeartbeatsBefore deletes sampled heartbeats taken before cutoff and answers how
	// many it deleted.
	DeleteHeartbeatsBefore(ctx context.Context, cutoff time.Time) (int64, error)
}

// Ownership says that Owner owns every path matching Pattern.
type Ownership struct {
	// Pattern is a normalised doublestar glob or literal path.
	Pattern string
	// Owner is a loop, team or agent id.
	Owner string
	// CreatedAt is when the pattern was first set; UpdatedAt when its owner last changed.
	CreatedAt, UpdatedAt time.Time
}

// ListOwnersQuery filters and pages ListOwners.
type ListOwnersQuery struct {
	// Owner keeps only this owner's patterns; "" keeps all.
	Owner string
	// After keeps only patterns sorting after it (the last pattern of the previous page).
	After string
	// Limit is the most patterns answered.
	Limit int
}

// AgentStatus is a build agent instance's status, as stored.
type AgentStatus string

// The agent statuses. Legal transitions (see CanTransition):
// initializing → running | failed; running ↔ idle; running | idle → completed | failed | stuck;
// stuck → running | failed. Completed and failed are final.
//
// Stale and gone are never stored nor reported: they are derived when an agent that is not
// final has been silent past the Registry's windows (see AgentWindows).
const (
	AgentInitializing AgentStatus = "initializing"
	AgentRunning      AgentStatus = "running"
	AgentIdle         AgentStatus = "idle"
	AgentCompleted    AgentStatus = "completed"
	AgentFailed       AgentStatus = "failed"
	AgentStuck        AgentStatus = "stuck"
	AgentStale        AgentStatus = "stale"
	AgentGone         AgentStatus = "gone"
)

// transitions are the legal status changes (the AgentStatus state machine of
// proto/converge/common/v1/agent.proto).
var transitions = map[AgentStatus][]AgentStatus{
	AgentInitializing: {AgentRunning, AgentFailed},
	AgentRunning:      {AgentIdle, AgentCompleted, AgentFailed, AgentStuck},
	AgentIdle:         {AgentRunning, AgentCompleted, AgentFailed, AgentStuck},
	AgentStuck:        {AgentRunning, AgentFailed},
}

// Final reports whether s is an end state: completed or failed.
func (s AgentStatus) Final() bool { return s == AgentCompleted || s == AgentFailed }

// Valid reports whether s is one of the statuses, derived ones included.
func (s AgentStatus) Valid() bool {
	return s.Reportable() || s == AgentStale || s == AgentGone
}

// Reportable reports whether an agent may report (and the store keep) status s: every status
// but the derived stale and gone.
func (s AgentStatus) Reportable() bool {
	switch s {
	case AgentInitializing, AgentRunning, AgentIdle, AgentCompleted, AgentFailed, AgentStuck:
		return true
	}
	return false
}

// CanTransition reports whether an agent in status from may report status to. Staying in the
// same status is legal unless the status is final: a finished agent reports nothing more. No
// status moves to the derived stale or gone.
func CanTransition(from, to AgentStatus) bool {
	if from.Final() || !to.Reportable() {
		return false
	}
	return from == to || slices.Contains(transitions[from], to)
}

// AgentWindows are the Registry's windows of silence: an agent that is not final and whose
// last sign of life (last heartbeat, or its registration before the first) is older than Stale
// by the store's clock is answered stale, older than Gone gone, with the status it last reported
// in Agent.ReportedStatus. A zero window derives nothing.
type AgentWindows struct {
	Stale, Gone time.Duration
}

// AgentConfig is an agent's tuning, defaults filled in.
type AgentConfig struct {
	// MaxRetries of a failed task (default 3).
	MaxRetries int32
	// HeartbeatInterval is how often the agent heartbeats (default 30 s).
	HeartbeatInterval time.Duration
	// TaskTimeout bounds one task execution (default 300 s).
	TaskTimeout time.Duration
	// ValidationTimeout bounds a task's validation command (default 120 s).
	ValidationTimeout time.Duration
}

// The defaults of AgentConfig.
const (
	DefaultMaxRetries        = 3
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultTaskTimeout       = 300 * time.Second
	DefaultValidationTimeout = 120 * time.Second
)

// WithDefaults answers c with its zero durations set to the defaults. MaxRetries is taken as
// given: the caller decides whether 0 means "unset" or "no retry".
func (c AgentConfig) WithDefaults() AgentConfig {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.TaskTimeout <= 0 {
		c.TaskTimeout = DefaultTaskTimeout
	}
	if c.ValidationTimeout <= 0 {
		c.ValidationTimeout = DefaultValidationTimeout
	}
	return c
}

// ErrorContext says why an agent failed or got stuck.
type ErrorContext struct {
	Code       string    `json:"code,omitempty"`
	Message    string    `json:"message,omitempty"`
	TaskID     string    `json:"taskId,omitempty"`
	StackTrace string    `json:"stackTrace,omitempty"`
	Timestamp  time.Time `json:"timestamp,omitzero"` // RFC 3339
}

// NewAgent is what RegisterAgent records.
type NewAgent struct {
	InstanceID string
	// ExecutionID is "" for a pool agent not bound to an execution.
	ExecutionID string
	// AgentType is "" for the default, "build-agent".
	AgentType string
	// WaveNumber is 0 when the agent is not bound to a wave.
	WaveNumber int32
	// Config is stored with defaults filled in.
	Config AgentConfig
	// Host names the agent's host and process, for operators.
	Host string
	// SessionID is the registering process's session (boot id); "" for none.
	SessionID string
	// Principal is the authenticated caller that registers it (auth.Principal.Name); "" when the
	// server authenticates nobody. It is recorded by the first registration (or the first with
	// one) and kept by later ones.
	Principal string
}

// Registration is the outcome of RegisterAgent.
type Registration struct {
	// Agent is the registered instance, as stored.
	Agent Agent
	// Created: the instance is new.
	Created bool
	// Replaced: the registration replaced the instance's session (its process restarted).
	Replaced bool
	// ReplacedSession is the session the registration replaced ("" when the replaced
	// registration had none), also when answering again a registration whose locks are still to
	// be released.
	ReplacedSession string
	// ReleaseLocks: the locks held by the instance's earlier sessions are still to be released;
	// call LocksReleased once they are.
	ReleaseLocks bool
}

// DefaultAgentType is the agent type of an agent registered without one.
const DefaultAgentType = "build-agent"

// Agent is a registered build agent instance with its last reported state.
type Agent struct {
	InstanceID    string
	ExecutionID   string
	AgentType     string
	CurrentTaskID string
	WaveNumber    int32
	// Status is the agent's status as the Registry sees it: ReportedStatus, or stale or gone
	// when derived (see AgentWindows).
	Status AgentStatus
	// ReportedStatus is the status the agent last reported (the stored one).
	ReportedStatus AgentStatus
	// SessionID is the session of the process that registered last; "" for none.
	SessionID string
	// Principal is the authenticated caller that registered the instance; "" for none.
	Principal string
	Host      string
	Config    AgentConfig
	// ErrorContext is the last error reported with status failed or stuck; nil when none.
	ErrorContext *ErrorContext
	// Last reported progress (0-100), resident memory (MB) and CPU use (% of one core).
	ProgressPercent int32
	MemoryUsageMB   int32
	CPUPercent      float64
	// SpawnedAt is when the agent registered. LastHeartbeat is zero before the first
	// heartbeat, CompletedAt before a final status.
	SpawnedAt, LastHeartbeat, CompletedAt time.Time
}

// Beat is one heartbeat report of an agent.
type Beat struct {
	InstanceID    string
	Status        AgentStatus
	CurrentTaskID string
	// ProgressPercent 0-100, MemoryUsageMB >= 0, CPUPercent >= 0.
	ProgressPercent int32
	MemoryUsageMB   int32
	CPUPercent      float64
	// ErrorContext replaces the stored one when set.
	ErrorContext *ErrorContext
	// SessionID, when set, must be the stored session (else a *SessionReplacedError).
	SessionID string
	// SampleEvery is the sampling period of the heartbeat history (see Store.Heartbeat).
	SampleEvery time.Duration
}

// HeartbeatSample is a sampled heartbeat.
type HeartbeatSample struct {
	InstanceID      string
	Status          AgentStatus
	CurrentTaskID   string
	ProgressPercent int32
	MemoryUsageMB   int32
	CPUPercent      float64
	CreatedAt       time.Time
}

// ListAgentsQuery filters and pages ListAgents.
type ListAgentsQuery struct {
	// ExecutionID keeps only the agents of this execution; "" keeps all.
	ExecutionID string
	// Statuses keeps only agents in these statuses, as derived with Windows; empty keeps all.
	Statuses []AgentStatus
	// Windows derive the stale and gone statuses.
	Windows AgentWindows
	// After, when set, keeps only agents that sort after this cursor (newest first: spawned
	// earlier, or at the same time with a smaller instance id).
	After *AgentCursor
	// Limit is the most agents answered.
	Limit int
}

// AgentCursor is the position of an agent in ListAgents' order.
type AgentCursor struct {
	SpawnedAt  time.Time
	InstanceID string
}

// StaleQuery asks StaleAgents for stale candidates.
type StaleQuery struct {
	// InstanceIDs are the candidates.
	InstanceIDs []string
	// OlderThan is the age of the last sign of life past which an unfinished agent is stale.
	OlderThan time.Duration
	// ExecutionID keeps only the agents of this execution; "" keeps all.
	ExecutionID string
	// Windows derive the answered agents' statuses.
	Windows AgentWindows
}

// StaleAgent is an unfinished agent whose heartbeat stopped.
type StaleAgent struct {
	Agent Agent
	// SecondsSinceHeartbeat is the age of its last heartbeat (its registration before the
	// first) by the store's clock, in whole seconds.
	SecondsSinceHeartbeat int64
}

// LiveAgent is an unfinished agent and when it was last heard of.
type LiveAgent struct {
	InstanceID string
	// LastSeen is its last heartbeat, or its spawn time before the first.
	LastSeen time.Time
}

// NotFoundError: there is no such agent, ownership pattern or matching pattern.
type NotFoundError struct {
	// Kind is "agent", "ownership pattern" or "owner".
	Kind string
	// ID is the instance id, pattern or path looked up.
	ID string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.Kind, e.ID) }

// AlreadyExistsError: the agent instance id is registered to another execution.
type AlreadyExistsError struct {
	InstanceID  string
	ExecutionID string
}

func (e *AlreadyExistsError) Error() string {
	exec := e.ExecutionID
	if exec == "" {
		exec = "the pool (no execution)"
	} else {
		exec = fmt.Sprintf("execution %q", exec)
	}
	return fmt.Sprintf("agent %q is already registered to %s", e.InstanceID, exec)
}

// WrongOwnerError: the ownership pattern belongs to another owner.
type WrongOwnerError struct {
	Pattern string
	Owner   string
}

func (e *WrongOwnerError) Error() string {
	return fmt.Sprintf("ownership pattern %q is owned by %q", e.Pattern, e.Owner)
}

// TransitionError: an agent reported a status its current one cannot move to.
type TransitionError struct {
	InstanceID string
	From, To   AgentStatus
}

func (e *TransitionError) Error() string {
	if e.From.Final() {
		return fmt.Sprintf("agent %q is already %s: a finished agent reports nothing more", e.InstanceID, e.From)
	}
	return fmt.Sprintf("agent %q cannot go from %s to %s", e.InstanceID, e.From, e.To)
}

// SessionReplacedError: a heartbeat names a session that is not the agent's current one: a newer
// registration replaced it, and the process that sent it must stop.
type SessionReplacedError struct {
	InstanceID string
	// Session is the beat's session, Current the stored one.
	Session, Current string
}

func (e *SessionReplacedError) Error() string {
	if e.Current == "" {
		return fmt.Sprintf("session %q of agent %q is not its current session (it registered without one): this process must stop", e.Session, e.InstanceID)
	}
	return fmt.Sprintf("session %q of agent %q was replaced by session %q: this process must stop", e.Session, e.InstanceID, e.Current)
}

// UnavailableError: the store could not be reached or was too busy to answer. Backends wrap
// connection failures, timeouts and lock waits in it; any other error is a bug. It is
// platform/database's, so the platform's one error path answers it Unavailable.
type UnavailableError = database.UnavailableError
