-- The claimable index in the claims' whole order (issue 17, P1b), as
-- ../postgres/0011_claim_order_index.sql (which says why); keep them in step. A strict claim reads
-- the first pending task of the open wave ORDER BY position, assignment_id: on (execution_id,
-- wave_number, position) alone SQLite sorted the right part of that order in a temporary B-tree;
-- with assignment_id in the index the order is the index's.

-- +goose Up

DROP INDEX wave_task_assignments_claimable_idx;
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (execution_id, wave_number, position, assignment_id)
    WHERE status = 'pending';

-- +goose Down

DROP INDEX wave_task_assignments_claimable_idx;
CREATE INDEX wave_task_assignments_claimable_idx ON wave_task_assignments (execution_id, wave_number, position)
    WHERE status = 'pending';
