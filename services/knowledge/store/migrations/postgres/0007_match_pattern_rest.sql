-- Knowledge matching, Postgres: a narrower match index. The SQLite twin is
-- ../sqlite/0007_match_pattern_rest.sql.
--
-- knowledge_items_match_idx carried each item's file_pattern beside the key's
-- pattern_literal_prefix, and the prefix is most of the pattern: the whole of a literal path's
-- ("src/app/main.go"), all but the glob of a directory's ("src/app/*.go"). At 1,000,000 items the
-- index was 151 MB (the default shared_buffers is 128 MB) and the candidates of a query read
-- ~20 of its pages from outside shared buffers. pattern_rest is the pattern after its prefix
-- ("", "*.go"), so the index holds the prefix once, and the store joins them again
-- (store.PatternRest, store.JoinPattern). In a bucket "**/<name>/" the patterns do not all begin
-- with the prefix ("Makefile" and "**/Makefile" are both in "**/Makefile/"): there, and in the
-- bucket "", the rest is the whole pattern. NULL (a prefix that does not begin the pattern) is
-- never stored by the store; reading it is an error, not a wrong pattern.
-- The covered columns are ordered fixed-width first, so that no padding aligns confidence.
--
-- The column is generated, so every writer (a replica of the previous release included) keeps
-- it right; adding it rewrites the table once.

-- +goose Up

ALTER TABLE knowledge_items ADD COLUMN pattern_rest text GENERATED ALWAYS AS (
    CASE
        WHEN starts_with(pattern_literal_prefix, '**/') THEN file_pattern
        WHEN starts_with(file_pattern, pattern_literal_prefix)
            THEN substr(file_pattern, length(pattern_literal_prefix) + 1)
    END) STORED;

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (confidence, confirm_count, refute_count, type, pattern_rest);

-- +goose Down

DROP INDEX knowledge_items_match_idx;
CREATE INDEX knowledge_items_match_idx ON knowledge_items (project, pattern_literal_prefix, pattern_extension,
    decay_rank DESC, pattern_specificity DESC, last_confirmed_at DESC, id DESC)
    INCLUDE (type, file_pattern, confidence, confirm_count, refute_count);
ALTER TABLE knowledge_items DROP COLUMN pattern_rest;
