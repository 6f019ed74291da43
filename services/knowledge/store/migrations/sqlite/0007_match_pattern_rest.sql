-- Knowledge matching, SQLite: the twin of ../postgres/0007_match_pattern_rest.sql, which narrows
-- the Postgres match index by holding each pattern's text after its bucket prefix instead of the
-- whole pattern. Nothing changes here: SQLite can add a generated column only as VIRTUAL, and its
-- match index ends with the covered columns in the key (0006), file_pattern among them; an
-- embedded knowledge base is small enough that the index's width does not decide a query's time.

-- +goose Up

SELECT 1;

-- +goose Down

SELECT 1;
