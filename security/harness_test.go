package security

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/clustertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustertest.RemoveBinaries()
	os.Exit(code)
}

// tokenOf is the bearer token of the principal named name in the suite's auth file.
func tokenOf(name string) string { return "token-of-" + name }

// principalOf is the suite's principal holding exactly role r.
func principalOf(r auth.Role) string { return "p-" + string(r) }

// Extra agent principals, for the attacks of one agent on another.
const (
	agentA = "agent-pool-a"
	agentB = "agent-pool-b"
)

// writeAuthFile writes the suite's auth file: one principal per role (p-<role>, holding only
// that role) and two agent principals, each with token tokenOf(name), stored hashed.
func writeAuthFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("principals:\n")
	add := func(name string, r auth.Role) {
		fmt.Fprintf(&b, "  - name: %s\n    roles: [%s]\n    token_sha256: [%q]\n", name, r, auth.HashToken(tokenOf(name)))
	}
	for _, r := range auth.Roles {
		add(principalOf(r), r)
	}
	add(agentA, auth.RoleAgent)
	add(agentB, auth.RoleAgent)
	path := filepath.Join(t.TempDir(), "auth.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// startCluster starts every service as its own binary, each with the suite's auth file; the
// services (Scheduler → Verifier/Registry) and the agents call as the operator principal.
func startCluster(t *testing.T, agents int) *clustertest.Cluster {
	t.Helper()
	path := writeAuthFile(t)
	return clustertest.Start(t, clustertest.Options{
		Agents:     agents,
		WaitAgents: true,
		Env:        []string{"CONVERGE_AUTH_FILE=" + path, "CONVERGE_TOKEN=" + tokenOf(principalOf(auth.RoleOperator))},
	})
}

// dialAs connects to addr as the principal named name (its token on every call).
func dialAs(t *testing.T, addr, name string) *grpc.ClientConn {
	t.Helper()
	conn, err := client.Dial(addr, client.Options{Token: tokenOf(name)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
