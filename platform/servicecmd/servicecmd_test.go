package servicecmd_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/fstest"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/servicecmd"
)

// migrations are two versions of a tiny schema, as a service embeds them.
var migrations = fstest.MapFS{
	"0001_items.sql":   {Data: []byte("-- +goose Up\nCREATE TABLE items (id INTEGER PRIMARY KEY);\n")},
	"0002_ordered.sql": {Data: []byte("-- +goose Up\nCREATE TABLE orders (id INTEGER PRIMARY KEY);\n")},
}

// stores opens the same service on a fresh Postgres database and a fresh SQLite file.
func stores(t *testing.T) map[string]servicecmd.Store {
	t.Helper()
	pg, err := database.NewPostgres(t.Context(), dbtest.Postgres(t), "probe", migrations)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Close() })
	lite, err := database.NewSQLite(t.Context(), dbtest.SQLite(t), "probe", migrations)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lite.Close() })
	return map[string]servicecmd.Store{"postgres": pg, "sqlite": lite}
}

// An unmigrated database keeps the service NOT_SERVING with an error that names the way out,
// and its background loops (then) do not start; --migrate applies the schema first.
func TestReadyProbeRefusesASchemaBehindTheBinary(t *testing.T) {
	t.Parallel()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			started := 0
			ready := servicecmd.ReadyProbe(st, false, func() { started++ })
			err := ready(t.Context())
			var behind *servicecmd.SchemaBehindError
			require.ErrorAs(t, err, &behind)
			require.Equal(t, []string{"0001_items.sql", "0002_ordered.sql"}, behind.Pending)
			require.ErrorContains(t, err, "--migrate")
			require.ErrorContains(t, err, "converge migrate")
			require.Zero(t, started, "no background loop before the schema is there")

			migrating := servicecmd.ReadyProbe(st, true, func() { started++ })
			require.NoError(t, migrating(t.Context()))
			require.NoError(t, migrating(t.Context()))
			require.Equal(t, 1, started, "then runs once, after the schema is current")

			// Another replica started without --migrate is now ready too.
			require.NoError(t, ready(t.Context()))
			require.Equal(t, 2, started)
		})
	}
}

// failingStore cannot be reached.
type failingStore struct{ migrations int }

func (f *failingStore) Migrate(context.Context) error {
	f.migrations++
	return errors.New("connection refused")
}
func (f *failingStore) MigrationStatus(context.Context) ([]database.MigrationStatus, error) {
	return nil, errors.New("connection refused")
}
func (f *failingStore) Ping(context.Context) error { return errors.New("connection refused") }

func TestReadyProbeRetriesAnUnreachableStore(t *testing.T) {
	t.Parallel()
	st := &failingStore{}
	ready := servicecmd.ReadyProbe(st, true)
	require.ErrorContains(t, ready(t.Context()), "migrate: connection refused")
	require.ErrorContains(t, ready(t.Context()), "migrate: connection refused")
	require.Equal(t, 2, st.migrations, "migrations are retried until the store answers")
}

func TestAllReadyJoinsFailures(t *testing.T) {
	t.Parallel()
	ok := func(context.Context) error { return nil }
	pg := func(context.Context) error { return errors.New("postgres down") }
	redis := func(context.Context) error { return errors.New("redis down") }
	require.NoError(t, servicecmd.AllReady(ok, ok)(t.Context()))
	err := servicecmd.AllReady(pg, ok, redis)(t.Context())
	require.ErrorContains(t, err, "postgres down")
	require.ErrorContains(t, err, "redis down")
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("CONVERGE_LISTEN", "127.0.0.1:9999")
	t.Setenv("CONVERGE_AUTH_TOKENS", "a, b,,c")
	t.Setenv("CONVERGE_MIGRATE", "true")
	t.Setenv("CONVERGE_POSTGRES_URL", "postgres://x@db/converge")
	var f servicecmd.Flags
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	f.Bind(cmd, "127.0.0.1:7070", servicecmd.NeedsPostgres)
	cmd.SetArgs([]string{"--auth-token", "d"})
	require.NoError(t, cmd.Execute())
	require.Equal(t, "127.0.0.1:9999", f.Listen)
	require.Equal(t, []string{"d"}, f.AuthTokens, "a flag overrides its environment variable")
	require.True(t, f.Migrate)
	require.Equal(t, "postgres://x@db/converge", f.PostgresURL)
	require.Nil(t, cmd.Flags().Lookup("redis-url"), "no Redis flag for a binary without Redis")

	cfg := f.ServerConfig("knowledge", nil)
	require.Equal(t, "127.0.0.1:9999", cfg.ListenAddr)
	require.Nil(t, cfg.TLS)
}

func TestLoggerRejectsUnknownFormatAndLevel(t *testing.T) {
	t.Parallel()
	f := servicecmd.Flags{LogFormat: "json", LogLevel: "debug"}
	_, err := f.Logger(io.Discard)
	require.NoError(t, err)
	f.LogFormat = "xml"
	_, err = f.Logger(io.Discard)
	require.ErrorContains(t, err, `--log-format "xml"`)
	f.LogFormat, f.LogLevel = "text", "loud"
	_, err = f.Logger(io.Discard)
	require.ErrorContains(t, err, `--log-level "loud"`)
}
