package database_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

// TestViolationOf makes each kind of violation happen in both dialects and classifies it.
func TestViolationOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, database.NoViolation, database.ViolationOf(nil))
	require.Equal(t, database.NoViolation, database.ViolationOf(errors.New("boom")))

	forEachDialect(t, func(t *testing.T, m *migrator) {
		jsonType := map[database.Dialect]string{database.DialectPostgres: "jsonb", database.DialectSQLite: "TEXT"}[m.dialect]
		jsonCheck := map[database.Dialect]string{
			database.DialectPostgres: "CHECK (jsonb_typeof(doc) = 'object')",
			database.DialectSQLite:   "CHECK (json_valid(doc)) CHECK (NOT json_valid(doc) OR json_type(doc) = 'object')",
		}[m.dialect]
		for _, stmt := range []string{
			`CREATE TABLE parent (id integer PRIMARY KEY)`,
			fmt.Sprintf(`CREATE TABLE child (
				id integer PRIMARY KEY,
				parent_id integer REFERENCES parent (id),
				n integer NOT NULL CHECK (n >= 0),
				doc %s %s
			)`, jsonType, jsonCheck),
			`INSERT INTO parent VALUES (1)`,
			`INSERT INTO child (id, parent_id, n) VALUES (1, 1, 0)`,
		} {
			_, err := m.db.ExecContext(t.Context(), stmt)
			require.NoError(t, err, stmt)
		}
		for stmt, want := range map[string]database.Violation{
			`INSERT INTO child (id, n) VALUES (1, 0)`:                database.UniqueViolation,
			`INSERT INTO child (id, n) VALUES (2, -1)`:               database.CheckViolation,
			`INSERT INTO child (id) VALUES (2)`:                      database.NotNullViolation,
			`INSERT INTO child (id, parent_id, n) VALUES (2, 9, 0)`:  database.ForeignKeyViolation,
			`INSERT INTO child (id, n, doc) VALUES (2, 0, '{oops')`:  database.InvalidJSON,
			`INSERT INTO child (id, n, doc) VALUES (2, 0, '[1, 2]')`: database.CheckViolation,
			`SELECT * FROM no_such_table`:                            database.NoViolation,
		} {
			_, err := m.db.ExecContext(t.Context(), stmt)
			require.Error(t, err, stmt)
			require.Equal(t, want.String(), database.ViolationOf(fmt.Errorf("wrapped: %w", err)).String(), "%s: %v", stmt, err)
		}
	})
}

// TestHandles opens the service handles the stores embed.
func TestHandles(t *testing.T) {
	t.Parallel()

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		p, err := database.NewPostgres(t.Context(), dbtest.Postgres(t), "alpha", alphaV1, database.WithMigrate())
		require.NoError(t, err)
		require.Equal(t, database.DialectPostgres, p.Dialect())
		require.Equal(t, "alpha", p.Service())
		require.NoError(t, p.Ping(t.Context()))
		require.NoError(t, p.Migrate(t.Context()))
		var n int
		require.NoError(t, p.Pool().QueryRow(t.Context(), "SELECT count(*) FROM alpha_widgets").Scan(&n))
		require.Equal(t, 1, n)
		require.NoError(t, p.DB().QueryRowContext(t.Context(), "SELECT count(*) FROM alpha_gadgets").Scan(&n))
		require.NoError(t, p.Close())
		require.Error(t, p.Ping(t.Context()))
		require.NoError(t, p.Close())
	})

	t.Run("postgres down", func(t *testing.T) {
		t.Parallel()
		const url = "postgres://u@127.0.0.1:1/db?sslmode=disable"
		// Without WithMigrate a service starts, NOT_SERVING until Ping succeeds.
		p, err := database.NewPostgres(t.Context(), url, "alpha", alphaV1)
		require.NoError(t, err)
		require.Error(t, p.Ping(t.Context()))
		require.Error(t, p.Migrate(t.Context()))
		require.NoError(t, p.Close())
		// With it, there is nothing to migrate into.
		_, err = database.NewPostgres(t.Context(), url, "alpha", alphaV1, database.WithMigrate())
		require.Error(t, err)
	})

	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s, err := database.NewSQLite(t.Context(), database.SQLiteMemory, "alpha", alphaV1, database.WithMigrate())
		require.NoError(t, err)
		require.Equal(t, database.DialectSQLite, s.Dialect())
		require.Equal(t, database.SQLiteMemory, s.Path())
		st, err := s.MigrationStatus(t.Context())
		require.NoError(t, err)
		require.Len(t, st, 2)
		require.True(t, st[1].Applied)
		require.NoError(t, s.Ping(t.Context()))
		require.NoError(t, s.Close())
		require.Error(t, s.Ping(t.Context()))
		require.NoError(t, s.Close())
	})

	t.Run("invalid service", func(t *testing.T) {
		t.Parallel()
		_, err := database.NewSQLite(t.Context(), database.SQLiteMemory, "Alpha", alphaV1)
		require.ErrorContains(t, err, "invalid service name")
	})
}
