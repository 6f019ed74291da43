-- Scheduler schema, Postgres. The SQLite twin is ../sqlite/0001_init.sql: same tables, columns,
-- CHECK and UNIQUE constraints and indexes; keep them in step.
--
-- The Scheduler owns task lists, wave planning, execution runs, waves, assignments and their
-- leases, the execution log and the build-feature loop. Columns that name another service's
-- objects (agent instance ids of the Registry, verify report ids of the Verifier) are plain text
-- without a foreign key: each service has its own tables, possibly in its own database, and
-- services meet only through their gRPC contracts.

-- +goose Up

-- A task list: the tasks of one build plus what the agents need to run them (seed task_lists_v2).
CREATE TABLE task_lists (
    id                text PRIMARY KEY CHECK (id <> ''),
    name              text NOT NULL CHECK (name <> ''),
    description       text NOT NULL DEFAULT '',
    -- Where the list came from, for write-back of task status (tasks.md) and for display.
    source_format     text NOT NULL DEFAULT 'inline'
        CHECK (source_format IN ('inline', 'json', 'yaml', 'tasks_md', 'execution_plan')),
    source_path       text,
    -- The repository the tasks change: a URL or a local path, or neither for pure command DAGs
    -- (each task then runs in a scratch directory).
    repository_url    text,
    repository_path   text,
    base_ref          text,
    -- Files loaded in the Prime phase: conventions (CLAUDE.md, AGENTS.md), spec, tasks file and
    -- idea context, all repository-relative.
    conventions_files jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(conventions_files) = 'array'),
    spec_file         text,
    tasks_file        text,
    context_files     jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(context_files) = 'array'),
    -- Validation levels run after the last wave: [{"level": "codebase", "command": ...}, ...].
    validation_levels jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(validation_levels) = 'array'),
    -- The done-criteria document the Verifier checks the run against.
    done_criteria     text NOT NULL DEFAULT '',
    metadata          jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_lists_one_repository CHECK (repository_url IS NULL OR repository_path IS NULL)
);

CREATE INDEX task_lists_created_at_idx ON task_lists (created_at DESC, id DESC);

-- A task of a list. task_key is the id users write ("1.2", "db-migrate"), unique within its
-- list; id is the surrogate key other tables reference.
CREATE TABLE tasks (
    id                            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_list_id                  text NOT NULL REFERENCES task_lists (id) ON DELETE CASCADE,
    task_key                      text NOT NULL CHECK (task_key <> ''),
    title                         text NOT NULL CHECK (title <> ''),
    description                   text NOT NULL DEFAULT '',
    action                        text NOT NULL DEFAULT 'CREATE'
        CHECK (action IN ('CREATE', 'UPDATE', 'DELETE', 'TEST', 'RUN')),
    -- The main target file, repository-relative; NULL for tasks without one.
    file                          text,
    -- Declared file impacts as given, [{"path", "kind", "operation"}]; normalized into
    -- task_file_impacts.
    files                         jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(files) = 'array'),
    -- Keys of the tasks of the same list this one depends on.
    depends_on                    jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(depends_on) = 'array'),
    -- Phase, e.g. "database": a failed task of a critical phase stops the run.
    phase                         text NOT NULL DEFAULT '',
    priority                      integer NOT NULL DEFAULT 0,
    requirements                  jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(requirements) = 'array'),
    steps                         jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(steps) = 'array'),
    -- Shell command of RUN tasks.
    command                       text,
    code_template                 text,
    validation_command            text,
    validation_expected           text,
    validation_expected_exit_code integer NOT NULL DEFAULT 0
        CHECK (validation_expected_exit_code BETWEEN 0 AND 255),
    validation_timeout_ms         bigint CHECK (validation_timeout_ms > 0),
    -- Order of the task in its list (file order for tasks.md).
    position                      integer NOT NULL CHECK (position >= 0),
    status                        text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'in_progress', 'completed', 'failed', 'skipped', 'blocked_dcr')),
    created_at                    timestamptz NOT NULL DEFAULT now(),
    updated_at                    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tasks_key_uniq UNIQUE (task_list_id, task_key),
    CONSTRAINT tasks_position_uniq UNIQUE (task_list_id, position)
);

-- What a task touches, one row per path (seed 070): the wave planner never puts two tasks with
-- overlapping impacts in one wave.
CREATE TABLE task_file_impacts (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id   bigint NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    path      text NOT NULL CHECK (path <> ''),
    kind      text NOT NULL CHECK (kind IN ('file', 'glob', 'directory')),
    operation text NOT NULL DEFAULT 'update' CHECK (operation IN ('create', 'update', 'delete', 'read')),
    -- declared by the task list, or inferred (e.g. from the task's main file).
    source    text NOT NULL DEFAULT 'declared' CHECK (source IN ('declared', 'inferred')),
    CONSTRAINT task_file_impacts_uniq UNIQUE (task_id, kind, path)
);

-- Cache of the pairwise "can these two tasks run in parallel" analysis (seed 071). A pair is
-- stored once, smaller task id first.
CREATE TABLE task_parallelism_analysis (
    task_a_id         bigint NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    task_b_id         bigint NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    can_parallel      boolean NOT NULL,
    reason            text NOT NULL DEFAULT '',
    conflicting_paths jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(conflicting_paths) = 'array'),
    analyzed_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_a_id, task_b_id),
    CONSTRAINT task_parallelism_analysis_ordered CHECK (task_a_id < task_b_id)
);

CREATE INDEX task_parallelism_analysis_b_idx ON task_parallelism_analysis (task_b_id);

-- One execution of a task list (seed B.6). run_number counts the runs of a list. status is where
-- the run is; outcome, set when it ends, is what it achieved.
CREATE TABLE task_list_execution_runs (
    execution_id        text PRIMARY KEY CHECK (execution_id <> ''),
    task_list_id        text NOT NULL REFERENCES task_lists (id) ON DELETE CASCADE,
    run_number          integer NOT NULL CHECK (run_number >= 1),
    status              text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'paused', 'validating', 'completed', 'failed', 'cancelled')),
    outcome             text CHECK (outcome IN
        ('CONVERGED', 'CONVERGED_PENDING_HUMAN', 'FAILED', 'BLOCKED', 'ESCALATED', 'CANCELLED')),
    status_reason       text NOT NULL DEFAULT '',
    triggered_by        text NOT NULL DEFAULT 'user'
        CHECK (triggered_by IN ('user', 'auto', 'retry', 'feature_build')),
    -- StartExecution options as given (executor, dry run, ...).
    options             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    -- converge/<execution>, the branch the waves are integrated onto.
    run_branch          text,
    base_commit         text,
    -- Budgets and stop rules.
    max_parallel        integer NOT NULL DEFAULT 4 CHECK (max_parallel >= 1),
    max_retries         integer NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    max_failed_tasks    integer NOT NULL DEFAULT 3 CHECK (max_failed_tasks >= 0),
    deadline_at         timestamptz,
    total_tasks         integer NOT NULL DEFAULT 0 CHECK (total_tasks >= 0),
    completed_tasks     integer NOT NULL DEFAULT 0 CHECK (completed_tasks >= 0),
    failed_tasks        integer NOT NULL DEFAULT 0 CHECK (failed_tasks >= 0),
    skipped_tasks       integer NOT NULL DEFAULT 0 CHECK (skipped_tasks >= 0),
    -- The Verifier's report for the final verdict (a Verifier id: no foreign key).
    verify_report_id    text,
    -- Handoff context of an escalated run (error history, log tail, ...).
    escalation_context  jsonb CHECK (jsonb_typeof(escalation_context) = 'object'),
    -- Durable stop signal, seen by the scheduler loop and the agents.
    cancel_requested_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    completed_at        timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_list_execution_runs_number_uniq UNIQUE (task_list_id, run_number),
    -- A run has an outcome exactly when it has ended.
    CONSTRAINT task_list_execution_runs_outcome
        CHECK ((status IN ('completed', 'failed', 'cancelled')) = (outcome IS NOT NULL))
);

-- The runs of a list, newest first, use task_list_execution_runs_number_uniq.
CREATE INDEX idx_exec_runs_active ON task_list_execution_runs (status)
    WHERE status IN ('pending', 'running', 'paused', 'validating');

-- A wave of a run (seed B.4): tasks that run in parallel, from base_commit; their commits are
-- merged into integration_commit, the next wave's base.
CREATE TABLE parallel_execution_waves (
    wave_id            text PRIMARY KEY CHECK (wave_id <> ''),
    execution_id       text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    wave_number        integer NOT NULL CHECK (wave_number >= 1),
    status             text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'integrating', 'completed', 'failed', 'cancelled')),
    task_count         integer NOT NULL CHECK (task_count >= 0),
    completed_count    integer NOT NULL DEFAULT 0 CHECK (completed_count >= 0),
    failed_count       integer NOT NULL DEFAULT 0 CHECK (failed_count >= 0),
    skipped_count      integer NOT NULL DEFAULT 0 CHECK (skipped_count >= 0),
    base_commit        text,
    integration_commit text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    completed_at       timestamptz,
    CONSTRAINT parallel_execution_waves_number_uniq UNIQUE (execution_id, wave_number)
);

CREATE INDEX idx_waves_active ON parallel_execution_waves (execution_id, status)
    WHERE status IN ('pending', 'running', 'integrating');

-- A unit of work handed to an agent (seed B.5): a task of a wave, or the wave's integration.
-- A lease that runs out requeues the row with attempt + 1 and a new lease_token; the token is
-- the fencing token that CompleteTask must present, so a late holder is refused.
CREATE TABLE wave_task_assignments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    wave_id          text NOT NULL REFERENCES parallel_execution_waves (wave_id) ON DELETE CASCADE,
    kind             text NOT NULL DEFAULT 'task' CHECK (kind IN ('task', 'integration')),
    task_id          bigint REFERENCES tasks (id) ON DELETE CASCADE,
    -- The holder: a Registry agent instance id (no foreign key, see the top of this file).
    instance_id      text,
    status           text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'assigned', 'running', 'completed', 'failed', 'skipped', 'cancelled')),
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    lease_token      bigint NOT NULL DEFAULT 0 CHECK (lease_token >= 0),
    lease_expires_at timestamptz,
    -- Result: the commit and the ref it was pushed to (refs/converge/<execution>/<task>).
    commit_sha       text,
    task_ref         text,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    assigned_at      timestamptz,
    completed_at     timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT wave_task_assignments_task_uniq UNIQUE (wave_id, task_id),
    CONSTRAINT wave_task_assignments_kind CHECK ((kind = 'task') = (task_id IS NOT NULL)),
    -- A held assignment has a holder and a lease deadline.
    CONSTRAINT wave_task_assignments_lease CHECK (
        status NOT IN ('assigned', 'running') OR (instance_id IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- One integration per wave.
CREATE UNIQUE INDEX wave_task_assignments_integration_uniq ON wave_task_assignments (wave_id)
    WHERE kind = 'integration';
-- Tasks of a wave by status.
CREATE INDEX idx_wave_tasks ON wave_task_assignments (wave_id, status);
-- Assignments of an agent.
CREATE INDEX idx_wave_tasks_instance ON wave_task_assignments (instance_id)
    WHERE instance_id IS NOT NULL;
-- Claimable work, oldest first.
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (id)
    WHERE status = 'pending';
-- Leases to expire.
CREATE INDEX wave_task_assignments_lease_idx ON wave_task_assignments (lease_expires_at)
    WHERE status IN ('assigned', 'running');

-- The execution log (seed B.3): every step of a run is an event. seq is the stream cursor of
-- WatchExecution. Identity values are handed out at insert, not at commit, so writers of one
-- execution must serialize (e.g. lock the run row) for a reader resuming after seq N never to
-- miss a row committed late with a smaller seq.
CREATE TABLE task_execution_log (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_id      bigint REFERENCES tasks (id) ON DELETE CASCADE,
    wave_number  integer CHECK (wave_number >= 1),
    -- A Registry agent instance id (no foreign key, see the top of this file).
    instance_id  text,
    event_type   text NOT NULL CHECK (event_type IN (
        -- the seed's
        'task_started', 'task_completed', 'task_failed', 'task_skipped',
        'checkpoint_created', 'checkpoint_restored',
        'discovery_recorded', 'validation_run',
        'error', 'warning', 'info',
        -- converge's
        'execution_started', 'execution_paused', 'execution_resumed', 'execution_cancelled',
        'execution_completed',
        'wave_started', 'wave_completed',
        'lease_granted', 'lease_expired', 'task_requeued',
        'integration_started', 'integration_completed', 'integration_failed',
        'verification_started', 'verdict',
        'agent_escalated'
    )),
    message      text NOT NULL,
    context      jsonb CHECK (jsonb_typeof(context) = 'object'),
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The log of an execution, newest first (the last 500 entries of a handoff) or from a cursor.
CREATE INDEX idx_exec_log_execution ON task_execution_log (execution_id, seq DESC);
CREATE INDEX idx_exec_log_task ON task_execution_log (task_id, seq DESC) WHERE task_id IS NOT NULL;
-- Retention.
CREATE INDEX idx_exec_log_created_at ON task_execution_log (created_at);
-- Error history.
CREATE INDEX idx_exec_log_errors ON task_execution_log (execution_id, seq DESC)
    WHERE event_type IN ('task_failed', 'error');

-- A checkpoint taken before a task attempt (seed B.7): the commit and the hashes of the task's
-- files, for rollback inside the attempt's worktree.
CREATE TABLE checkpoints (
    id             text PRIMARY KEY CHECK (id <> ''),
    execution_id   text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_id        bigint NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    assignment_id  bigint REFERENCES wave_task_assignments (id) ON DELETE CASCADE,
    attempt        integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    -- A Registry agent instance id (no foreign key, see the top of this file).
    instance_id    text,
    git_ref        text NOT NULL CHECK (git_ref <> ''),
    -- [{"path": ..., "sha256": ...}]
    files_snapshot jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(files_snapshot) = 'array'),
    metadata       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    restored_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX idx_checkpoints_execution ON checkpoints (execution_id, created_at DESC);
CREATE INDEX idx_checkpoints_task ON checkpoints (task_id);

-- The build-feature loop (seed 002 §16.2 build-state.json): build, verify, decide, up to
-- max_iterations. Resumable: the state lives here, not in the process.
CREATE TABLE feature_builds (
    id                text PRIMARY KEY CHECK (id <> ''),
    feature           text NOT NULL CHECK (feature <> ''),
    task_list_id      text REFERENCES task_lists (id) ON DELETE SET NULL,
    status            text NOT NULL DEFAULT 'IN_PROGRESS' CHECK (status IN
        ('IN_PROGRESS', 'CONVERGED', 'CONVERGED_PENDING_HUMAN', 'BLOCKED', 'ESCALATED', 'CANCELLED')),
    status_reason     text NOT NULL DEFAULT '',
    max_iterations    integer NOT NULL DEFAULT 5 CHECK (max_iterations BETWEEN 1 AND 100),
    current_iteration integer NOT NULL DEFAULT 0 CHECK (current_iteration >= 0),
    dry_run           boolean NOT NULL DEFAULT false,
    -- Autonomy level, scope guards, ... as given.
    options           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    -- {"total", "autoVerify", "humanVerify", "passing", "failing", "pending"}
    criteria_summary  jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(criteria_summary) = 'object'),
    -- Anti-thrashing counters.
    repeated_failures integer NOT NULL DEFAULT 0 CHECK (repeated_failures >= 0),
    regressions       integer NOT NULL DEFAULT 0 CHECK (regressions >= 0),
    -- The key of this build's verify history in the Verifier (no foreign key).
    loop_key          text NOT NULL CHECK (loop_key <> ''),
    started_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    CONSTRAINT feature_builds_iterations CHECK (current_iteration <= max_iterations)
);

-- At most one build of a feature in progress.
CREATE UNIQUE INDEX feature_builds_active_uniq ON feature_builds (feature) WHERE status = 'IN_PROGRESS';
CREATE INDEX feature_builds_feature_idx ON feature_builds (feature, started_at DESC);

-- One build → verify → decide iteration of a feature build.
CREATE TABLE feature_build_iterations (
    feature_build_id    text NOT NULL REFERENCES feature_builds (id) ON DELETE CASCADE,
    number              integer NOT NULL CHECK (number >= 1),
    -- The execution run that built this iteration, if any.
    execution_id        text REFERENCES task_list_execution_runs (execution_id) ON DELETE SET NULL,
    -- NULL until verified.
    verdict             text CHECK (verdict IN ('CONVERGED', 'FAILED', 'BLOCKED')),
    pass_count          integer NOT NULL DEFAULT 0 CHECK (pass_count >= 0),
    fail_count          integer NOT NULL DEFAULT 0 CHECK (fail_count >= 0),
    skip_count          integer NOT NULL DEFAULT 0 CHECK (skip_count >= 0),
    pending_human_count integer NOT NULL DEFAULT 0 CHECK (pending_human_count >= 0),
    error_count         integer NOT NULL DEFAULT 0 CHECK (error_count >= 0),
    -- Hash of the failed criteria ids, for repeated-failure detection.
    failure_signature   text,
    failed_criteria     jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(failed_criteria) = 'array'),
    -- The Verifier's report id (no foreign key).
    verify_report_id    text,
    files_created       jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(files_created) = 'array'),
    files_modified      jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(files_modified) = 'array'),
    -- Recovery actions taken: [{"time", "issue", "action", "result"}].
    recovery_log        jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(recovery_log) = 'array'),
    started_at          timestamptz NOT NULL DEFAULT now(),
    completed_at        timestamptz,
    PRIMARY KEY (feature_build_id, number)
);

-- +goose Down

DROP TABLE feature_build_iterations;
DROP TABLE feature_builds;
DROP TABLE checkpoints;
DROP TABLE task_execution_log;
DROP TABLE wave_task_assignments;
DROP TABLE parallel_execution_waves;
DROP TABLE task_list_execution_runs;
DROP TABLE task_parallelism_analysis;
DROP TABLE task_file_impacts;
DROP TABLE tasks;
DROP TABLE task_lists;
