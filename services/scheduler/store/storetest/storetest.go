// Package storetest is the conformance suite of the Scheduler store: every backend of
// store.Store runs it (see ../conformance_test.go) and must pass it unchanged.
//
// One file per concern, each test a function of its own listed in its part's table: task lists
// (tasklists.go); executions, their run numbers, request ids and listing (executions.go);
// assignments, leases and sessions (assignments.go); UpdateExecution's transactions
// (transactions.go); the execution log (log.go); leadership (lead.go); the schema, its indexes
// (schema.go) and the rows it accepts and rejects (constraints.go); the knowledge confirmation
// outbox (confirmations.go); fixtures (helpers.go).
package storetest

import (
	"slices"
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
		Adjust: func(d database.Dialect, tables harness.Schema, idx map[string]harness.Index) {
			switch d {
			case database.DialectPostgres:
				// Its migration 0010: an MVCC index for the lock batch's read of an execution's
				// held assignments, which the SQLite store does not make.
				idx["wave_task_assignments_exec_held_idx"] = harness.Index{Table: "wave_task_assignments", Partial: true}
			case database.DialectSQLite:
				// Its migration 0012: a wave's placements in a table of their own.
				tables["parallel_execution_waves"] = slices.DeleteFunc(slices.Clone(tables["parallel_execution_waves"]),
					func(c string) bool { return c == "detail" })
				tables["parallel_execution_wave_placements"] = []string{"wave_id", "detail"}
			}
		},
		Cases:         constraintCases(),
		PostgresCases: postgresWaveCases,
		SQLiteCases: append(slices.Clone(sqliteWaveCases), []harness.Case{{
			Name:  "timestamp not in canonical form",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE task_list_execution_runs SET started_at = '2026-01-16 10:00:00' WHERE execution_id = 'ex1'`),
			Want:  database.CheckViolation,
		}, {
			Name:  "requires_signoff not 0 or 1",
			Setup: fixtures,
			Stmt:  harness.S(`UPDATE tasks SET requires_signoff = 2`),
			Want:  database.CheckViolation,
		}}...),
	})
	t.Run("TaskLists", func(t *testing.T) {
		t.Parallel()
		runTests(t, newStore, taskListTests)
	})
	t.Run("Executions", func(t *testing.T) {
		t.Parallel()
		runTests(t, newStore, executionTests)
	})
	t.Run("Gates", func(t *testing.T) {
		t.Parallel()
		runTests(t, newStore, gateTests)
	})
	t.Run("FeatureBuilds", func(t *testing.T) {
		t.Parallel()
		runTests(t, newStore, featureBuildTests)
	})
	t.Run("Confirmations", func(t *testing.T) {
		t.Parallel()
		runTests(t, newStore, confirmationTests)
	})
}

// test is one test of the suite: it runs on a store newStore returns (new, empty, migrated).
type test struct {
	name string
	run  func(t *testing.T, newStore func(t *testing.T) store.Store)
}

// runTests runs each test as a subtest of its name (each test runs in parallel itself).
func runTests(t *testing.T, newStore func(t *testing.T) store.Store, tests []test) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newStore) })
	}
}
