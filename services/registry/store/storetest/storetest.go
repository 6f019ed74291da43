// Package storetest is the conformance suite of the Registry store: every backend of
// store.Store runs it (see ../conformance_test.go) and must pass it unchanged.
package storetest

import (
	"slices"
	"testing"

	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/registry/store"
)

// Run runs the suite against the stores newStore returns, each new, empty and migrated.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	harness.RunSchema(t, newStore, harness.SchemaSpec{
		Tables:  schema,
		Indexes: indexes,
		Cases:   constraintCases,
		SQLiteCases: []harness.Case{{
			Name:  "timestamp not in canonical form",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE build_agent_instances SET last_heartbeat = '2026-01-16T10:00:00+02:00' WHERE instance_id = 'a1'`),
			Want:  database.CheckViolation,
		}},
	})
	runOwnership(t, newStore)
	runAgents(t, newStore)
	runEpochs(t, newStore)
}

// indexes are the Registry's CREATE INDEX indexes.
var indexes = map[string]harness.Index{
	"idx_build_agents_execution": {Table: "build_agent_instances", Partial: true},
	"idx_build_agents_status":    {Table: "build_agent_instances"},
	"idx_build_agents_last_seen": {Table: "build_agent_instances", Partial: true},
	"idx_heartbeats_instance":    {Table: "agent_heartbeats"},
	"idx_heartbeats_created_at":  {Table: "agent_heartbeats"},
	"file_ownership_owner_idx":   {Table: "file_ownership"},
	"file_ownership_base_idx":    {Table: "file_ownership"},
}

// schema is every Registry table with exactly its columns.
var schema = harness.Schema{
	"build_agent_instances": {
		"instance_id", "execution_id", "current_task_id", "wave_number", "agent_type", "status",
		"hostname", "labels", "config", "error_context", "consecutive_failures", "spawned_at",
		"last_heartbeat", "completed_at", "updated_at", "progress_percent", "memory_usage_mb", "cpu_percent",
		"session_id", "previous_session_id", "locks_release_pending", "principal",
	},
	"agent_heartbeats": {
		"id", "instance_id", "status", "current_task_id", "progress_percent", "memory_usage_mb",
		"cpu_percent", "created_at",
	},
	"file_ownership": {"pattern", "owner", "note", "created_at", "updated_at", "base"},
	"lock_epochs":    {"name", "epoch", "updated_at"},
}

// fixtures is the registered agent a1.
var fixtures = []harness.Stmt{
	harness.S(`INSERT INTO build_agent_instances (instance_id) VALUES ('a1')`),
}

// with returns fixtures followed by more setup statements.
func with(more ...harness.Stmt) []harness.Stmt {
	return append(slices.Clone(fixtures), more...)
}

// heartbeat inserts a heartbeat of a1 with the given extra columns and values.
func heartbeat(columns, values string) harness.Stmt {
	return harness.S(`INSERT INTO agent_heartbeats (instance_id, ` + columns + `) VALUES ('a1', ` + values + `)`)
}

// constraintCases are the rows the Registry schema must accept and reject, identically on every
// SQL backend.
var constraintCases = []harness.Case{
	// Agents.
	{
		Name: "agent with every column",
		Stmt: harness.S(`INSERT INTO build_agent_instances (instance_id, execution_id, current_task_id, wave_number,
			agent_type, status, hostname, labels, config, error_context, consecutive_failures, spawned_at,
			last_heartbeat, completed_at, updated_at)
			VALUES ('a2', 'ex1', '1.1', 1, 'build-agent', 'running', 'host-1', '{"executors": ["command"]}',
			'{"maxRetries": 3, "heartbeatIntervalMs": 30000}', '{"code": "E1", "message": "m"}', 2,
			'2026-01-16T10:00:00.000Z', '2026-01-16T10:00:30.000Z', NULL, '2026-01-16T10:00:30.000Z')`),
	},
	{
		Name: "agent of a Scheduler execution that is not in this database",
		Stmt: harness.S(`INSERT INTO build_agent_instances (instance_id, execution_id, current_task_id) VALUES ('a2', 'elsewhere', 'x')`),
	},
	{
		Name:  "agent with an unknown status",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET status = 'zombie' WHERE instance_id = 'a1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "duplicate agent",
		Setup: fixtures,
		Stmt:  harness.S(`INSERT INTO build_agent_instances (instance_id) VALUES ('a1')`),
		Want:  database.UniqueViolation,
	},
	{
		Name: "agent with an empty id",
		Stmt: harness.S(`INSERT INTO build_agent_instances (instance_id) VALUES ('')`),
		Want: database.CheckViolation,
	},
	{
		Name:  "agent config not an object",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET config = '[]' WHERE instance_id = 'a1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "agent error context not JSON",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET error_context = 'oops' WHERE instance_id = 'a1'`),
		Want:  database.InvalidJSON,
	},
	{
		Name:  "agent with negative consecutive failures",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET consecutive_failures = -1 WHERE instance_id = 'a1'`),
		Want:  database.CheckViolation,
	},

	// Heartbeats.
	{
		Name:  "heartbeat with every column",
		Setup: fixtures,
		Stmt: heartbeat(`status, current_task_id, progress_percent, memory_usage_mb, cpu_percent, created_at`,
			`'running', '1.1', 100, 512, 250.5, '2026-01-16T10:00:30.000Z'`),
	},
	{
		Name:  "heartbeat progress 101",
		Setup: fixtures,
		Stmt:  heartbeat(`status, progress_percent`, `'running', 101`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "heartbeat progress -1",
		Setup: fixtures,
		Stmt:  heartbeat(`status, progress_percent`, `'running', -1`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "heartbeat with an unknown status",
		Setup: fixtures,
		Stmt:  heartbeat(`status`, `'zombie'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "heartbeat without a status",
		Setup: fixtures,
		Stmt:  heartbeat(`progress_percent`, `50`),
		Want:  database.NotNullViolation,
	},
	{
		Name:  "heartbeat with negative cpu",
		Setup: fixtures,
		Stmt:  heartbeat(`status, cpu_percent`, `'running', -0.5`),
		Want:  database.CheckViolation,
	},
	{
		Name: "heartbeat of an unknown agent",
		Stmt: harness.S(`INSERT INTO agent_heartbeats (instance_id, status) VALUES ('nobody', 'running')`),
		Want: database.ForeignKeyViolation,
	},
	{
		Name:  "deleting an agent deletes its heartbeats",
		Setup: with(heartbeat(`status`, `'running'`)),
		Stmt:  harness.S(`DELETE FROM build_agent_instances WHERE instance_id = 'a1'`),
	},

	// Ownership.
	{
		Name: "owner of a pattern",
		Stmt: harness.S(`INSERT INTO file_ownership (pattern, owner, note) VALUES ('db/**', 'loop-db', 'schema team')`),
	},
	{
		Name:  "second owner of a pattern",
		Setup: []harness.Stmt{harness.S(`INSERT INTO file_ownership (pattern, owner) VALUES ('db/**', 'loop-db')`)},
		Stmt:  harness.S(`INSERT INTO file_ownership (pattern, owner) VALUES ('db/**', 'loop-api')`),
		Want:  database.UniqueViolation,
	},
	{
		Name: "ownership without an owner",
		Stmt: harness.S(`INSERT INTO file_ownership (pattern, owner) VALUES ('db/**', '')`),
		Want: database.CheckViolation,
	},

	// Agents' last reported state.
	{
		Name:  "agent progress 101",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET progress_percent = 101 WHERE instance_id = 'a1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "agent with negative memory",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET memory_usage_mb = -1 WHERE instance_id = 'a1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "agent with negative cpu",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET cpu_percent = -0.5 WHERE instance_id = 'a1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "agent without progress",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE build_agent_instances SET progress_percent = NULL WHERE instance_id = 'a1'`),
		Want:  database.NotNullViolation,
	},

	// Fencing epochs.
	{
		Name: "lock epoch",
		Stmt: harness.S(`INSERT INTO lock_epochs (name, epoch) VALUES ('converge:registry', 1)`),
	},
	{
		Name: "lock epoch 0",
		Stmt: harness.S(`INSERT INTO lock_epochs (name, epoch) VALUES ('converge:registry', 0)`),
		Want: database.CheckViolation,
	},
	{
		Name: "lock epoch without a name",
		Stmt: harness.S(`INSERT INTO lock_epochs (name, epoch) VALUES ('', 1)`),
		Want: database.CheckViolation,
	},
	{
		Name:  "duplicate lock epoch",
		Setup: []harness.Stmt{harness.S(`INSERT INTO lock_epochs (name, epoch) VALUES ('converge:registry', 1)`)},
		Stmt:  harness.S(`INSERT INTO lock_epochs (name, epoch) VALUES ('converge:registry', 2)`),
		Want:  database.UniqueViolation,
	},
}
