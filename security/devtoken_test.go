package security

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// Finding 9: loopback is not a trust boundary. The real `converge dev` makes a token at start
// (printed once, written 0600 under its data dir): another local caller without it is refused,
// even the Verify that would run its command; the converge CLI run from the same directory works
// with no flag.
func TestFinding9DevTokenRefusesOtherLocalCallers(t *testing.T) {
	dir := t.TempDir()
	addr := clustertest.FreeAddr(t)
	p := clustertest.StartProcess(t, clustertest.ProcessSpec{Name: "converge-dev", Bin: clustertest.Binary(t, "converge"),
		Args: []string{"dev", "--listen", addr}, Dir: dir, Env: []string{"CONVERGE_TOKEN="}})
	clustertest.WaitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING, time.Minute)

	path := filepath.Join(dir, ".converge", "dev-token")
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the token file is its user's only")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	token := strings.TrimSpace(string(data))
	require.NotEmpty(t, token)
	require.Equal(t, 1, strings.Count(p.Output(), token), "the token is printed once:\n%s", p.Output())

	// Another local user's call, without the token: refused, command checks included.
	anon := clustertest.Dial(t, addr)
	_, err = schedulerv1.NewSchedulerServiceClient(anon).ListTaskLists(t.Context(), &schedulerv1.ListTaskListsRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = verifierv1.NewVerifierServiceClient(anon).Verify(t.Context(), &verifierv1.VerifyRequest{LoopKey: "x"})
	require.Equal(t, codes.Unauthenticated, status.Code(err))

	// The CLI, run from the same directory with no flag and no environment, finds the token.
	cmd := exec.Command(clustertest.Binary(t, "converge"), "status", "--server", addr)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CONVERGE_DATA_DIR=", "CONVERGE_TOKEN=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "converge status without flags:\n%s", out)

	// Elsewhere (no token file), the CLI is refused like anyone else.
	cmd = exec.Command(clustertest.Binary(t, "converge"), "status", "--server", addr)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "CONVERGE_DATA_DIR=", "CONVERGE_TOKEN=")
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "missing bearer token")
}
