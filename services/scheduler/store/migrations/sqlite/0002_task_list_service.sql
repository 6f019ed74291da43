-- Task lists as the Scheduler's RPCs serve them (issue #5). The twin of
-- ../postgres/0002_task_list_service.sql, in SQLite's types (see 0001_init.sql).

-- +goose Up

-- The name folded to lower case by the server (Unicode-aware, the same on every backend), for
-- ListTaskLists' case-insensitive name_contains.
ALTER TABLE task_lists ADD COLUMN name_folded TEXT NOT NULL DEFAULT '';

-- Whether the list gave the task's action. When it did not, action holds the column's default
-- and the agents infer CREATE or UPDATE from whether the main file exists at the base ref.
ALTER TABLE tasks ADD COLUMN action_declared INTEGER NOT NULL DEFAULT 1
    CHECK (action_declared IN (0, 1));

-- +goose Down

ALTER TABLE tasks DROP COLUMN action_declared;
ALTER TABLE task_lists DROP COLUMN name_folded;
