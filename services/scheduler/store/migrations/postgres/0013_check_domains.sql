-- The hot tables' one-column CHECK constraints as domains (issue 17, P1 Postgres, P1b Postgres,
-- P2 Postgres). Postgres evaluates every CHECK constraint of a table on every INSERT and UPDATE of
-- a row, whatever columns the statement sets, and before that it reads each constraint's stored
-- expression again and plans it, per statement (ExecRelCheck: stringToNode of the constraint's
-- node text, then expression_planner): the five tables below carried 64 CHECKs, ≈ 42 KB of node
-- text, 14 % of the backends' CPU in perf of a fan-out. A domain's CHECK is planned once per
-- connection (the type cache) and runs only where a value is assigned to a column of that type:
-- an UPDATE of a counter checks that counter and the table's few multi-column CHECKs, not all 19.
--
-- Every rule is kept as it was: the same condition on the same column, a violation is still
-- SQLSTATE 23514 (check_violation; the schema conformance cases hold both backends to it), NULLs
-- pass as they did. The constraints over several columns stay table CHECKs, as do the primary
-- keys' non-empty rules (execution_id, wave_id, assignment_id: other tables' foreign keys
-- reference them). Query results name the base types (Postgres describes a domain column by
-- its base type), so readers see text, integer, bigint and jsonb as before.
--
-- Each ALTER TABLE holds its table's exclusive lock while Postgres rewrites the table and builds
-- its indexes again (it does for a change to a domain with a CHECK, whose rows it checks as it
-- copies them): on a database with a long execution log that takes a while, so run it when no run
-- is going. Old binaries work on the new schema (their SQL is unchanged).
--
-- No SQLite twin: SQLite compiles a table's CHECKs into each prepared statement once. Version
-- 0012 is SQLite's alone (../sqlite/0012_wave_placements.sql).

-- +goose Up

CREATE DOMAIN scheduler_assignment_kind AS text CHECK (VALUE IN ('task', 'integration'));
CREATE DOMAIN scheduler_assignment_position AS integer CHECK (VALUE >= -1);
CREATE DOMAIN scheduler_assignment_status AS text CHECK (VALUE IN ('pending', 'assigned', 'running', 'completed', 'failed', 'skipped', 'cancelled'));
CREATE DOMAIN scheduler_count AS integer CHECK (VALUE >= 0);
CREATE DOMAIN scheduler_count64 AS bigint CHECK (VALUE >= 0);
CREATE DOMAIN scheduler_exit_code AS integer CHECK (VALUE >= 0 AND VALUE <= 255);
CREATE DOMAIN scheduler_json_array AS jsonb CHECK (jsonb_typeof(VALUE) = 'array');
CREATE DOMAIN scheduler_json_object AS jsonb CHECK (jsonb_typeof(VALUE) = 'object');
CREATE DOMAIN scheduler_log_event_type AS text CHECK (VALUE IN ('task_started', 'task_completed', 'task_failed', 'task_skipped', 'checkpoint_created', 'checkpoint_restored', 'discovery_recorded', 'validation_run', 'error', 'warning', 'info', 'execution_started', 'execution_paused', 'execution_resumed', 'execution_cancelled', 'execution_completed', 'wave_started', 'wave_completed', 'lease_granted', 'lease_expired', 'task_requeued', 'integration_started', 'integration_completed', 'integration_failed', 'verification_started', 'verdict', 'agent_escalated'));
CREATE DOMAIN scheduler_nonempty_text AS text CHECK (VALUE <> '');
CREATE DOMAIN scheduler_ordinal AS integer CHECK (VALUE >= 1);
CREATE DOMAIN scheduler_ordinal64 AS bigint CHECK (VALUE >= 1);
CREATE DOMAIN scheduler_positive64 AS bigint CHECK (VALUE > 0);
CREATE DOMAIN scheduler_run_outcome AS text CHECK (VALUE IN ('converged', 'converged_pending_human', 'failed', 'blocked', 'escalated', 'cancelled'));
CREATE DOMAIN scheduler_run_status AS text CHECK (VALUE IN ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled'));
CREATE DOMAIN scheduler_run_trigger AS text CHECK (VALUE IN ('user', 'auto', 'retry', 'feature_build'));
CREATE DOMAIN scheduler_task_action AS text CHECK (VALUE IN ('CREATE', 'UPDATE', 'DELETE', 'TEST', 'RUN'));
CREATE DOMAIN scheduler_task_status AS text CHECK (VALUE IN ('pending', 'in_progress', 'completed', 'failed', 'skipped', 'blocked_dcr'));
CREATE DOMAIN scheduler_wave_status AS text CHECK (VALUE IN ('pending', 'running', 'integrating', 'completed', 'failed', 'cancelled'));

ALTER TABLE tasks
    DROP CONSTRAINT tasks_action_check,
    DROP CONSTRAINT tasks_depends_on_check,
    DROP CONSTRAINT tasks_files_check,
    DROP CONSTRAINT tasks_position_check,
    DROP CONSTRAINT tasks_requirements_check,
    DROP CONSTRAINT tasks_status_check,
    DROP CONSTRAINT tasks_steps_check,
    DROP CONSTRAINT tasks_task_key_check,
    DROP CONSTRAINT tasks_title_check,
    DROP CONSTRAINT tasks_validation_expected_exit_code_check,
    DROP CONSTRAINT tasks_validation_timeout_ms_check,
    ALTER COLUMN action TYPE scheduler_task_action,
    ALTER COLUMN depends_on TYPE scheduler_json_array,
    ALTER COLUMN files TYPE scheduler_json_array,
    ALTER COLUMN position TYPE scheduler_count,
    ALTER COLUMN requirements TYPE scheduler_json_array,
    ALTER COLUMN status TYPE scheduler_task_status,
    ALTER COLUMN steps TYPE scheduler_json_array,
    ALTER COLUMN task_key TYPE scheduler_nonempty_text,
    ALTER COLUMN title TYPE scheduler_nonempty_text,
    ALTER COLUMN validation_expected_exit_code TYPE scheduler_exit_code,
    ALTER COLUMN validation_timeout_ms TYPE scheduler_positive64;

ALTER TABLE task_list_execution_runs
    DROP CONSTRAINT task_list_execution_runs_completed_tasks_check,
    DROP CONSTRAINT task_list_execution_runs_current_wave_check,
    DROP CONSTRAINT task_list_execution_runs_detail_check,
    DROP CONSTRAINT task_list_execution_runs_failed_tasks_check,
    DROP CONSTRAINT task_list_execution_runs_feature_build_id_check,
    DROP CONSTRAINT task_list_execution_runs_last_seq_check,
    DROP CONSTRAINT task_list_execution_runs_outcome_check,
    DROP CONSTRAINT task_list_execution_runs_request_id_check,
    DROP CONSTRAINT task_list_execution_runs_run_number_check,
    DROP CONSTRAINT task_list_execution_runs_running_tasks_check,
    DROP CONSTRAINT task_list_execution_runs_skipped_tasks_check,
    DROP CONSTRAINT task_list_execution_runs_status_check,
    DROP CONSTRAINT task_list_execution_runs_total_attempts_check,
    DROP CONSTRAINT task_list_execution_runs_total_tasks_check,
    DROP CONSTRAINT task_list_execution_runs_triggered_by_check,
    DROP CONSTRAINT task_list_execution_runs_wave_count_check,
    ALTER COLUMN completed_tasks TYPE scheduler_count,
    ALTER COLUMN current_wave TYPE scheduler_count,
    ALTER COLUMN detail TYPE scheduler_json_object,
    ALTER COLUMN failed_tasks TYPE scheduler_count,
    ALTER COLUMN feature_build_id TYPE scheduler_nonempty_text,
    ALTER COLUMN last_seq TYPE scheduler_count64,
    ALTER COLUMN outcome TYPE scheduler_run_outcome,
    ALTER COLUMN request_id TYPE scheduler_nonempty_text,
    ALTER COLUMN run_number TYPE scheduler_ordinal,
    ALTER COLUMN running_tasks TYPE scheduler_count,
    ALTER COLUMN skipped_tasks TYPE scheduler_count,
    ALTER COLUMN status TYPE scheduler_run_status,
    ALTER COLUMN total_attempts TYPE scheduler_count,
    ALTER COLUMN total_tasks TYPE scheduler_count,
    ALTER COLUMN triggered_by TYPE scheduler_run_trigger,
    ALTER COLUMN wave_count TYPE scheduler_count;

ALTER TABLE parallel_execution_waves
    DROP CONSTRAINT parallel_execution_waves_active_agents_check,
    DROP CONSTRAINT parallel_execution_waves_completed_count_check,
    DROP CONSTRAINT parallel_execution_waves_detail_check,
    DROP CONSTRAINT parallel_execution_waves_failed_count_check,
    DROP CONSTRAINT parallel_execution_waves_skipped_count_check,
    DROP CONSTRAINT parallel_execution_waves_status_check,
    DROP CONSTRAINT parallel_execution_waves_task_count_check,
    DROP CONSTRAINT parallel_execution_waves_wave_number_check,
    ALTER COLUMN active_agents TYPE scheduler_count,
    ALTER COLUMN completed_count TYPE scheduler_count,
    ALTER COLUMN detail TYPE scheduler_json_object,
    ALTER COLUMN failed_count TYPE scheduler_count,
    ALTER COLUMN skipped_count TYPE scheduler_count,
    ALTER COLUMN status TYPE scheduler_wave_status,
    ALTER COLUMN task_count TYPE scheduler_count,
    ALTER COLUMN wave_number TYPE scheduler_ordinal;

ALTER TABLE wave_task_assignments
    DROP CONSTRAINT wave_task_assignments_attempt_check,
    DROP CONSTRAINT wave_task_assignments_detail_check,
    DROP CONSTRAINT wave_task_assignments_fencing_token_check,
    DROP CONSTRAINT wave_task_assignments_kind_check,
    DROP CONSTRAINT wave_task_assignments_last_report_seq_check,
    DROP CONSTRAINT wave_task_assignments_merges_check,
    DROP CONSTRAINT wave_task_assignments_position_check,
    DROP CONSTRAINT wave_task_assignments_previous_errors_check,
    DROP CONSTRAINT wave_task_assignments_ready_wave_check,
    DROP CONSTRAINT wave_task_assignments_session_id_check,
    DROP CONSTRAINT wave_task_assignments_status_check,
    DROP CONSTRAINT wave_task_assignments_task_key_check,
    DROP CONSTRAINT wave_task_assignments_unmet_deps_check,
    DROP CONSTRAINT wave_task_assignments_wave_number_check,
    ALTER COLUMN attempt TYPE scheduler_ordinal,
    ALTER COLUMN detail TYPE scheduler_json_object,
    ALTER COLUMN fencing_token TYPE scheduler_count64,
    ALTER COLUMN kind TYPE scheduler_assignment_kind,
    ALTER COLUMN last_report_seq TYPE scheduler_count64,
    ALTER COLUMN merges TYPE scheduler_json_array,
    ALTER COLUMN position TYPE scheduler_assignment_position,
    ALTER COLUMN previous_errors TYPE scheduler_json_array,
    ALTER COLUMN ready_wave TYPE scheduler_ordinal,
    ALTER COLUMN session_id TYPE scheduler_nonempty_text,
    ALTER COLUMN status TYPE scheduler_assignment_status,
    ALTER COLUMN task_key TYPE scheduler_nonempty_text,
    ALTER COLUMN unmet_deps TYPE scheduler_count,
    ALTER COLUMN wave_number TYPE scheduler_ordinal;

ALTER TABLE task_execution_log
    DROP CONSTRAINT task_execution_log_context_check,
    DROP CONSTRAINT task_execution_log_event_type_check,
    DROP CONSTRAINT task_execution_log_instance_id_check,
    DROP CONSTRAINT task_execution_log_seq_check,
    DROP CONSTRAINT task_execution_log_task_key_check,
    DROP CONSTRAINT task_execution_log_wave_number_check,
    ALTER COLUMN context TYPE scheduler_json_object,
    ALTER COLUMN event_type TYPE scheduler_log_event_type,
    ALTER COLUMN instance_id TYPE scheduler_nonempty_text,
    ALTER COLUMN seq TYPE scheduler_ordinal64,
    ALTER COLUMN task_key TYPE scheduler_nonempty_text,
    ALTER COLUMN wave_number TYPE scheduler_ordinal;

-- +goose Down

ALTER TABLE tasks
    ALTER COLUMN action TYPE text,
    ALTER COLUMN depends_on TYPE jsonb,
    ALTER COLUMN files TYPE jsonb,
    ALTER COLUMN position TYPE integer,
    ALTER COLUMN requirements TYPE jsonb,
    ALTER COLUMN status TYPE text,
    ALTER COLUMN steps TYPE jsonb,
    ALTER COLUMN task_key TYPE text,
    ALTER COLUMN title TYPE text,
    ALTER COLUMN validation_expected_exit_code TYPE integer,
    ALTER COLUMN validation_timeout_ms TYPE bigint,
    ADD CONSTRAINT tasks_action_check CHECK ((action = ANY (ARRAY['CREATE'::text, 'UPDATE'::text, 'DELETE'::text, 'TEST'::text, 'RUN'::text]))),
    ADD CONSTRAINT tasks_depends_on_check CHECK ((jsonb_typeof(depends_on) = 'array'::text)),
    ADD CONSTRAINT tasks_files_check CHECK ((jsonb_typeof(files) = 'array'::text)),
    ADD CONSTRAINT tasks_position_check CHECK (("position" >= 0)),
    ADD CONSTRAINT tasks_requirements_check CHECK ((jsonb_typeof(requirements) = 'array'::text)),
    ADD CONSTRAINT tasks_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'in_progress'::text, 'completed'::text, 'failed'::text, 'skipped'::text, 'blocked_dcr'::text]))),
    ADD CONSTRAINT tasks_steps_check CHECK ((jsonb_typeof(steps) = 'array'::text)),
    ADD CONSTRAINT tasks_task_key_check CHECK ((task_key <> ''::text)),
    ADD CONSTRAINT tasks_title_check CHECK ((title <> ''::text)),
    ADD CONSTRAINT tasks_validation_expected_exit_code_check CHECK (((validation_expected_exit_code >= 0) AND (validation_expected_exit_code <= 255))),
    ADD CONSTRAINT tasks_validation_timeout_ms_check CHECK ((validation_timeout_ms > 0));

ALTER TABLE task_list_execution_runs
    ALTER COLUMN completed_tasks TYPE integer,
    ALTER COLUMN current_wave TYPE integer,
    ALTER COLUMN detail TYPE jsonb,
    ALTER COLUMN failed_tasks TYPE integer,
    ALTER COLUMN feature_build_id TYPE text,
    ALTER COLUMN last_seq TYPE bigint,
    ALTER COLUMN outcome TYPE text,
    ALTER COLUMN request_id TYPE text,
    ALTER COLUMN run_number TYPE integer,
    ALTER COLUMN running_tasks TYPE integer,
    ALTER COLUMN skipped_tasks TYPE integer,
    ALTER COLUMN status TYPE text,
    ALTER COLUMN total_attempts TYPE integer,
    ALTER COLUMN total_tasks TYPE integer,
    ALTER COLUMN triggered_by TYPE text,
    ALTER COLUMN wave_count TYPE integer,
    ADD CONSTRAINT task_list_execution_runs_completed_tasks_check CHECK ((completed_tasks >= 0)),
    ADD CONSTRAINT task_list_execution_runs_current_wave_check CHECK ((current_wave >= 0)),
    ADD CONSTRAINT task_list_execution_runs_detail_check CHECK ((jsonb_typeof(detail) = 'object'::text)),
    ADD CONSTRAINT task_list_execution_runs_failed_tasks_check CHECK ((failed_tasks >= 0)),
    ADD CONSTRAINT task_list_execution_runs_feature_build_id_check CHECK ((feature_build_id <> ''::text)),
    ADD CONSTRAINT task_list_execution_runs_last_seq_check CHECK ((last_seq >= 0)),
    ADD CONSTRAINT task_list_execution_runs_outcome_check CHECK ((outcome = ANY (ARRAY['converged'::text, 'converged_pending_human'::text, 'failed'::text, 'blocked'::text, 'escalated'::text, 'cancelled'::text]))),
    ADD CONSTRAINT task_list_execution_runs_request_id_check CHECK ((request_id <> ''::text)),
    ADD CONSTRAINT task_list_execution_runs_run_number_check CHECK ((run_number >= 1)),
    ADD CONSTRAINT task_list_execution_runs_running_tasks_check CHECK ((running_tasks >= 0)),
    ADD CONSTRAINT task_list_execution_runs_skipped_tasks_check CHECK ((skipped_tasks >= 0)),
    ADD CONSTRAINT task_list_execution_runs_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'paused'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    ADD CONSTRAINT task_list_execution_runs_total_attempts_check CHECK ((total_attempts >= 0)),
    ADD CONSTRAINT task_list_execution_runs_total_tasks_check CHECK ((total_tasks >= 0)),
    ADD CONSTRAINT task_list_execution_runs_triggered_by_check CHECK ((triggered_by = ANY (ARRAY['user'::text, 'auto'::text, 'retry'::text, 'feature_build'::text]))),
    ADD CONSTRAINT task_list_execution_runs_wave_count_check CHECK ((wave_count >= 0));

ALTER TABLE parallel_execution_waves
    ALTER COLUMN active_agents TYPE integer,
    ALTER COLUMN completed_count TYPE integer,
    ALTER COLUMN detail TYPE jsonb,
    ALTER COLUMN failed_count TYPE integer,
    ALTER COLUMN skipped_count TYPE integer,
    ALTER COLUMN status TYPE text,
    ALTER COLUMN task_count TYPE integer,
    ALTER COLUMN wave_number TYPE integer,
    ADD CONSTRAINT parallel_execution_waves_active_agents_check CHECK ((active_agents >= 0)),
    ADD CONSTRAINT parallel_execution_waves_completed_count_check CHECK ((completed_count >= 0)),
    ADD CONSTRAINT parallel_execution_waves_detail_check CHECK ((jsonb_typeof(detail) = 'object'::text)),
    ADD CONSTRAINT parallel_execution_waves_failed_count_check CHECK ((failed_count >= 0)),
    ADD CONSTRAINT parallel_execution_waves_skipped_count_check CHECK ((skipped_count >= 0)),
    ADD CONSTRAINT parallel_execution_waves_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'integrating'::text, 'completed'::text, 'failed'::text, 'cancelled'::text]))),
    ADD CONSTRAINT parallel_execution_waves_task_count_check CHECK ((task_count >= 0)),
    ADD CONSTRAINT parallel_execution_waves_wave_number_check CHECK ((wave_number >= 1));

ALTER TABLE wave_task_assignments
    ALTER COLUMN attempt TYPE integer,
    ALTER COLUMN detail TYPE jsonb,
    ALTER COLUMN fencing_token TYPE bigint,
    ALTER COLUMN kind TYPE text,
    ALTER COLUMN last_report_seq TYPE bigint,
    ALTER COLUMN merges TYPE jsonb,
    ALTER COLUMN position TYPE integer,
    ALTER COLUMN previous_errors TYPE jsonb,
    ALTER COLUMN ready_wave TYPE integer,
    ALTER COLUMN session_id TYPE text,
    ALTER COLUMN status TYPE text,
    ALTER COLUMN task_key TYPE text,
    ALTER COLUMN unmet_deps TYPE integer,
    ALTER COLUMN wave_number TYPE integer,
    ADD CONSTRAINT wave_task_assignments_attempt_check CHECK ((attempt >= 1)),
    ADD CONSTRAINT wave_task_assignments_detail_check CHECK ((jsonb_typeof(detail) = 'object'::text)),
    ADD CONSTRAINT wave_task_assignments_fencing_token_check CHECK ((fencing_token >= 0)),
    ADD CONSTRAINT wave_task_assignments_kind_check CHECK ((kind = ANY (ARRAY['task'::text, 'integration'::text]))),
    ADD CONSTRAINT wave_task_assignments_last_report_seq_check CHECK ((last_report_seq >= 0)),
    ADD CONSTRAINT wave_task_assignments_merges_check CHECK ((jsonb_typeof(merges) = 'array'::text)),
    ADD CONSTRAINT wave_task_assignments_position_check CHECK (("position" >= '-1'::integer)),
    ADD CONSTRAINT wave_task_assignments_previous_errors_check CHECK ((jsonb_typeof(previous_errors) = 'array'::text)),
    ADD CONSTRAINT wave_task_assignments_ready_wave_check CHECK ((ready_wave >= 1)),
    ADD CONSTRAINT wave_task_assignments_session_id_check CHECK ((session_id <> ''::text)),
    ADD CONSTRAINT wave_task_assignments_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'assigned'::text, 'running'::text, 'completed'::text, 'failed'::text, 'skipped'::text, 'cancelled'::text]))),
    ADD CONSTRAINT wave_task_assignments_task_key_check CHECK ((task_key <> ''::text)),
    ADD CONSTRAINT wave_task_assignments_unmet_deps_check CHECK ((unmet_deps >= 0)),
    ADD CONSTRAINT wave_task_assignments_wave_number_check CHECK ((wave_number >= 1));

ALTER TABLE task_execution_log
    ALTER COLUMN context TYPE jsonb,
    ALTER COLUMN event_type TYPE text,
    ALTER COLUMN instance_id TYPE text,
    ALTER COLUMN seq TYPE bigint,
    ALTER COLUMN task_key TYPE text,
    ALTER COLUMN wave_number TYPE integer,
    ADD CONSTRAINT task_execution_log_context_check CHECK ((jsonb_typeof(context) = 'object'::text)),
    ADD CONSTRAINT task_execution_log_event_type_check CHECK ((event_type = ANY (ARRAY['task_started'::text, 'task_completed'::text, 'task_failed'::text, 'task_skipped'::text, 'checkpoint_created'::text, 'checkpoint_restored'::text, 'discovery_recorded'::text, 'validation_run'::text, 'error'::text, 'warning'::text, 'info'::text, 'execution_started'::text, 'execution_paused'::text, 'execution_resumed'::text, 'execution_cancelled'::text, 'execution_completed'::text, 'wave_started'::text, 'wave_completed'::text, 'lease_granted'::text, 'lease_expired'::text, 'task_requeued'::text, 'integration_started'::text, 'integration_completed'::text, 'integration_failed'::text, 'verification_started'::text, 'verdict'::text, 'agent_escalated'::text]))),
    ADD CONSTRAINT task_execution_log_instance_id_check CHECK ((instance_id <> ''::text)),
    ADD CONSTRAINT task_execution_log_seq_check CHECK ((seq >= 1)),
    ADD CONSTRAINT task_execution_log_task_key_check CHECK ((task_key <> ''::text)),
    ADD CONSTRAINT task_execution_log_wave_number_check CHECK ((wave_number >= 1));

DROP DOMAIN scheduler_assignment_kind, scheduler_assignment_position, scheduler_assignment_status, scheduler_count, scheduler_count64, scheduler_exit_code, scheduler_json_array, scheduler_json_object, scheduler_log_event_type, scheduler_nonempty_text, scheduler_ordinal, scheduler_ordinal64, scheduler_positive64, scheduler_run_outcome, scheduler_run_status, scheduler_run_trigger, scheduler_task_action, scheduler_task_status, scheduler_wave_status;
