-- The claimable index in the claims' whole order (issue 17, P1b). A strict claim reads the first
-- pending task of the execution's open wave ORDER BY position, assignment_id (NextPending, and the
-- lock's batch reading ahead, postgres/nextpending.go). On (execution_id, wave_number, position)
-- alone that order needs a sort above the index: with the statistics of a table just filled (a
-- run's assignments inserted moments before) the planner took a full Sort, which reads every
-- pending row of the wave to answer one, an O(wave) step per claim (a 1,024-task wave: 500
-- entries read per claim on average, BenchmarkFanout), and with fresh statistics an Incremental
-- Sort. With assignment_id in the index the order is the index's: an index scan that stops at the
-- first live entry, whatever the statistics. The SQLite twin is
-- ../sqlite/0011_claim_order_index.sql; keep them in step.

-- +goose Up

DROP INDEX wave_task_assignments_claimable_idx;
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (execution_id, wave_number, position, assignment_id)
    WHERE status = 'pending';

-- +goose Down

DROP INDEX wave_task_assignments_claimable_idx;
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending';
