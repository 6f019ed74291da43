package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/servicecmd"
)

// --stale-after names an environment variable, as every flag does.
func TestStaleAfterFromTheEnvironment(t *testing.T) {
	t.Setenv(staleAfterEnv, "45s")
	cmd := command()
	require.NoError(t, servicecmd.DurationFromEnv(cmd, "stale-after", staleAfterEnv))
	got, err := cmd.Flags().GetDuration("stale-after")
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, got)
	require.Contains(t, cmd.Flags().Lookup("stale-after").Usage, "["+staleAfterEnv+"]")

	// The command line wins over the environment.
	cmd = command()
	require.NoError(t, cmd.Flags().Set("stale-after", "5s"))
	require.NoError(t, servicecmd.DurationFromEnv(cmd, "stale-after", staleAfterEnv))
	got, _ = cmd.Flags().GetDuration("stale-after")
	require.Equal(t, 5*time.Second, got)

	t.Setenv(staleAfterEnv, "soon")
	err = servicecmd.DurationFromEnv(command(), "stale-after", staleAfterEnv)
	require.ErrorContains(t, err, `CONVERGE_STALE_AFTER="soon" (--stale-after): not a duration`)
}
