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
