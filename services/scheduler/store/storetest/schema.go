package storetest

import (
	"fmt"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	harness "github.com/converge-dev/converge/platform/storetest"
)

// indexes are the Scheduler's CREATE INDEX indexes.
var indexes = map[string]harness.Index{
	"task_lists_created_at_idx":               {Table: "task_lists"},
	"task_parallelism_analysis_b_idx":         {Table: "task_parallelism_analysis"},
	"task_list_execution_runs_created_at_idx": {Table: "task_list_execution_runs"},
	"idx_exec_runs_task_list":                 {Table: "task_list_execution_runs"},
	"idx_exec_runs_active":                    {Table: "task_list_execution_runs", Partial: true},
	"idx_exec_runs_feature_build":             {Table: "task_list_execution_runs", Partial: true},
	"wave_task_assignments_integration_uniq":  {Table: "wave_task_assignments", Unique: true, Partial: true},
	"idx_wave_tasks":                          {Table: "wave_task_assignments"},
	"idx_wave_tasks_instance":                 {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_claimable_idx":     {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_held_idx":          {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_lease_idx":         {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_eager_idx":         {Table: "wave_task_assignments", Partial: true},
	"wave_task_assignments_unmet_idx":         {Table: "wave_task_assignments", Partial: true},
	"idx_exec_log_task":                       {Table: "task_execution_log", Partial: true},
	"idx_exec_log_created_at":                 {Table: "task_execution_log"},
	"idx_exec_log_errors":                     {Table: "task_execution_log", Partial: true},
	"idx_checkpoints_execution":               {Table: "checkpoints"},
	"idx_checkpoints_assignment":              {Table: "checkpoints"},
	"feature_builds_active_uniq":              {Table: "feature_builds", Unique: true, Partial: true},
	"feature_builds_feature_idx":              {Table: "feature_builds"},
	"feature_builds_open_idx":                 {Table: "feature_builds", Partial: true},
	"knowledge_confirmations_due_idx":         {Table: "knowledge_confirmations"},
	"knowledge_confirmations_execution_idx":   {Table: "knowledge_confirmations"},
}

// schema is every Scheduler table with exactly its columns.
var schema = harness.Schema{
	"knowledge_confirmations": {
		"assignment_id", "execution_id", "task_id", "instance_id", "principal", "attempts", "next_attempt_at", "created_at",
	},
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
		"action_declared", "requires_signoff",
	},
	"task_file_impacts": {"id", "task_id", "path", "kind", "operation", "source"},
	"task_parallelism_analysis": {
		"task_a_id", "task_b_id", "can_parallel", "reason", "conflicting_paths", "analyzed_at",
	},
	"task_list_execution_runs": {
		"execution_id", "task_list_id", "run_number", "status", "outcome", "triggered_by",
		"request_id", "previous_execution_id", "feature_build_id", "total_tasks", "completed_tasks",
		"failed_tasks", "skipped_tasks", "running_tasks", "current_wave", "wave_count",
		"total_attempts", "last_seq", "detail", "created_at", "started_at", "completed_at",
		"updated_at",
	},
	"parallel_execution_waves": {
		"wave_id", "execution_id", "wave_number", "status", "task_count", "completed_count",
		"failed_count", "skipped_count", "active_agents", "base_commit", "integration_commit",
		"detail", "created_at", "started_at", "completed_at",
	},
	"wave_task_assignments": {
		"assignment_id", "execution_id", "wave_id", "wave_number", "kind", "task_key", "status",
		"instance_id", "attempt", "fencing_token", "lease_expires_at", "last_report_seq", "position",
		"final_integration", "previous_errors", "merges", "detail", "created_at", "assigned_at",
		"completed_at", "updated_at", "session_id", "ready_wave", "unmet_deps",
	},
	"task_execution_log": {
		"execution_id", "seq", "task_key", "wave_number", "instance_id", "event_type", "message",
		"context", "created_at", "source_time",
	},
	"checkpoints": {
		"checkpoint_id", "execution_id", "task_key", "assignment_id", "attempt", "instance_id",
		"git_ref", "files", "metadata", "created_at",
	},
	"feature_builds": {
		"id", "feature", "task_list_id", "status", "status_reason", "max_iterations",
		"current_iteration", "dry_run", "options", "criteria_summary", "repeated_failures",
		"regressions", "loop_key", "started_at", "updated_at", "completed_at",
		"build_status", "state", "done_criteria",
	},
	"feature_build_iterations": {
		"feature_build_id", "number", "execution_id", "verdict", "pass_count", "fail_count",
		"skip_count", "pending_human_count", "error_count", "failure_signature", "failed_criteria",
		"verify_report_id", "files_created", "files_modified", "recovery_log", "started_at",
		"completed_at",
	},
}

// eventTypes are the execution log's event types: every value of converge.common.v1.EventType
// but UNSPECIFIED, by the name the store writes.
func eventTypes() []string {
	var out []string
	values := commonv1.EventType(0).Descriptor().Values()
	for i := range values.Len() {
		if v := values.Get(i); v.Number() != 0 {
			out = append(out, strings.ToLower(strings.TrimPrefix(string(v.Name()), "EVENT_TYPE_")))
		}
	}
	return out
}

// fixtures is a task list tl1 with tasks 1.1 and 1.2, its run ex1, the run's wave w1 (1) and
// the wave's assignment a11 of task 1.1.
var fixtures = []harness.Stmt{
	harness.S(`INSERT INTO task_lists (id, name) VALUES ('tl1', 'list')`),
	harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '1.1', 'first', 0)`),
	harness.S(`INSERT INTO tasks (task_list_id, task_key, title, position) VALUES ('tl1', '1.2', 'second', 1)`),
	harness.S(`INSERT INTO task_list_execution_runs (execution_id, task_list_id, run_number, wave_count) VALUES ('ex1', 'tl1', 1, 1)`),
	harness.S(`INSERT INTO parallel_execution_waves (wave_id, execution_id, wave_number, task_count) VALUES ('w1', 'ex1', 1, 2)`),
	harness.S(`INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id, wave_number, kind, task_key, position)
		VALUES ('a11', 'ex1', 'w1', 1, 'task', '1.1', 0)`),
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

// assignment inserts assignment id of wave w1 (execution ex1) with the given columns and values.
func assignment(id, columns, values string) harness.Stmt {
	return harness.S(`INSERT INTO wave_task_assignments (assignment_id, execution_id, wave_id, wave_number, ` + columns +
		`) VALUES ('` + id + `', 'ex1', 'w1', 1, ` + values + `)`)
}

// logEntry inserts entry seq of ex1's log with the given columns and values.
func logEntry(seq int, columns, values string) harness.Stmt {
	return harness.S(fmt.Sprintf(`INSERT INTO task_execution_log (execution_id, seq, event_type, message, %s) VALUES ('ex1', %d, 'info', 'm', %s)`,
		columns, seq, values))
}
