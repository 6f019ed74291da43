package storetest_test

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/storetest"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	for query, want := range map[string]string{
		`SELECT 1`:                                   `SELECT 1`,
		`INSERT INTO t (a, b) VALUES (?, ?)`:         `INSERT INTO t (a, b) VALUES ($1, $2)`,
		`SELECT '?', "a?b", ? WHERE x = 'it''s ?' `:  `SELECT '?', "a?b", $1 WHERE x = 'it''s ?' `,
		`UPDATE t SET doc = '{"a": "?"}' WHERE id=?`: `UPDATE t SET doc = '{"a": "?"}' WHERE id=$1`,
	} {
		require.Equal(t, want, storetest.Rebind(database.DialectPostgres, query))
		require.Equal(t, query, storetest.Rebind(database.DialectSQLite, query))
	}
}

// toyStore is the smallest SQL-backed store: a handle on a database with one table.
type toyStore interface {
	storetest.Pinger
}

var toyMigrations = fstest.MapFS{
	"0001_init.sql": {Data: []byte(`-- +goose Up
CREATE TABLE toys (
    name  text PRIMARY KEY,
    color text NOT NULL CHECK (color IN ('red', 'blue'))
);
CREATE INDEX toys_color_idx ON toys (color) WHERE color = 'red';
-- +goose Down
DROP TABLE toys;
`)},
}

// TestHarness runs a small suite through the harness against both SQL backends.
func TestHarness(t *testing.T) {
	t.Parallel()
	backends := []storetest.Backend[toyStore]{
		storetest.PostgresBackend(func(ctx context.Context, url string) (toyStore, error) {
			return database.NewPostgres(ctx, url, "toy", toyMigrations, database.WithMigrate())
		}),
		storetest.SQLiteBackend(func(ctx context.Context, path string) (toyStore, error) {
			return database.NewSQLite(ctx, path, "toy", toyMigrations, database.WithMigrate())
		}),
	}
	var (
		mu  sync.Mutex
		ran []string
	)
	storetest.Run(t, backends, func(t *testing.T, newStore func(t *testing.T) toyStore) {
		mu.Lock()
		ran = append(ran, t.Name())
		mu.Unlock()
		storetest.RequirePingAndClose(t, newStore)

		s := storetest.RequireSQL(t, newStore(t))
		storetest.RequireMigrated(t, s)
		storetest.RequireSchema(t, s, storetest.Schema{"toys": {"name", "color"}})
		storetest.RequireIndexes(t, s, map[string]storetest.Index{"toys_color_idx": {Table: "toys", Partial: true}})
		storetest.RunCases(t, s, []storetest.Case{
			{Name: "red toy", Stmt: storetest.S(`INSERT INTO toys VALUES (?, ?)`, "car", "red")},
			{
				Name:  "same toy twice",
				Setup: []storetest.Stmt{storetest.S(`INSERT INTO toys VALUES ('car', 'red')`)},
				Stmt:  storetest.S(`INSERT INTO toys VALUES ('car', 'blue')`),
				Want:  database.UniqueViolation,
			},
			{Name: "green toy", Stmt: storetest.S(`INSERT INTO toys VALUES ('car', 'green')`), Want: database.CheckViolation},
			{Name: "colorless toy", Stmt: storetest.S(`INSERT INTO toys (name) VALUES ('car')`), Want: database.NotNullViolation},
		})
		// Each case ran in a transaction that was rolled back.
		var n int
		require.NoError(t, s.DB().QueryRowContext(t.Context(), "SELECT count(*) FROM toys").Scan(&n))
		require.Zero(t, n)
	})
	t.Cleanup(func() { require.ElementsMatch(t, []string{"TestHarness/postgres", "TestHarness/sqlite"}, ran) })
}
