// Package storetest is the conformance suite of the Verifier store: every backend of
// store.Store runs it (see ../conformance_test.go) and must pass it unchanged.
package storetest

import (
	"slices"
	"strings"
	"testing"

	"github.com/converge-dev/converge/platform/database"
	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/verifier/store"
)

// Run runs the suite against the stores newStore returns, each new, empty and migrated.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	harness.RunSchema(t, newStore, harness.SchemaSpec{
		Tables:  schema,
		Indexes: indexes,
		Cases:   constraintCases,
		SQLiteCases: []harness.Case{{
			Name: "timestamp not in canonical form",
			Stmt: harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, pass, who, created_at)
					VALUES ('k', 'U1', TRUE, 'ana', '2026-01-16T10:00:00.1Z')`),
			Want: database.CheckViolation,
		}},
	})
	t.Run("Reports", func(t *testing.T) {
		t.Parallel()
		testReports(t, newStore(t))
	})
	t.Run("Iterations", func(t *testing.T) {
		t.Parallel()
		testIterations(t, newStore(t))
	})
	t.Run("ConcurrentInserts", func(t *testing.T) {
		t.Parallel()
		testConcurrentInserts(t, newStore(t))
	})
	t.Run("ListReports", func(t *testing.T) {
		t.Parallel()
		testListReports(t, newStore(t))
	})
	t.Run("LatestReports", func(t *testing.T) {
		t.Parallel()
		testLatestReports(t, newStore(t))
	})
	t.Run("HumanVerdicts", func(t *testing.T) {
		t.Parallel()
		testHumanVerdicts(t, newStore(t))
	})
}

// indexes are the Verifier's CREATE INDEX indexes.
var indexes = map[string]harness.Index{
	"verify_reports_iteration_idx":          {Table: "verify_reports"},
	"verify_reports_created_at_idx":         {Table: "verify_reports"},
	"verify_criterion_results_failures_idx": {Table: "verify_criterion_results", Partial: true},
	"human_verdicts_lookup_idx":             {Table: "human_verdicts"},
	"verify_reports_complete_idx":           {Table: "verify_reports", Partial: true},
	"verify_reports_listing_idx":            {Table: "verify_reports"},
	"human_verdicts_public_id_idx":          {Table: "human_verdicts", Unique: true},
}

// schema is every Verifier table with exactly its columns.
var schema = harness.Schema{
	"verify_reports": {
		"id", "loop_key", "seq", "iteration", "verdict", "pass_count", "fail_count", "skip_count",
		"pending_human_count", "error_count", "failure_signature", "block_reason",
		"criteria_source_hash", "report", "created_at", "partial",
	},
	"verify_criterion_results": {
		"report_id", "criterion_id", "position", "name", "tag", "status", "evidence", "error",
		"duration_ms",
	},
	"human_verdicts": {
		"id", "loop_key", "criterion_id", "pass", "who", "note", "report_id", "created_at", "public_id",
	},
}

// criteriaHash stands for the SHA-256 of a done-criteria document.
var criteriaHash = strings.Repeat("ab", 32)

// report inserts report id of loop k with the given seq, iteration and verdict.
func report(id, seq, iteration, verdict string) harness.Stmt {
	return harness.S(`INSERT INTO verify_reports (id, loop_key, seq, iteration, verdict, criteria_source_hash, report)
		VALUES (?, 'k', `+seq+`, `+iteration+`, ?, ?, '{}')`, id, verdict, criteriaHash)
}

// result inserts the result of criterion F1 in report r1 with the given tag and status.
func result(tag, status string) harness.Stmt {
	return harness.S(`INSERT INTO verify_criterion_results (report_id, criterion_id, position, tag, status)
		VALUES ('r1', 'F1', 0, ?, ?)`, tag, status)
}

// fixtures is report r1, the first of loop k.
var fixtures = []harness.Stmt{report("r1", "1", "1", "FAILED")}

// constraintCases are the rows the Verifier schema must accept and reject, identically on every
// SQL backend.
var constraintCases = []harness.Case{
	// Reports.
	{
		Name: "report with every column",
		Stmt: harness.S(`INSERT INTO verify_reports (id, loop_key, seq, iteration, verdict, pass_count, fail_count,
			skip_count, pending_human_count, error_count, failure_signature, block_reason, criteria_source_hash,
			report, created_at)
			VALUES ('r9', 'feature:export', 1, 3, 'BLOCKED', 5, 0, 1, 1, 0, '', 'app not running', ?,
			'{"verdict": "BLOCKED", "results": []}', '2026-01-16T10:45:00.000Z')`, criteriaHash),
	},
	{
		Name:  "same iteration verified again",
		Setup: fixtures,
		Stmt:  report("r2", "2", "1", "CONVERGED"),
	},
	{
		Name:  "duplicate seq in a loop",
		Setup: fixtures,
		Stmt:  report("r2", "1", "2", "FAILED"),
		Want:  database.UniqueViolation,
	},
	{
		Name: "seq 0",
		Stmt: report("r1", "0", "1", "FAILED"),
		Want: database.CheckViolation,
	},
	{
		Name: "unknown verdict",
		Stmt: report("r1", "1", "1", "ESCALATED"),
		Want: database.CheckViolation,
	},
	{
		Name:  "negative count",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE verify_reports SET fail_count = -1 WHERE id = 'r1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "criteria hash of the wrong length",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE verify_reports SET criteria_source_hash = 'abc' WHERE id = 'r1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "report not an object",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE verify_reports SET report = '[]' WHERE id = 'r1'`),
		Want:  database.CheckViolation,
	},
	{
		Name:  "report not JSON",
		Setup: fixtures,
		Stmt:  harness.S(`UPDATE verify_reports SET report = 'CONVERGED' WHERE id = 'r1'`),
		Want:  database.InvalidJSON,
	},
	{
		Name: "report without a report",
		Stmt: harness.S(`INSERT INTO verify_reports (id, loop_key, seq, verdict, criteria_source_hash)
			VALUES ('r1', 'k', 1, 'FAILED', ?)`, criteriaHash),
		Want: database.NotNullViolation,
	},

	// Criterion results.
	{
		Name:  "criterion result with every column",
		Setup: fixtures,
		Stmt: harness.S(`INSERT INTO verify_criterion_results (report_id, criterion_id, position, name, tag, status,
			evidence, error, duration_ms)
			VALUES ('r1', 'E1', 4, 'Empty toast', 'AUTO_VERIFY', 'ERROR', 'exit 1', 'timeout', 30000)`),
	},
	{
		Name:  "pending human result",
		Setup: fixtures,
		Stmt:  result("HUMAN_VERIFY", "PENDING_HUMAN"),
	},
	{
		Name:  "unknown result status",
		Setup: fixtures,
		Stmt:  result("AUTO_VERIFY", "MAYBE"),
		Want:  database.CheckViolation,
	},
	{
		Name:  "unknown criterion tag",
		Setup: fixtures,
		Stmt:  result("EYEBALL_VERIFY", "PASS"),
		Want:  database.CheckViolation,
	},
	{
		Name:  "criterion twice in a report",
		Setup: append(slices.Clone(fixtures), result("AUTO_VERIFY", "PASS")),
		Stmt:  result("AUTO_VERIFY", "FAIL"),
		Want:  database.UniqueViolation,
	},
	{
		Name: "result of an unknown report",
		Stmt: result("AUTO_VERIFY", "PASS"),
		Want: database.ForeignKeyViolation,
	},
	{
		Name:  "deleting a report deletes its results",
		Setup: append(slices.Clone(fixtures), result("AUTO_VERIFY", "PASS")),
		Stmt:  harness.S(`DELETE FROM verify_reports WHERE id = 'r1'`),
	},

	// Human verdicts.
	{
		Name:  "human verdict with every column",
		Setup: fixtures,
		Stmt: harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, pass, who, note, report_id, created_at)
			VALUES ('k', 'U1', FALSE, 'ana', 'button is misplaced', 'r1', '2026-01-16T11:00:00.000Z')`),
	},
	{
		Name: "second verdict on a criterion",
		Setup: []harness.Stmt{harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, pass, who)
			VALUES ('k', 'U1', FALSE, 'ana')`)},
		Stmt: harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, pass, who) VALUES ('k', 'U1', TRUE, 'ana')`),
	},
	{
		Name: "human verdict without a pass",
		Stmt: harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, who) VALUES ('k', 'U1', 'ana')`),
		Want: database.NotNullViolation,
	},
	{
		Name: "anonymous human verdict",
		Stmt: harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, pass, who) VALUES ('k', 'U1', TRUE, '')`),
		Want: database.CheckViolation,
	},
	{
		Name: "deleting a report a verdict refers to",
		Setup: append(slices.Clone(fixtures), harness.S(`INSERT INTO human_verdicts (loop_key, criterion_id, pass, who, report_id)
			VALUES ('k', 'U1', TRUE, 'ana', 'r1')`)),
		Stmt: harness.S(`DELETE FROM verify_reports WHERE id = 'r1'`),
	},
}
