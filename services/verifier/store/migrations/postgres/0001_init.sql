-- Verifier schema, Postgres. The SQLite twin is ../sqlite/0001_init.sql: same tables, columns,
-- CHECK and UNIQUE constraints and indexes; keep them in step.
--
-- The Verifier owns verify history (reports and per-criterion results, for anti-thrashing and
-- regression analysis) and human sign-offs. A verification belongs to a loop, named by its
-- caller with a loop key (a feature build, an execution run, ...): an opaque text, not a foreign
-- key, since the Verifier runs on its own and services meet only through their gRPC contracts.

-- +goose Up

-- One Verify Done result (seed 002 §10.2). The same build iteration may be verified more than
-- once (a re-run, a human verdict arriving), so reports are numbered by seq within their loop and
-- iteration is the caller's data.
CREATE TABLE verify_reports (
    id                   text PRIMARY KEY CHECK (id <> ''),
    loop_key             text NOT NULL CHECK (loop_key <> ''),
    -- 1, 2, ... per loop_key in the order reports were recorded: the store takes max + 1 and the
    -- unique constraint turns a concurrent duplicate into a retry.
    seq                  integer NOT NULL CHECK (seq >= 1),
    iteration            integer NOT NULL DEFAULT 0 CHECK (iteration >= 0),
    verdict              text NOT NULL CHECK (verdict IN ('CONVERGED', 'FAILED', 'BLOCKED')),
    pass_count           integer NOT NULL DEFAULT 0 CHECK (pass_count >= 0),
    fail_count           integer NOT NULL DEFAULT 0 CHECK (fail_count >= 0),
    skip_count           integer NOT NULL DEFAULT 0 CHECK (skip_count >= 0),
    pending_human_count  integer NOT NULL DEFAULT 0 CHECK (pending_human_count >= 0),
    error_count          integer NOT NULL DEFAULT 0 CHECK (error_count >= 0),
    -- Hash of the failed criteria ids ('' when nothing failed), for repeated-failure detection.
    failure_signature    text NOT NULL DEFAULT '',
    block_reason         text,
    -- Lower-case hex SHA-256 of the done-criteria text verified against: results of different
    -- criteria are not compared.
    criteria_source_hash text NOT NULL CHECK (length(criteria_source_hash) = 64),
    -- The full report as returned (results, failures, next actions).
    report               jsonb NOT NULL CHECK (jsonb_typeof(report) = 'object'),
    created_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT verify_reports_seq_uniq UNIQUE (loop_key, seq)
);

-- The history of a loop, newest first, uses verify_reports_seq_uniq.
CREATE INDEX verify_reports_iteration_idx ON verify_reports (loop_key, iteration);
CREATE INDEX verify_reports_created_at_idx ON verify_reports (created_at);

-- The result of each criterion of a report, for regression queries by criterion id ("it passed
-- in report 3 and fails in report 5").
CREATE TABLE verify_criterion_results (
    report_id    text NOT NULL REFERENCES verify_reports (id) ON DELETE CASCADE,
    criterion_id text NOT NULL CHECK (criterion_id <> ''),
    -- Order of the criterion in the done-criteria document.
    position     integer NOT NULL CHECK (position >= 0),
    name         text NOT NULL DEFAULT '',
    tag          text NOT NULL CHECK (tag IN ('AUTO_VERIFY', 'HUMAN_VERIFY', 'TOOL_VERIFY')),
    status       text NOT NULL CHECK (status IN ('PASS', 'FAIL', 'SKIP', 'PENDING_HUMAN', 'ERROR')),
    evidence     text,
    error        text,
    duration_ms  bigint CHECK (duration_ms >= 0),
    PRIMARY KEY (report_id, criterion_id)
);

-- Failures of a criterion across reports.
CREATE INDEX verify_criterion_results_failures_idx ON verify_criterion_results (criterion_id)
    WHERE status IN ('FAIL', 'ERROR');

-- A person's sign-off on a HUMAN_VERIFY criterion of a loop. History is kept; the latest verdict
-- counts.
CREATE TABLE human_verdicts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    loop_key     text NOT NULL CHECK (loop_key <> ''),
    criterion_id text NOT NULL CHECK (criterion_id <> ''),
    pass         boolean NOT NULL,
    who          text NOT NULL CHECK (who <> ''),
    note         text NOT NULL DEFAULT '',
    -- The report that asked for it, if known.
    report_id    text REFERENCES verify_reports (id) ON DELETE SET NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- The latest verdict on a criterion of a loop.
CREATE INDEX human_verdicts_lookup_idx ON human_verdicts (loop_key, criterion_id, id DESC);

-- +goose Down

DROP TABLE human_verdicts;
DROP TABLE verify_criterion_results;
DROP TABLE verify_reports;
