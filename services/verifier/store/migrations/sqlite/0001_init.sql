-- Verifier schema, SQLite. The twin of ../postgres/0001_init.sql: the same tables, columns, CHECK
-- and UNIQUE constraints and indexes, in SQLite's types (see platform/database):
--   - timestamps are TEXT in one form, RFC 3339 UTC with milliseconds, '2026-01-16T10:00:00.000Z'
--     (what strftime('%Y-%m-%dT%H:%M:%fZ', ...) writes); the CHECK "strftime(...) IS column"
--     accepts that exact form only, so text order is time order;
--   - JSON is TEXT checked by json_valid, plus the type check of the Postgres jsonb column;
--   - booleans are INTEGER 0/1, identities INTEGER PRIMARY KEY AUTOINCREMENT (ids never reused);
--   - tables are STRICT: a value of the wrong type is an error, as in Postgres.
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
    id                   TEXT PRIMARY KEY CHECK (id <> ''),
    loop_key             TEXT NOT NULL CHECK (loop_key <> ''),
    -- 1, 2, ... per loop_key in the order reports were recorded: the store takes max + 1 and the
    -- unique constraint turns a concurrent duplicate into a retry.
    seq                  INTEGER NOT NULL CHECK (seq >= 1),
    iteration            INTEGER NOT NULL DEFAULT 0 CHECK (iteration >= 0),
    verdict              TEXT NOT NULL CHECK (verdict IN ('CONVERGED', 'FAILED', 'BLOCKED')),
    pass_count           INTEGER NOT NULL DEFAULT 0 CHECK (pass_count >= 0),
    fail_count           INTEGER NOT NULL DEFAULT 0 CHECK (fail_count >= 0),
    skip_count           INTEGER NOT NULL DEFAULT 0 CHECK (skip_count >= 0),
    pending_human_count  INTEGER NOT NULL DEFAULT 0 CHECK (pending_human_count >= 0),
    error_count          INTEGER NOT NULL DEFAULT 0 CHECK (error_count >= 0),
    -- Hash of the failed criteria ids ('' when nothing failed), for repeated-failure detection.
    failure_signature    TEXT NOT NULL DEFAULT '',
    block_reason         TEXT,
    -- Lower-case hex SHA-256 of the done-criteria text verified against: results of different
    -- criteria are not compared.
    criteria_source_hash TEXT NOT NULL CHECK (length(criteria_source_hash) = 64),
    -- The full report as returned (results, failures, next actions).
    report               TEXT NOT NULL
        CHECK (json_valid(report))
        CHECK (NOT json_valid(report) OR json_type(report) = 'object'),
    created_at           TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at),
    CONSTRAINT verify_reports_seq_uniq UNIQUE (loop_key, seq)
) STRICT;

-- The history of a loop, newest first, uses verify_reports_seq_uniq.
CREATE INDEX verify_reports_iteration_idx ON verify_reports (loop_key, iteration);
CREATE INDEX verify_reports_created_at_idx ON verify_reports (created_at);

-- The result of each criterion of a report, for regression queries by criterion id ("it passed
-- in report 3 and fails in report 5").
CREATE TABLE verify_criterion_results (
    report_id    TEXT NOT NULL REFERENCES verify_reports (id) ON DELETE CASCADE,
    criterion_id TEXT NOT NULL CHECK (criterion_id <> ''),
    -- Order of the criterion in the done-criteria document.
    position     INTEGER NOT NULL CHECK (position >= 0),
    name         TEXT NOT NULL DEFAULT '',
    tag          TEXT NOT NULL CHECK (tag IN ('AUTO_VERIFY', 'HUMAN_VERIFY', 'TOOL_VERIFY')),
    status       TEXT NOT NULL CHECK (status IN ('PASS', 'FAIL', 'SKIP', 'PENDING_HUMAN', 'ERROR')),
    evidence     TEXT,
    error        TEXT,
    duration_ms  INTEGER CHECK (duration_ms >= 0),
    PRIMARY KEY (report_id, criterion_id)
) STRICT;

-- Failures of a criterion across reports.
CREATE INDEX verify_criterion_results_failures_idx ON verify_criterion_results (criterion_id)
    WHERE status IN ('FAIL', 'ERROR');

-- A person's sign-off on a HUMAN_VERIFY criterion of a loop. History is kept; the latest verdict
-- counts.
CREATE TABLE human_verdicts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    loop_key     TEXT NOT NULL CHECK (loop_key <> ''),
    criterion_id TEXT NOT NULL CHECK (criterion_id <> ''),
    pass         INTEGER NOT NULL
        CHECK (pass IN (0, 1)),
    who          TEXT NOT NULL CHECK (who <> ''),
    note         TEXT NOT NULL DEFAULT '',
    -- The report that asked for it, if known.
    report_id    TEXT REFERENCES verify_reports (id) ON DELETE SET NULL,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
        CHECK (strftime('%Y-%m-%dT%H:%M:%fZ', created_at) IS created_at)
) STRICT;

-- The latest verdict on a criterion of a loop.
CREATE INDEX human_verdicts_lookup_idx ON human_verdicts (loop_key, criterion_id, id DESC);

-- +goose Down

DROP TABLE human_verdicts;
DROP TABLE verify_criterion_results;
DROP TABLE verify_reports;
