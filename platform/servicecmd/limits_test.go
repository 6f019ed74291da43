package servicecmd_test

import (
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/servicecmd"
)

// The limits are flags with CONVERGE_* variables (the duration through DurationFromEnv), and the
// server configuration carries them, the Verifier's verifications quota included.
func TestLimitFlagsFromEnvironment(t *testing.T) {
	t.Setenv("CONVERGE_MAX_CONNECTIONS", "50")
	t.Setenv("CONVERGE_MAX_CONCURRENT_STREAMS", "7")
	t.Setenv("CONVERGE_MAX_CONNECTION_IDLE", "90s")
	t.Setenv("CONVERGE_MAX_STREAMS_PER_PRINCIPAL", "5")
	t.Setenv("CONVERGE_MAX_VERIFICATIONS_PER_PRINCIPAL", "3")
	var f servicecmd.Flags
	cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error {
		for flag, env := range servicecmd.LimitDurationEnv {
			if err := servicecmd.DurationFromEnv(cmd, flag, env); err != nil {
				return err
			}
		}
		return nil
	}}
	f.Bind(cmd, "127.0.0.1:1", 0)
	cmd.SetArgs(nil)
	require.NoError(t, cmd.Execute())
	l := f.ServerConfig("x", nil).Limits
	require.Equal(t, 50, l.MaxConnections)
	require.Equal(t, uint32(7), l.MaxConcurrentStreams)
	require.Equal(t, 90*time.Second, l.MaxConnectionIdle)
	require.Equal(t, 5, l.StreamsPerPrincipal)
	require.Len(t, l.Quotas, 1)
	require.Equal(t, servicecmd.VerificationsQuota, l.Quotas[0].Name)
	require.Equal(t, 3, l.Quotas[0].PerPrincipal)
	require.ElementsMatch(t, []string{verifierv1.VerifierService_Verify_FullMethodName, verifierv1.VerifierService_VerifyStream_FullMethodName}, l.Quotas[0].Methods)

	for _, name := range []string{"max-connections", "max-concurrent-streams", "max-connection-idle", "max-streams-per-principal", "max-verifications-per-principal"} {
		require.Contains(t, cmd.Flags().Lookup(name).Usage, "[CONVERGE_", name)
	}
}

// BoolFromEnv sets a boolean flag from its variable unless the command line gives it, and refuses
// a value that is not a boolean, naming the variable and the flag.
func TestBoolFromEnv(t *testing.T) {
	run := func(args ...string) (bool, error) {
		var on bool
		cmd := &cobra.Command{Use: "x", RunE: func(cmd *cobra.Command, _ []string) error {
			return servicecmd.BoolFromEnv(cmd, "prefetch", "CONVERGE_TEST_PREFETCH")
		}}
		cmd.Flags().BoolVar(&on, "prefetch", false, "x [CONVERGE_TEST_PREFETCH]")
		cmd.SetArgs(args)
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		err := cmd.Execute()
		return on, err
	}
	t.Setenv("CONVERGE_TEST_PREFETCH", "true")
	on, err := run()
	require.NoError(t, err)
	require.True(t, on)
	on, err = run("--prefetch=false")
	require.NoError(t, err)
	require.False(t, on, "the command line wins")
	t.Setenv("CONVERGE_TEST_PREFETCH", "yes please")
	_, err = run()
	require.EqualError(t, err, `CONVERGE_TEST_PREFETCH="yes please" (--prefetch): want true or false`)
	t.Setenv("CONVERGE_TEST_PREFETCH", "")
	on, err = run()
	require.NoError(t, err)
	require.False(t, on)
}
