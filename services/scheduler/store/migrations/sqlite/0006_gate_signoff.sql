-- A milestone or phase gate that requires a person's sign-off (issue 15 part 9). The Postgres twin
-- is ../postgres/0006_gate_signoff.sql; keep them in step (see there for what the column is).

-- +goose Up

ALTER TABLE tasks ADD COLUMN requires_signoff INTEGER NOT NULL DEFAULT 0
    CHECK (requires_signoff IN (0, 1));

-- +goose Down

ALTER TABLE tasks DROP COLUMN requires_signoff;
