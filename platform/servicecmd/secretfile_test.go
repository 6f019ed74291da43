package servicecmd_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/servicecmd"
)

// Secret settings are read from the files their _FILE variables name, so that they stay out of
// the process's environment; the command line still wins, and a variable set both ways is an
// error.
func TestSecretsFromFiles(t *testing.T) {
	dir := t.TempDir()
	pg, tokens := filepath.Join(dir, "pg"), filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(pg, []byte("postgres://u:pw@db/converge\n"), 0o600))
	require.NoError(t, os.WriteFile(tokens, []byte("tok-a\ntok-b, tok-c\n\n"), 0o600))
	t.Setenv("CONVERGE_POSTGRES_URL_FILE", pg)
	t.Setenv("CONVERGE_AUTH_TOKENS_FILE", tokens)
	run := func(args ...string) (servicecmd.Flags, error) {
		var f servicecmd.Flags
		cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error { return servicecmd.SecretsFromFiles(cmd) }}
		f.Bind(cmd, "127.0.0.1:7070", servicecmd.NeedsPostgres)
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		return f, cmd.Execute()
	}
	f, err := run()
	require.NoError(t, err)
	require.Equal(t, "postgres://u:pw@db/converge", f.PostgresURL)
	require.Equal(t, []string{"tok-a", "tok-b", "tok-c"}, f.AuthTokens)

	f, err = run("--postgres-url", "postgres://flag/x")
	require.NoError(t, err)
	require.Equal(t, "postgres://flag/x", f.PostgresURL, "the command line wins")

	t.Setenv("CONVERGE_POSTGRES_URL", "postgres://env/x")
	_, err = run()
	require.ErrorContains(t, err, "CONVERGE_POSTGRES_URL and CONVERGE_POSTGRES_URL_FILE are both set")

	t.Setenv("CONVERGE_POSTGRES_URL", "")
	require.NoError(t, os.Unsetenv("CONVERGE_POSTGRES_URL"))
	t.Setenv("CONVERGE_POSTGRES_URL_FILE", filepath.Join(dir, "missing"))
	_, err = run()
	require.ErrorContains(t, err, "CONVERGE_POSTGRES_URL_FILE")
}
