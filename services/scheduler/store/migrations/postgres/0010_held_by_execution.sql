-- An execution's held assignments through an index of only them (issue 17, P1b). The lock's
-- batch of every transaction about an assignment reads the execution's other held assignments
-- (postgres/readahead.go, heldWhere) and counts them (postgres/nextpending.go). With no index on
-- (execution_id) of held rows alone, Postgres answered with a BitmapAnd of idx_wave_tasks (every
-- assignment of the execution) and wave_task_assignments_held_idx (every held row of every
-- execution, and every dead index entry of the rows held before: a bitmap scan never marks them
-- dead), then visited the heap pages of the result: at the end of a 10,000-task fan-out, 24,607 +
-- 10,000 index entries and 433 heap pages for each of the two reads, twice per task, an O(tasks)
-- step per completion that made Postgres's CPU per task grow with the run. This index holds only
-- what is held now: the reads' plain index scans mark the entries of rows no longer held dead
-- and skip them, and btree's bottom-up deletion removes them. No SQLite twin: the SQLite store
-- has no such read (its transactions read the rows they are given).

-- +goose Up

CREATE INDEX wave_task_assignments_exec_held_idx ON wave_task_assignments (execution_id, assignment_id)
    WHERE status IN ('assigned', 'running');

-- +goose Down

DROP INDEX wave_task_assignments_exec_held_idx;
