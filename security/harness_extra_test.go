package security

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/clustertest"
)

// startDev starts `converge dev` (SQLite, no agents) with its generated token and answers its
// address and token.
func startDev(t *testing.T, args ...string) (addr, token string) {
	t.Helper()
	dir := t.TempDir()
	addr = clustertest.FreeAddr(t)
	p := clustertest.StartProcess(t, clustertest.ProcessSpec{Name: "converge-dev", Bin: clustertest.Binary(t, "converge"),
		Args: append([]string{"dev", "--listen", addr, "--data-dir", dir, "--agents", "0"}, args...)})
	clustertest.WaitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING, 0)
	b, err := os.ReadFile(filepath.Join(dir, "dev-token"))
	require.NoError(t, err)
	return addr, strings.TrimSpace(string(b))
}

// dialToken connects to addr with a bearer token.
func dialToken(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := client.Dial(addr, client.Options{Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
