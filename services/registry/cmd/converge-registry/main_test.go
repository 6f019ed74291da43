package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/registry"
)

// The stale and gone windows are flags with CONVERGE_* variables, checked before anything starts.
func TestWindowFlags(t *testing.T) {
	cmd := command()
	require.Equal(t, registry.DefaultStaleWindow.String(), cmd.Flags().Lookup("stale-after").DefValue)
	require.Equal(t, "1m0s", cmd.Flags().Lookup("stale-after").DefValue, "the seeds: stale after 60 s without a heartbeat")
	require.Equal(t, "0s", cmd.Flags().Lookup("gone-after").DefValue)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stale-after", "10s", "--gone-after", "5s"}, "must not be shorter than --stale-after"},
		{[]string{"--stale-after", "0s"}, "--stale-after must be positive"},
		{[]string{"--gone-after", "-1s"}, "--gone-after must be 0"},
	} {
		cmd := command()
		cmd.SetArgs(tc.args)
		cmd.SetOut(new(nopWriter))
		cmd.SetErr(new(nopWriter))
		require.ErrorContains(t, cmd.Execute(), tc.want, "%v", tc.args)
	}

	// The variables are read when the flags are not given, and checked the same way.
	t.Setenv("CONVERGE_STALE_AFTER", "10s")
	t.Setenv("CONVERGE_GONE_AFTER", "5s")
	cmd = command()
	cmd.SetArgs(nil)
	cmd.SetOut(new(nopWriter))
	cmd.SetErr(new(nopWriter))
	require.ErrorContains(t, cmd.Execute(), "--gone-after (5s) must not be shorter than --stale-after (10s)")

	t.Setenv("CONVERGE_GONE_AFTER", "soon")
	cmd = command()
	cmd.SetArgs(nil)
	cmd.SetOut(new(nopWriter))
	cmd.SetErr(new(nopWriter))
	require.ErrorContains(t, cmd.Execute(), `CONVERGE_GONE_AFTER="soon"`)
}

type nopWriter struct{}

func (*nopWriter) Write(p []byte) (int, error) { return len(p), nil }
