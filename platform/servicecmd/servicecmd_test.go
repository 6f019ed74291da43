package servicecmd_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/servicecmd"
)

// fakeStore is a store whose answers the test sets; it counts migrations.
type fakeStore struct {
	migrateErr, pingErr error
	migrations          int
}

func (f *fakeStore) Migrate(context.Context) error { f.migrations++; return f.migrateErr }
func (f *fakeStore) Ping(context.Context) error    { return f.pingErr }

func TestReadyProbeMigratesOnceWhenAsked(t *testing.T) {
	t.Parallel()
	st := &fakeStore{migrateErr: errors.New("connection refused")}
	ready := servicecmd.ReadyProbe(st, true)
	require.ErrorContains(t, ready(t.Context()), "migrate: connection refused")
	st.migrateErr = nil
	require.NoError(t, ready(t.Context()))
	require.NoError(t, ready(t.Context()))
	require.Equal(t, 2, st.migrations, "migrations retried until they succeed, then never again")

	st.pingErr = errors.New("gone")
	require.ErrorContains(t, ready(t.Context()), "gone")

	plain := &fakeStore{}
	require.NoError(t, servicecmd.ReadyProbe(plain, false)(t.Context()))
	require.Zero(t, plain.migrations)
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
