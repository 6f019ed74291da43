// Package storetest is the conformance suite of the Scheduler store: every backend of
// store.Store runs it (see ../conformance_test.go) and must pass it unchanged.
package storetest

import (
	"testing"

	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Run runs the suite against the stores newStore returns, each new, empty and migrated.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	harness.RunSchema(t, newStore, harness.SchemaSpec{
		Tables:  schema,
		Indexes: indexes,
		Cases:   constraintCases(),
		SQLiteCases: []harness.Case{{
			Name:  "timestamp not in canonical form",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET started_at = '2026-01-16 10:00:00' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		}},
	})
	t.Run("TaskLists", func(t *testing.T) {
		t.Parallel()
		runTaskLists(t, newStore)
	})
}

// indexes are the Scheduler's CREATE INDEX indexes.
var indexes = map[string]harness.Index{
	"task_lists_created_at_idx":              {Table: "task_lists"},
	"task_parallelism_analysis_b_idx":        {Table: "task_parallelism_analysis"},
	"idx_exec_runs_active":                   {Table: "task_list_execution_runs", Partial: true},
	"idx_waves_active":                       {Table: "parallel_execution_waves", Partial: true},
	"wave_task_assignments_integration_uniq": {Table: "wave_task_assignments", Unique: true, Partial: true},
	"idx_wave_tasks":                         {Table: "wave_task_assignments"},
	"idx_wave_tasks_instance":                {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_claimable_idx":    {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_lease_idx":        {Table: "wave_task_assignments", Partial: true},
	"idx_exec_log_execution":                 {Table: "task_execution_log"},
	"idx_exec_log_task":                      {Table: "task_execution_log", Partial: true},
	"idx_exec_log_created_at":                {Table: "task_execution_log"},
	"idx_exec_log_errors":                    {Table: "task_execution_log", Partial: true},
	"idx_checkpoints_execution":              {Table: "checkpoints"},
	"idx_checkpoints_task":                   {Table: "checkpoints"},
	"feature_builds_active_uniq":             {Table: "feature_builds", Unique: true, Partial: true},
	"feature_builds_feature_idx":             {Table: "feature_builds"},
}

// schema is every Scheduler table with exactly its columns.
var schema = harness.Schema{
	"task_lists": {
		"id", "name", "description", "source_format", "source_path", "repository_url",
		"repository_path", "base_ref", "conventions_files", "spec_file", "tasks_file",
		"context_files", "validation_levels", "done_criteria", "metadata", "created_at", "updated_at",
		"name_folded",
	},
	"tasks": {
		"id", "task_list_id", "task_key", "title", "description", "action", "file", "files",
		"depends_on", "phase", "priority", "requirements", "steps", "command", "code_template",
		"validation_command", "validation_expected", "validation_expected_exit_code",
		"validation_timeout_ms", "position", "status", "created_at", "updated_at",
		"action_declared",
	},
	"task_file_impacts": {"id", "task_id", "path", "kind", "operation", "source"},
	"task_parallelism_analysis": {
		"task_a_id", "task_b_id", "can_parallel", "reason", "conflicting_paths", "analyzed_at",
	},
	"task_list_execution_runs": {
		"execution_id", "task_list_id", "run_number", "status", "outcome", "status_reason",
		"triggered_by", "options", "run_branch", "base_commit", "max_parallel", "max_retries",
		"max_failed_tasks", "deadline_at", "total_tasks", "completed_tasks", "failed_tasks",
		"skipped_tasks", "verify_report_id", "escalation_context", "cancel_requested_at",
		"created_at", "started_at", "completed_at", "updated_at",
	},
	"parallel_execution_waves": {
		"wave_id", "execution_id", "wave_number", "status", "task_count", "completed_count",
		"failed_count", "skipped_count", "base_commit", "integration_commit", "created_at",
		"started_at", "completed_at",
	},
	"wave_task_assignments": {
		"id", "wave_id", "kind", "task_id", "instance_id", "status", "attempt", "lease_token",
		"lease_expires_at", "commit_sha", "task_ref", "error", "created_at", "assigned_at",
		"completed_at", "updated_at",
	},
	"task_execution_log": {
		"seq", "execution_id", "task_id", "wave_number", "instance_id", "event_type", "message",
		"context", "created_at",
	},
	"checkpoints": {
		"id", "execution_id", "task_id", "assignment_id", "attempt", "instance_id", "git_ref",
		"files_snapshot", "metadata", "restored_at", "created_at",
	},
	"feature_builds": {
		"id", "feature", "task_list_id", "status", "status_reason", "max_iterations",
		"current_iteration", "dry_run", "options", "criteria_summary", "repeated_failures",
		"regressions", "loop_key", "started_at", "updated_at", "completed_at",
	},
	"feature_build_iterations": {
		"feature_build_id", "number", "execution_id", "verdict", "pass_count", "fail_count",
		"skip_count", "pending_human_count", "error_count", "failure_signature", "failed_criteria",
		"verify_report_id", "files_created", "files_modified", "recovery_log", "started_at",
		"completed_at",
	},
}

// eventTypes are the execution log's event types: the seed's and converge's. They match the
// EventType enum of converge.common.v1.
var eventTypes = []string{
	"task_started", "task_completed", "task_failed", "task_skipped",
	"checkpoint_created", "checkpoint_restored", "discovery_recorded", "validation_run",
	"error", "warning", "info",
	"execution_started", "execution_paused", "execution_resumed", "execution_cancelled",
	"execution_completed", "wave_started", "wave_completed",
	"lease_granted", "lease_expired", "task_requeued",
	"integration_started", "integration_completed", "integration_failed",
	"verification_started", "verdict", "agent_escalated",
}

// fixtures is a task list tl1 with tasks 1.1 and 1.2, its run ex1 and the run's wave w1 (1).
var fixtures = []harness.Stmt{
	harness.S(`INSERT INTO task_lists (id, name) VALUES ('tl1', 'list')`),
	harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '1.1', 'first', 0)`),
	harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '1.2', 'second', 1)`),
	harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number) VALUES ('ex1', 'tl1', 1)`),
	harness.S(`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count) VALUES ('w1', 'ex1', 1, 2)`),
}

// with returns fixtures followed by more setup statements.
func with(more ...harness.Stmt) []harness.Stmt {
	return append(append([]harness.Stmt(nil), fixtures...), more...)
}

// Task ids are identities; statements find them by key.
const (
	task11 = `(SELECT id FROM tasks WHERE task_key = '1.1')`
	task12 = `(SELECT id FROM tasks WHERE task_key = '1.2')`
)

// assignment inserts an assignment of wave w1 with the given columns and values.
func assignment(columns, values string) harness.Stmt {
	return harness.S(`INSERT INTO wave_task_assignments (wave_id, ` + columns + `) VALUES ('w1', ` + values + `)`)
}

// constraintCases are the rows the Scheduler schema must accept and reject, identically on
// every SQL backend.
func constraintCases() []harness.Case {
	cases := []harness.Case{
		// Task lists.
		{
			Name: "task list with every column",
			Stmt: harness.S(`INSERT INTO task_lists (id, name, description, source_format, source_path,
				repository_url, base_ref, conventions_files, spec_file, tasks_file, context_files,
				validation_levels, done_criteria, metadata, created_at, updated_at)
				VALUES ('tl', 'list', 'd', 'tasks_md', 'build/tasks.md', 'https://example.com/r.git', 'main',
				'["CLAUDE.md"]', 'build/spec.md', 'build/tasks.md', '["README.md"]',
				'[{"level": "codebase", "command": "go build ./..."}]', '# Done', '{"k": "v"}',
				'2026-01-16T10:00:00.000Z', '2026-01-16T10:00:00.123Z')`),
		},
		{
			Name: "task list with both a repository URL and path",
			Stmt: harness.S(`INSERT INTO task_lists (id, name, repository_url, repository_path) VALUES ('tl', 'l', 'https://x/r.git', '/src/r')`),
			Want: database.CheckViolation,
		},
		{
			Name: "task list with an empty name",
			Stmt: harness.S(`INSERT INTO task_lists (id, name) VALUES ('tl', '')`),
			Want: database.CheckViolation,
		},
		{
			Name: "task list without a name",
			Stmt: harness.S(`INSERT INTO task_lists (id) VALUES ('tl')`),
			Want: database.NotNullViolation,
		},
		{
			Name: "task list with an unknown source format",
			Stmt: harness.S(`INSERT INTO task_lists (id, name, source_format) VALUES ('tl', 'l', 'docx')`),
			Want: database.CheckViolation,
		},
		{
			Name: "task list conventions files not an array",
			Stmt: harness.S(`INSERT INTO task_lists (id, name, conventions_files) VALUES ('tl', 'l', '{"a": 1}')`),
			Want: database.CheckViolation,
		},
		{
			Name: "task list metadata not JSON",
			Stmt: harness.S(`INSERT INTO task_lists (id, name, metadata) VALUES ('tl', 'l', '{not json')`),
			Want: database.InvalidJSON,
		},
		{
			Name:  "duplicate task list id",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_lists (id, name) VALUES ('tl1', 'again')`),
			Want:  database.UniqueViolation,
		},

		// Tasks.
		{
			Name: "task with every column",
			Setup: with(harness.S(`INSERT INTO tasks (task_list_id, task_key, title, description, action, file, files,
				depends_on, phase, priority, requirements, steps, command, code_template, validation_command,
				validation_expected, validation_expected_exit_code, validation_timeout_ms, position, status)
				VALUES ('tl1', '2.1', 'third', 'd', 'UPDATE', 'db/001.sql',
				'[{"path": "db/001.sql", "kind": "file", "operation": "update"}]', '["1.1", "1.2"]',
				'database', 10, '["idempotent"]', '["write", "test"]', NULL, 'CREATE TABLE', 'make test',
				'exit 0', 0, 120000, 2, 'blocked_dcr')`)),
			Stmt: harness.S(`UPDATE tasks SET status = 'completed', updated_at = ? WHERE task_key = '2.1'`, "2026-01-16T10:00:00.000Z"),
		},
		{
			Name:  "duplicate task key in a list",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '1.1', 'again', 5)`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "same task key in another list",
			Setup: with(harness.S(`INSERT INTO task_lists (id, name) VALUES ('tl2', 'other')`)),
			Stmt:  harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl2', '1.1', 'same key', 0)`),
		},
		{
			Name:  "duplicate task position in a list",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '9', 'x', 0)`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "task with an unknown action",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position, action) VALUES ('tl1', '9', 'x', 9, 'MOVE')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "task with an unknown status",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE tasks SET status = 'done' WHERE task_key = '1.1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "task expecting exit code 256",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE tasks SET validation_expected_exit_code = 256 WHERE task_key = '1.1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "task with a negative position",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '9', 'x', -1)`),
			Want:  database.CheckViolation,
		},
		{
			Name: "task of an unknown list",
			Stmt: harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('nope', '1', 'x', 0)`),
			Want: database.ForeignKeyViolation,
		},
		{
			Name:  "task files not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE tasks SET files = '[' WHERE task_key = '1.1'`),
			Want:  database.InvalidJSON,
		},
		{
			Name:  "task depends_on not an array",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE tasks SET depends_on = '"1.2"' WHERE task_key = '1.1'`),
			Want:  database.CheckViolation,
		},

		// File impacts and the parallelism cache.
		{
			Name:  "file impact",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_file_impacts (task_id, path, kind, operation, source) VALUES (` + task11 + `, 'src/**', 'glob', 'read', 'inferred')`),
		},
		{
			Name:  "file impact of an unknown kind",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_file_impacts (task_id, path, kind) VALUES (` + task11 + `, 'a', 'socket')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "duplicate file impact",
			Setup: with(harness.S(`INSERT INTO task_file_impacts (task_id, path, kind) VALUES (` + task11 + `, 'a.go', 'file')`)),
			Stmt:  harness.S(`INSERT INTO task_file_impacts (task_id, path, kind, operation) VALUES (` + task11 + `, 'a.go', 'file', 'delete')`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "parallelism pair",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO task_parallelism_analysis (task_a_id, task_b_id, can_parallel, reason, conflicting_paths)
				VALUES (` + task11 + `, ` + task12 + `, FALSE, 'both write a.go', '["a.go"]')`),
		},
		{
			Name:  "parallelism pair in the wrong order",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_parallelism_analysis (task_a_id, task_b_id, can_parallel) VALUES (` + task12 + `, ` + task11 + `, TRUE)`),
			Want:  database.CheckViolation,
		},

		// Execution runs.
		{
			Name:  "run with every column",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, status, outcome,
				status_reason, triggered_by, options, run_branch, base_commit, max_parallel, max_retries,
				max_failed_tasks, deadline_at, total_tasks, completed_tasks, failed_tasks, skipped_tasks,
				verify_report_id, escalation_context, cancel_requested_at, started_at, completed_at)
				VALUES ('ex2', 'tl1', 2, 'failed', 'ESCALATED', 'agent stuck', 'retry', '{"executor": "command"}',
				'converge/ex2', 'abc123', 2, 1, 3, '2026-01-17T00:00:00.000Z', 2, 1, 1, 0, 'vr1',
				'{"errorHistory": []}', NULL, '2026-01-16T10:00:00.000Z', '2026-01-16T10:05:00.000Z')`),
		},
		{
			Name:  "duplicate run number of a list",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number) VALUES ('ex2', 'tl1', 1)`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "run with an unknown status",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'done' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "ended run without an outcome",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'completed' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "running run with an outcome",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'running', outcome = 'CONVERGED' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run with an unknown outcome",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'completed', outcome = 'WON' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run with max_parallel 0",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET max_parallel = 0 WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run options not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET options = 'x' WHERE execution_id = 'ex1'`),
			Want:  database.InvalidJSON,
		},

		// Waves.
		{
			Name:  "duplicate wave number of a run",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count) VALUES ('w2', 'ex1', 1, 1)`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "wave with an unknown status",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE parallel_execution_waves SET status = 'done' WHERE wave_id = 'w1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "wave number 0",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count) VALUES ('w0', 'ex1', 0, 1)`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "wave of an unknown run",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count) VALUES ('w2', 'nope', 2, 1)`),
			Want:  database.ForeignKeyViolation,
		},

		// Assignments.
		{
			Name:  "held task assignment",
			Setup: fixtures,
			Stmt: assignment(`task_id, instance_id, status, attempt, lease_token, lease_expires_at, assigned_at`,
				task11+`, 'agent-1', 'running', 2, 7, '2026-01-16T10:00:30.000Z', '2026-01-16T10:00:00.000Z'`),
		},
		{
			Name:  "held assignment without a lease",
			Setup: fixtures,
			Stmt:  assignment(`task_id, instance_id, status`, task11+`, 'agent-1', 'assigned'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "task assignment without a task",
			Setup: fixtures,
			Stmt:  assignment(`kind`, `'task'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "integration assignment with a task",
			Setup: fixtures,
			Stmt:  assignment(`kind, task_id`, `'integration', `+task11),
			Want:  database.CheckViolation,
		},
		{
			Name:  "second integration of a wave",
			Setup: with(assignment(`kind`, `'integration'`)),
			Stmt:  assignment(`kind`, `'integration'`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "task assigned twice in a wave",
			Setup: with(assignment(`task_id`, task11)),
			Stmt:  assignment(`task_id`, task11),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "assignment with an unknown status",
			Setup: fixtures,
			Stmt:  assignment(`task_id, status`, task11+`, 'lost'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment attempt 0",
			Setup: fixtures,
			Stmt:  assignment(`task_id, attempt`, task11+`, 0`),
			Want:  database.CheckViolation,
		},

		// The execution log.
		{
			Name:  "log entry with an unknown event type",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, event_type, message) VALUES ('ex1', 'task_exploded', 'boom')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "log entry context not an object",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, event_type, message, context) VALUES ('ex1', 'info', 'm', '[1]')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "log entry context not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, event_type, message, context) VALUES ('ex1', 'info', 'm', '{')`),
			Want:  database.InvalidJSON,
		},
		{
			Name:  "log entry of wave 0",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, event_type, message, wave_number) VALUES ('ex1', 'info', 'm', 0)`),
			Want:  database.CheckViolation,
		},

		// Checkpoints.
		{
			Name:  "checkpoint",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO checkpoints (id, execution_id, task_id, attempt, instance_id, git_ref, files_snapshot, metadata)
				VALUES ('cp1', 'ex1', ` + task11 + `, 1, 'agent-1', 'abc123', '[{"path": "a.go", "sha256": ""}]', '{}')`),
		},
		{
			Name:  "checkpoint without a git ref",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO checkpoints (id, execution_id, task_id, git_ref) VALUES ('cp1', 'ex1', ` + task11 + `, '')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "checkpoint files snapshot not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO checkpoints (id, execution_id, task_id, git_ref, files_snapshot) VALUES ('cp1', 'ex1', ` + task11 + `, 'abc', 'a.go')`),
			Want:  database.InvalidJSON,
		},

		// Feature builds.
		{
			Name: "feature build with an iteration",
			Setup: with(harness.S(`INSERT INTO feature_builds (id, feature, task_list_id, max_iterations, current_iteration,
				dry_run, options, criteria_summary, loop_key) VALUES ('fb1', 'export', 'tl1', 5, 1, TRUE, '{}', '{"total": 7}', 'feature:export')`)),
			Stmt: harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number, execution_id, verdict, pass_count,
				fail_count, failure_signature, failed_criteria, verify_report_id, files_created, files_modified, recovery_log)
				VALUES ('fb1', 1, 'ex1', 'FAILED', 2, 4, 'F3,F4', '["F3", "F4"]', 'vr1', '["a.ts"]', '[]',
				'[{"issue": "app down", "action": "restart", "result": "ok"}]')`),
		},
		{
			Name:  "second feature build in progress",
			Setup: with(harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb1', 'export', 'k1')`)),
			Stmt:  harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb2', 'export', 'k2')`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "new feature build after one ended",
			Setup: with(harness.S(`INSERT INTO feature_builds (id, feature, loop_key, status) VALUES ('fb1', 'export', 'k1', 'ESCALATED')`)),
			Stmt:  harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb2', 'export', 'k2')`),
		},
		{
			Name: "feature build with an unknown status",
			Stmt: harness.S(`INSERT INTO feature_builds (id, feature, loop_key, status) VALUES ('fb1', 'export', 'k', 'FAILED')`),
			Want: database.CheckViolation,
		},
		{
			Name: "feature build past its max iterations",
			Stmt: harness.S(`INSERT INTO feature_builds (id, feature, loop_key, max_iterations, current_iteration) VALUES ('fb1', 'export', 'k', 3, 4)`),
			Want: database.CheckViolation,
		},
		{
			Name: "duplicate feature build iteration",
			Setup: with(
				harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb1', 'export', 'k')`),
				harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number) VALUES ('fb1', 1)`),
			),
			Stmt: harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number) VALUES ('fb1', 1)`),
			Want: database.UniqueViolation,
		},
		{
			Name:  "iteration with an unknown verdict",
			Setup: with(harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb1', 'export', 'k')`)),
			Stmt:  harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number, verdict) VALUES ('fb1', 1, 'ESCALATED')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "iteration recovery log not an array",
			Setup: with(harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb1', 'export', 'k')`)),
			Stmt:  harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number, recovery_log) VALUES ('fb1', 1, '{}')`),
			Want:  database.CheckViolation,
		},

		// Foreign keys within the service cascade from the task list down.
		{
			Name: "deleting a task list deletes what hangs off it",
			Setup: with(
				harness.S(`INSERT INTO task_file_impacts (task_id, path, kind) VALUES (`+task11+`, 'a.go', 'file')`),
				assignment(`task_id`, task11),
				harness.S(`INSERT INTO task_execution_log (execution_id, task_id, event_type, message) VALUES ('ex1', `+task11+`, 'task_started', 'go')`),
				harness.S(`INSERT INTO checkpoints (id, execution_id, task_id, git_ref) VALUES ('cp1', 'ex1', `+task11+`, 'abc')`),
			),
			Stmt: harness.S(`DELETE FROM task_lists WHERE id = 'tl1'`),
		},
	}
	// Every event type of the proto is accepted.
	for _, et := range eventTypes {
		cases = append(cases, harness.Case{
			Name:  "log entry " + et,
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO task_execution_log (execution_id, task_id, wave_number, instance_id, event_type, message, context)
				VALUES ('ex1', `+task11+`, 1, 'agent-1', ?, 'message', '{"k": 1}')`, et),
		})
	}
	return cases
}
