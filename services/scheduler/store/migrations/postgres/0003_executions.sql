-- Execution runs as the Scheduler's engine keeps them (store.Executions). The SQLite twin is
-- ../sqlite/0003_executions.sql; keep them in step.
--
-- 0001 created the seed's run, wave, assignment, log and checkpoint tables, which no code ever
-- wrote. They are dropped and recreated in the shape the engine needs, under the same names:
--   - each proto (converge.scheduler.v1 Execution, Wave, Assignment) is one row: the fields that
--     queries and constraints need are columns, the rest is the proto's JSON (protojson) in
--     `detail`, so a field added to a proto is stored without a migration. On read the columns
--     win over detail.
--   - enum values are the proto value names in lower case without their prefix
--     (EXECUTION_STATUS_RUNNING is 'running').
--   - an assignment has a text id made by the engine ("as_<ulid>") and names its task by key;
--     checkpoints name their assignment by that id.
--   - the log's seq counts per execution (1, 2, 3, ...): the store takes it from the run's
--     last_seq while holding the run row's lock, so it is dense and in commit order.

-- +goose Up

-- CASCADE also drops feature_build_iterations' foreign key to the runs, added back below.
DROP TABLE checkpoints, task_execution_log, wave_task_assignments, parallel_execution_waves,
    task_list_execution_runs CASCADE;

-- One execution of a task list (seed B.6). run_number counts the runs of a list. status is where
-- the run is; outcome, set when it ends, is what it achieved.
CREATE TABLE task_list_execution_runs (
    execution_id          text PRIMARY KEY CHECK (execution_id <> ''),
    task_list_id          text NOT NULL REFERENCES task_lists (id) ON DELETE CASCADE,
    run_number            integer NOT NULL CHECK (run_number >= 1),
    status                text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'paused', 'completed', 'failed', 'cancelled')),
    outcome               text CHECK (outcome IN
        ('converged', 'converged_pending_human', 'failed', 'blocked', 'escalated', 'cancelled')),
    triggered_by          text NOT NULL DEFAULT 'user'
        CHECK (triggered_by IN ('user', 'auto', 'retry', 'feature_build')),
    -- The idempotency key of StartExecution, unique per list.
    request_id            text CHECK (request_id <> ''),
    -- The ended run a retry carries completed work over from.
    previous_execution_id text REFERENCES task_list_execution_runs (execution_id) ON DELETE SET NULL,
    -- The feature build this run is an iteration of. No foreign key: the build's iterations link
    -- to their runs (feature_build_iterations.execution_id); this copy serves ListExecutions.
    feature_build_id      text CHECK (feature_build_id <> ''),
    total_tasks           integer NOT NULL DEFAULT 0 CHECK (total_tasks >= 0),
    completed_tasks       integer NOT NULL DEFAULT 0 CHECK (completed_tasks >= 0),
    failed_tasks          integer NOT NULL DEFAULT 0 CHECK (failed_tasks >= 0),
    skipped_tasks         integer NOT NULL DEFAULT 0 CHECK (skipped_tasks >= 0),
    running_tasks         integer NOT NULL DEFAULT 0 CHECK (running_tasks >= 0),
    -- The wave open now (0 before the first), of wave_count.
    current_wave          integer NOT NULL DEFAULT 0 CHECK (current_wave >= 0),
    wave_count            integer NOT NULL DEFAULT 0 CHECK (wave_count >= 0),
    -- Executor runs so far (budget max_total_attempts).
    total_attempts        integer NOT NULL DEFAULT 0 CHECK (total_attempts >= 0),
    -- Seq of the run's newest log entry; the next entry gets last_seq + 1.
    last_seq              bigint NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    -- The rest of the Execution proto: options, repository, base commit, run branch, validation
    -- results, verification, status message, escalated task and instance.
    detail                jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object'),
    created_at            timestamptz NOT NULL DEFAULT now(),
    started_at            timestamptz,
    completed_at          timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_list_execution_runs_number_uniq UNIQUE (task_list_id, run_number),
    CONSTRAINT task_list_execution_runs_request_uniq UNIQUE (task_list_id, request_id),
    -- A run has an outcome exactly when it has ended.
    CONSTRAINT task_list_execution_runs_outcome
        CHECK ((status IN ('completed', 'failed', 'cancelled')) = (outcome IS NOT NULL)),
    CONSTRAINT task_list_execution_runs_wave CHECK (current_wave <= wave_count)
);

-- ListExecutions, newest first; and of one list.
CREATE INDEX task_list_execution_runs_created_at_idx ON task_list_execution_runs (created_at DESC, execution_id DESC);
CREATE INDEX idx_exec_runs_task_list ON task_list_execution_runs (task_list_id, created_at DESC, execution_id DESC);
-- Runs that have not ended, oldest first (ClaimableExecutions, ExecutionsInStatus).
CREATE INDEX idx_exec_runs_active ON task_list_execution_runs (status, created_at, execution_id)
    WHERE status IN ('pending', 'running', 'paused');
-- Iterations of a feature build.
CREATE INDEX idx_exec_runs_feature_build ON task_list_execution_runs (feature_build_id)
    WHERE feature_build_id IS NOT NULL;

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
    -- Agents holding a lease in the wave.
    active_agents      integer NOT NULL DEFAULT 0 CHECK (active_agents >= 0),
    base_commit        text,
    integration_commit text,
    -- The rest of the Wave proto: the placements (why each task is in this wave).
    detail             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object'),
    created_at         timestamptz NOT NULL DEFAULT now(),
    started_at         timestamptz,
    completed_at       timestamptz,
    CONSTRAINT parallel_execution_waves_number_uniq UNIQUE (execution_id, wave_number)
);

-- A unit of work leased to agents (seed B.5): a task of a wave, or the wave's integration. A
-- lease that runs out requeues the row with attempt + 1; each lease gets a greater fencing token,
-- which every agent call must present, so a late holder is refused.
CREATE TABLE wave_task_assignments (
    assignment_id     text PRIMARY KEY CHECK (assignment_id <> ''),
    execution_id      text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    wave_id           text NOT NULL REFERENCES parallel_execution_waves (wave_id) ON DELETE CASCADE,
    wave_number       integer NOT NULL CHECK (wave_number >= 1),
    kind              text NOT NULL CHECK (kind IN ('task', 'integration')),
    -- The task's key in the run's list (tasks.task_key); NULL for an integration.
    task_key          text CHECK (task_key <> ''),
    status            text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'assigned', 'running', 'completed', 'failed', 'skipped', 'cancelled')),
    -- The holder, or last holder: a Registry agent instance id (no foreign key, see 0001).
    instance_id       text,
    attempt           integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    fencing_token     bigint NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
    lease_expires_at  timestamptz,
    -- The highest ReportProgress report_seq accepted for the current lease.
    last_report_seq   bigint NOT NULL DEFAULT 0 CHECK (last_report_seq >= 0),
    -- Claim order of a wave's tasks (the task's position in its list); -1 for an integration.
    position          integer NOT NULL CHECK (position >= -1),
    -- The last wave's integration, which runs every triggered validation level.
    final_integration boolean NOT NULL DEFAULT false,
    -- Errors of earlier attempts, oldest first: [ErrorContext, ...] in protojson.
    previous_errors   jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(previous_errors) = 'array'),
    -- An integration's inputs in merge order: [IntegrationInput, ...] in protojson.
    merges            jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(merges) = 'array'),
    -- The rest of the Assignment proto: progress, result, commit, task ref, error, tries, ...
    detail            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object'),
    created_at        timestamptz NOT NULL DEFAULT now(),
    assigned_at       timestamptz,
    completed_at      timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT wave_task_assignments_task_uniq UNIQUE (wave_id, task_key),
    CONSTRAINT wave_task_assignments_kind CHECK ((kind = 'task') = (task_key IS NOT NULL)),
    CONSTRAINT wave_task_assignments_final CHECK (NOT final_integration OR kind = 'integration'),
    -- A held assignment has a holder and a lease deadline.
    CONSTRAINT wave_task_assignments_lease CHECK (
        status NOT IN ('assigned', 'running') OR (instance_id IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- One integration per wave.
CREATE UNIQUE INDEX wave_task_assignments_integration_uniq ON wave_task_assignments (wave_id)
    WHERE kind = 'integration';
-- The assignments of a run in ListAssignments order.
CREATE INDEX idx_wave_tasks ON wave_task_assignments (execution_id, wave_number, kind DESC, position);
-- Assignments of an agent.
CREATE INDEX idx_wave_tasks_instance ON wave_task_assignments (instance_id)
    WHERE instance_id IS NOT NULL;
-- Claimable work of a wave, in claim order.
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending';
-- Leases to expire.
CREATE INDEX wave_task_assignments_lease_idx ON wave_task_assignments (lease_expires_at)
    WHERE status IN ('assigned', 'running');

-- The execution log (seed B.3): every step of a run is an event. seq numbers a run's entries
-- 1, 2, 3, ... in commit order; it is the stream cursor of WatchExecution.
CREATE TABLE task_execution_log (
    execution_id text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    seq          bigint NOT NULL CHECK (seq >= 1),
    task_key     text CHECK (task_key <> ''),
    wave_number  integer CHECK (wave_number >= 1),
    -- A Registry agent instance id (no foreign key, see 0001).
    instance_id  text CHECK (instance_id <> ''),
    -- The EventType value names of converge.common.v1, in lower case.
    event_type   text NOT NULL CHECK (event_type IN (
        'task_started', 'task_completed', 'task_failed', 'task_skipped',
        'checkpoint_created', 'checkpoint_restored',
        'discovery_recorded', 'validation_run',
        'error', 'warning', 'info',
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
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (execution_id, seq)
);

-- A task's entries.
CREATE INDEX idx_exec_log_task ON task_execution_log (execution_id, task_key, seq) WHERE task_key IS NOT NULL;
-- Retention.
CREATE INDEX idx_exec_log_created_at ON task_execution_log (created_at);
-- Error history (handoff context).
CREATE INDEX idx_exec_log_errors ON task_execution_log (execution_id, seq)
    WHERE event_type IN ('task_failed', 'error');

-- A checkpoint taken before a task attempt (seed B.7): the commit and the hashes of the task's
-- files, for rollback inside the attempt's worktree.
CREATE TABLE checkpoints (
    checkpoint_id text PRIMARY KEY CHECK (checkpoint_id <> ''),
    execution_id  text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_key      text CHECK (task_key <> ''),
    assignment_id text REFERENCES wave_task_assignments (assignment_id) ON DELETE CASCADE,
    attempt       integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    -- A Registry agent instance id (no foreign key, see 0001).
    instance_id   text,
    git_ref       text NOT NULL CHECK (git_ref <> ''),
    -- [FileHash, ...] in protojson: [{"path": ..., "sha256": ...}]
    files         jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(files) = 'array'),
    metadata      jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX idx_checkpoints_execution ON checkpoints (execution_id, created_at DESC);
CREATE INDEX idx_checkpoints_assignment ON checkpoints (assignment_id);

ALTER TABLE feature_build_iterations ADD CONSTRAINT feature_build_iterations_execution_id_fkey
    FOREIGN KEY (execution_id) REFERENCES task_list_execution_runs (execution_id) ON DELETE SET NULL;

-- +goose Down

DROP TABLE checkpoints, task_execution_log, wave_task_assignments, parallel_execution_waves,
    task_list_execution_runs CASCADE;

-- 0001's tables, as 0001 created them.
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
    options             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(options) = 'object'),
    run_branch          text,
    base_commit         text,
    max_parallel        integer NOT NULL DEFAULT 4 CHECK (max_parallel >= 1),
    max_retries         integer NOT NULL DEFAULT 3 CHECK (max_retries >= 0),
    max_failed_tasks    integer NOT NULL DEFAULT 3 CHECK (max_failed_tasks >= 0),
    deadline_at         timestamptz,
    total_tasks         integer NOT NULL DEFAULT 0 CHECK (total_tasks >= 0),
    completed_tasks     integer NOT NULL DEFAULT 0 CHECK (completed_tasks >= 0),
    failed_tasks        integer NOT NULL DEFAULT 0 CHECK (failed_tasks >= 0),
    skipped_tasks       integer NOT NULL DEFAULT 0 CHECK (skipped_tasks >= 0),
    verify_report_id    text,
    escalation_context  jsonb CHECK (jsonb_typeof(escalation_context) = 'object'),
    cancel_requested_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    completed_at        timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT task_list_execution_runs_number_uniq UNIQUE (task_list_id, run_number),
    CONSTRAINT task_list_execution_runs_outcome
        CHECK ((status IN ('completed', 'failed', 'cancelled')) = (outcome IS NOT NULL))
);

CREATE INDEX idx_exec_runs_active ON task_list_execution_runs (status)
    WHERE status IN ('pending', 'running', 'paused', 'validating');

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

CREATE TABLE wave_task_assignments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    wave_id          text NOT NULL REFERENCES parallel_execution_waves (wave_id) ON DELETE CASCADE,
    kind             text NOT NULL DEFAULT 'task' CHECK (kind IN ('task', 'integration')),
    task_id          bigint REFERENCES tasks (id) ON DELETE CASCADE,
    instance_id      text,
    status           text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'assigned', 'running', 'completed', 'failed', 'skipped', 'cancelled')),
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    lease_token      bigint NOT NULL DEFAULT 0 CHECK (lease_token >= 0),
    lease_expires_at timestamptz,
    commit_sha       text,
    task_ref         text,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    assigned_at      timestamptz,
    completed_at     timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT wave_task_assignments_task_uniq UNIQUE (wave_id, task_id),
    CONSTRAINT wave_task_assignments_kind CHECK ((kind = 'task') = (task_id IS NOT NULL)),
    CONSTRAINT wave_task_assignments_lease CHECK (
        status NOT IN ('assigned', 'running') OR (instance_id IS NOT NULL AND lease_expires_at IS NOT NULL))
);

CREATE UNIQUE INDEX wave_task_assignments_integration_uniq ON wave_task_assignments (wave_id)
    WHERE kind = 'integration';
CREATE INDEX idx_wave_tasks ON wave_task_assignments (wave_id, status);
CREATE INDEX idx_wave_tasks_instance ON wave_task_assignments (instance_id)
    WHERE instance_id IS NOT NULL;
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (id)
    WHERE status = 'pending';
CREATE INDEX wave_task_assignments_lease_idx ON wave_task_assignments (lease_expires_at)
    WHERE status IN ('assigned', 'running');

CREATE TABLE task_execution_log (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_id      bigint REFERENCES tasks (id) ON DELETE CASCADE,
    wave_number  integer CHECK (wave_number >= 1),
    instance_id  text,
    event_type   text NOT NULL CHECK (event_type IN (
        'task_started', 'task_completed', 'task_failed', 'task_skipped',
        'checkpoint_created', 'checkpoint_restored',
        'discovery_recorded', 'validation_run',
        'error', 'warning', 'info',
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

CREATE INDEX idx_exec_log_execution ON task_execution_log (execution_id, seq DESC);
CREATE INDEX idx_exec_log_task ON task_execution_log (task_id, seq DESC) WHERE task_id IS NOT NULL;
CREATE INDEX idx_exec_log_created_at ON task_execution_log (created_at);
CREATE INDEX idx_exec_log_errors ON task_execution_log (execution_id, seq DESC)
    WHERE event_type IN ('task_failed', 'error');

CREATE TABLE checkpoints (
    id             text PRIMARY KEY CHECK (id <> ''),
    execution_id   text NOT NULL REFERENCES task_list_execution_runs (execution_id) ON DELETE CASCADE,
    task_id        bigint NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    assignment_id  bigint REFERENCES wave_task_assignments (id) ON DELETE CASCADE,
    attempt        integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    instance_id    text,
    git_ref        text NOT NULL CHECK (git_ref <> ''),
    files_snapshot jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(files_snapshot) = 'array'),
    metadata       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    restored_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX idx_checkpoints_execution ON checkpoints (execution_id, created_at DESC);
CREATE INDEX idx_checkpoints_task ON checkpoints (task_id);

ALTER TABLE feature_build_iterations ADD CONSTRAINT feature_build_iterations_execution_id_fkey
    FOREIGN KEY (execution_id) REFERENCES task_list_execution_runs (execution_id) ON DELETE SET NULL;
