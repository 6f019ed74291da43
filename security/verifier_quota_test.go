package security

// Finding 7 for the Verifier's verifications: one principal could run any number of
// verifications at once. With --max-verifications-per-principal 1, against the real
// converge-verifier, a second concurrent Verify of the same principal is ResourceExhausted naming
// the quota while another principal's is served, and the quota comes back when the first ends.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/servicecmd"
)

func TestVerifierQuotaRefusesASecondConcurrentVerifyOfOnePrincipal(t *testing.T) {
	t.Parallel()
	v := startVerifier(t, []string{"CONVERGE_AUTH_FILE=" + writeAuthFile(t)}, "--max-verifications-per-principal", "1")
	alice := verifierv1.NewVerifierServiceClient(dialAs(t, v.addr, principalOf(auth.RoleVerifyClient)))
	bob := verifierv1.NewVerifierServiceClient(dialAs(t, v.addr, principalOf(auth.RoleOperator)))

	// Alice's first verification runs a check that waits until it is cancelled.
	long := shell("sleep 600")
	long.GetCommand().Timeout = durationpb.New(10 * time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	startLong := func() {
		go func() {
			_, err := alice.Verify(ctx, v.request("long", long))
			done <- err
		}()
	}
	startLong()

	// Once it holds Alice's one slot, her next Verify is refused, naming the quota. A probe
	// that lands before the long one is admitted holds the slot itself and may be what
	// refuses the long one: then the long one is started again.
	var refused, last error
	require.True(t, clustertest.Eventually(time.Minute, func() bool {
		select {
		case err := <-done:
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "the long verification ends only when refused: %v", err)
			startLong()
			return false
		default:
		}
		_, err := alice.Verify(t.Context(), v.request("second", shell("true")))
		if status.Code(err) == codes.ResourceExhausted {
			refused = err
			return true
		}
		last = err // before the first is admitted, the second is served
		return false
	}), "Alice's second concurrent Verify is ResourceExhausted; the last answer: %v", last)
	require.Contains(t, status.Convert(refused).Message(), servicecmd.VerificationsQuota)

	// Bob's quota is his own: served while Alice's first verification still runs.
	res, err := bob.Verify(t.Context(), v.request("bob", shell("true")))
	require.NoError(t, err)
	require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_PASS, res.GetReport().GetResults()[0].GetStatus())
	select {
	case err := <-done:
		t.Fatalf("Alice's first verification ended early: %v", err)
	default:
	}

	// Alice's first ends (cancelled): her slot comes back.
	cancel()
	require.Equal(t, codes.Canceled, status.Code(<-done))
	require.True(t, clustertest.Eventually(time.Minute, func() bool {
		_, err := alice.Verify(t.Context(), v.request("after", shell("true")))
		return err == nil
	}), "Alice is served again once her first verification ended")
}
