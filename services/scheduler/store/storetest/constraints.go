package storetest

import (
	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
)

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
				triggered_by, request_id, previous_execution_id, feature_build_id, total_tasks, completed_tasks,
				failed_tasks, skipped_tasks, running_tasks, current_wave, wave_count, total_attempts, last_seq, detail,
				created_at, started_at, completed_at, updated_at)
				VALUES ('ex2', 'tl1', 2, 'failed', 'escalated', 'retry', 'req-1', 'ex1', 'fb1', 2, 1, 1, 0, 0, 2, 2, 5, 7,
				'{"runBranch": "converge/ex2", "options": {"maxParallel": 2}}', '2026-01-16T10:00:00.000Z',
				'2026-01-16T10:00:00.000Z', '2026-01-16T10:05:00.000Z', '2026-01-16T10:05:00.000Z')`),
		},
		{
			Name:  "duplicate run number of a list",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number) VALUES ('ex2', 'tl1', 1)`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "duplicate request id of a list",
			Setup: with(harness.S(`UPDATE task_list_execution_runs SET request_id = 'r1' WHERE execution_id = 'ex1'`)),
			Stmt:  harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, request_id) VALUES ('ex2', 'tl1', 2, 'r1')`),
			Want:  database.UniqueViolation,
		},
		{
			Name: "same request id in another list",
			Setup: with(
				harness.S(`UPDATE task_list_execution_runs SET request_id = 'r1' WHERE execution_id = 'ex1'`),
				harness.S(`INSERT INTO task_lists (id, name) VALUES ('tl2', 'other')`),
			),
			Stmt: harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, request_id) VALUES ('ex2', 'tl2', 1, 'r1')`),
		},
		{
			Name:  "runs without a request id",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, request_id) VALUES ('ex2', 'tl1', 2, NULL)`),
		},
		{
			Name:  "empty request id",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET request_id = '' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run with an unknown status",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'validating' WHERE execution_id = 'ex1'`),
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
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'running', outcome = 'converged' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run with an unknown outcome",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET status = 'completed', outcome = 'CONVERGED' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run with a negative count",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET failed_tasks = -1 WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run past its last wave",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET current_wave = 2 WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run with a negative last seq",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET last_seq = -1 WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "run detail not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET detail = 'x' WHERE execution_id = 'ex1'`),
			Want:  database.InvalidJSON,
		},
		{
			Name:  "run detail not an object",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET detail = '[]' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "retry of an unknown run",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, previous_execution_id) VALUES ('ex2', 'tl1', 2, 'nope')`),
			Want:  database.ForeignKeyViolation,
		},
		{
			Name:  "run of an unknown list",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number) VALUES ('ex2', 'nope', 1)`),
			Want:  database.ForeignKeyViolation,
		},

		// Waves.
		{
			Name:  "wave with every column",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, status, task_count,
				completed_count, failed_count, skipped_count, active_agents, base_commit, integration_commit,
				created_at, started_at, completed_at)
				VALUES ('w2', 'ex1', 2, 'integrating', 3, 2, 1, 0, 1, 'abc', NULL,
				'2026-01-16T10:00:00.000Z', '2026-01-16T10:00:00.000Z', NULL)`),
		},
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
			Name:  "wave with negative active agents",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE parallel_execution_waves SET active_agents = -1 WHERE wave_id = 'w1'`),
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
			Name:  "held task assignment with every column",
			Setup: fixtures,
			Stmt: assignment("a12", `kind, task_key, status, instance_id, attempt, fencing_token, lease_expires_at,
				last_report_seq, position, final_integration, previous_errors, merges, detail, created_at, assigned_at,
				completed_at, updated_at`,
				`'task', '1.2', 'running', 'agent-1', 2, 7, '2026-01-16T10:00:30.000Z', 3, 1, FALSE,
				'[{"code": "TIMEOUT", "message": "took too long"}]', '[]', '{"progressPercent": 40, "tries": 2}',
				'2026-01-16T10:00:00.000Z', '2026-01-16T10:00:00.000Z', NULL, '2026-01-16T10:00:10.000Z'`),
		},
		{
			Name:  "final integration",
			Setup: fixtures,
			Stmt: assignment("ai", `kind, position, final_integration, merges`,
				`'integration', -1, TRUE, '[{"taskId": "1.1", "commitSha": "abc", "taskRef": "refs/converge/ex1/1.1"}]'`),
		},
		{
			Name:  "held assignment without a lease",
			Setup: fixtures,
			Stmt:  assignment("a12", `kind, task_key, position, instance_id, status`, `'task', '1.2', 1, 'agent-1', 'assigned'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "held assignment without a holder",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET status = 'running', lease_expires_at = '2026-01-16T10:00:30.000Z' WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "task assignment without a task",
			Setup: fixtures,
			Stmt:  assignment("a12", `kind, position`, `'task', 1`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "integration assignment with a task",
			Setup: fixtures,
			Stmt:  assignment("ai", `kind, task_key, position`, `'integration', '1.2', -1`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "final task assignment",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET final_integration = TRUE WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment without a kind",
			Setup: fixtures,
			Stmt:  assignment("a12", `task_key, position`, `'1.2', 1`),
			Want:  database.NotNullViolation,
		},
		{
			Name:  "second integration of a wave",
			Setup: with(assignment("ai", `kind, position`, `'integration', -1`)),
			Stmt:  assignment("aj", `kind, position`, `'integration', -1`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "task assigned twice in a wave",
			Setup: fixtures,
			Stmt:  assignment("a12", `kind, task_key, position`, `'task', '1.1', 0`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "duplicate assignment id",
			Setup: fixtures,
			Stmt:  assignment("a11", `kind, task_key, position`, `'task', '1.2', 1`),
			Want:  database.UniqueViolation,
		},
		{
			Name:  "assignment with an unknown status",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET status = 'lost' WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment attempt 0",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET attempt = 0 WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment with a negative fencing token",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET fencing_token = -1 WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment with a negative count of unmet dependencies",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET unmet_deps = -1 WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment without a count of unmet dependencies",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET unmet_deps = NULL WHERE assignment_id = 'a11'`),
			Want:  database.NotNullViolation,
		},
		{
			Name:  "assignment at position -2",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET position = -2 WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment previous errors not an array",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET previous_errors = '{}' WHERE assignment_id = 'a11'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "assignment merges not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE wave_task_assignments SET merges = '[' WHERE assignment_id = 'a11'`),
			Want:  database.InvalidJSON,
		},
		{
			Name:  "assignment of an unknown wave",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id, wave_number, kind, task_key, position)
				VALUES ('a12', 'ex1', 'nope', 1, 'task', '1.2', 1)`),
			Want: database.ForeignKeyViolation,
		},

		// The execution log.
		{
			Name:  "log entry with every column",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO task_execution_log (execution_id, seq, task_key, wave_number, instance_id, event_type,
				message, context, created_at) VALUES ('ex1', 1, '1.1', 1, 'agent-1', 'task_failed', 'boom',
				'{"error": {"code": "TIMEOUT"}}', '2026-01-16T10:00:00.000Z')`),
		},
		{
			Name:  "duplicate seq of a run",
			Setup: with(logEntry(1, `task_key`, `NULL`)),
			Stmt:  logEntry(1, `task_key`, `'1.1'`),
			Want:  database.UniqueViolation,
		},
		{
			Name: "same seq in another run",
			Setup: with(
				logEntry(1, `task_key`, `NULL`),
				harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number) VALUES ('ex2', 'tl1', 2)`),
			),
			Stmt: harness.S(`INSERT INTO task_execution_log (execution_id, seq, event_type, message) VALUES ('ex2', 1, 'info', 'm')`),
		},
		{
			Name:  "log entry seq 0",
			Setup: fixtures,
			Stmt:  logEntry(0, `task_key`, `NULL`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "log entry with an unknown event type",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, seq, event_type, message) VALUES ('ex1', 1, 'task_exploded', 'boom')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "log entry context not an object",
			Setup: fixtures,
			Stmt:  logEntry(1, `context`, `'[1]'`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "log entry context not JSON",
			Setup: fixtures,
			Stmt:  logEntry(1, `context`, `'{'`),
			Want:  database.InvalidJSON,
		},
		{
			Name:  "log entry of wave 0",
			Setup: fixtures,
			Stmt:  logEntry(1, `wave_number`, `0`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "log entry without a message",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, seq, event_type) VALUES ('ex1', 1, 'info')`),
			Want:  database.NotNullViolation,
		},
		{
			Name:  "log entry of an unknown run",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO task_execution_log (execution_id, seq, event_type, message) VALUES ('nope', 1, 'info', 'm')`),
			Want:  database.ForeignKeyViolation,
		},

		// Checkpoints.
		{
			Name:  "checkpoint",
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO checkpoints (checkpoint_id, execution_id, task_key, assignment_id, attempt, instance_id,
				git_ref, files, metadata) VALUES ('cp1', 'ex1', '1.1', 'a11', 1, 'agent-1', 'abc123',
				'[{"path": "a.go", "sha256": ""}]', '{"reason": "before attempt"}')`),
		},
		{
			Name:  "checkpoint without a git ref",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO checkpoints (checkpoint_id, execution_id, git_ref) VALUES ('cp1', 'ex1', '')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "checkpoint files not JSON",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO checkpoints (checkpoint_id, execution_id, git_ref, files) VALUES ('cp1', 'ex1', 'abc', 'a.go')`),
			Want:  database.InvalidJSON,
		},
		{
			Name:  "checkpoint metadata not an object",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO checkpoints (checkpoint_id, execution_id, git_ref, metadata) VALUES ('cp1', 'ex1', 'abc', '[]')`),
			Want:  database.CheckViolation,
		},
		{
			Name:  "checkpoint of an unknown assignment",
			Setup: fixtures,
			Stmt:  harness.S(`INSERT INTO checkpoints (checkpoint_id, execution_id, assignment_id, git_ref) VALUES ('cp1', 'ex1', 'nope', 'abc')`),
			Want:  database.ForeignKeyViolation,
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
			Name:  "iteration of an unknown run",
			Setup: with(harness.S(`INSERT INTO feature_builds (id, feature, loop_key) VALUES ('fb1', 'export', 'k')`)),
			Stmt:  harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number, execution_id) VALUES ('fb1', 1, 'nope')`),
			Want:  database.ForeignKeyViolation,
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

		// Foreign keys within the service cascade from the task list down; a feature build's
		// iterations lose their run.
		{
			Name: "deleting a task list deletes what hangs off it",
			Setup: with(
				harness.S(`INSERT INTO task_file_impacts (task_id, path, kind) VALUES (`+task11+`, 'a.go', 'file')`),
				assignment("ai", `kind, position`, `'integration', -1`),
				logEntry(1, `task_key`, `'1.1'`),
				harness.S(`INSERT INTO checkpoints (checkpoint_id, execution_id, task_key, assignment_id, git_ref) VALUES ('cp1', 'ex1', '1.1', 'a11', 'abc')`),
				harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, previous_execution_id) VALUES ('ex2', 'tl1', 2, 'ex1')`),
				harness.S(`INSERT INTO feature_builds (id, feature, task_list_id, loop_key) VALUES ('fb1', 'export', 'tl1', 'k')`),
				harness.S(`INSERT INTO feature_build_iterations (feature_build_id, number, execution_id) VALUES ('fb1', 1, 'ex1')`),
			),
			Stmt: harness.S(`DELETE FROM task_lists WHERE id = 'tl1'`),
		},
	}
	// Every event type of the proto is accepted.
	for _, et := range eventTypes() {
		cases = append(cases, harness.Case{
			Name:  "log entry " + et,
			Setup: fixtures,
			Stmt: harness.S(`INSERT INTO task_execution_log (execution_id, seq, task_key, wave_number, instance_id, event_type, message, context)
				VALUES ('ex1', 1, '1.1', 1, 'agent-1', ?, 'message', '{"k": 1}')`, et),
		})
	}
	return cases
}
