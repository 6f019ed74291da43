package security

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/clustertest"
)

// verifierToken is the bearer token of the Verifiers these tests start: a secret of the server
// that the attacks try to read.
const verifierToken = "sec-verifier-token-5d1f"

// realVerifier is a converge-verifier process on its own database of the test Postgres.
type realVerifier struct {
	addr   string
	proc   *clustertest.Process
	client verifierv1.VerifierServiceClient
	// root is its --allowed-root; dir a target directory inside it.
	root, dir string
	pgURL     string
}

// startVerifier starts converge-verifier with tokens (CONVERGE_AUTH_TOKENS) and its database URL
// in its environment, an allowed root, and args.
func startVerifier(t *testing.T, env []string, args ...string) *realVerifier {
	t.Helper()
	pg := clustertest.UsePostgres(t, clustertest.PostgresURL())
	_, url := pg.CreateDatabase(t, "")
	// The sandboxed checks run as an unprivileged user: the target is readable by everyone (a
	// t.TempDir's parent is not).
	root, err := os.MkdirTemp("", "converge-sec-verifier-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	require.NoError(t, os.Chmod(root, 0o755))
	dir := filepath.Join(root, "app")
	require.NoError(t, os.Mkdir(dir, 0o755))
	addr := clustertest.FreeAddr(t)
	p := clustertest.StartProcess(t, clustertest.ProcessSpec{
		Name: "verifier", Bin: clustertest.Binary(t, "converge-verifier"),
		Args: append([]string{"--listen", addr, "--allowed-root", root}, args...),
		Env: append([]string{"CONVERGE_POSTGRES_URL=" + url, "CONVERGE_MIGRATE=true",
			"CONVERGE_AUTH_TOKENS=" + verifierToken}, env...),
	})
	clustertest.WaitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING, 0)
	conn, err := client.Dial(addr, client.Options{Token: verifierToken})
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &realVerifier{addr: addr, proc: p, client: verifierv1.NewVerifierServiceClient(conn), root: root, dir: dir, pgURL: url}
}

// request is a Verify of set against the verifier's target directory.
func (v *realVerifier) request(loop string, crit ...*verifierv1.Criterion) *verifierv1.VerifyRequest {
	for i, c := range crit {
		if c.Id == "" {
			c.Id = "F" + string(rune('1'+i))
		}
		if c.Name == "" {
			c.Name = "attack"
		}
		c.Tag = verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY
	}
	return &verifierv1.VerifyRequest{
		CriteriaSource: &verifierv1.VerifyRequest_Criteria{Criteria: &verifierv1.CriteriaSet{Criteria: crit}},
		Target:         &verifierv1.Target{Directory: &verifierv1.Target_LocalDir{LocalDir: v.dir}},
		LoopKey:        loop,
	}
}

func shell(line string) *verifierv1.Criterion {
	return &verifierv1.Criterion{Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Shell: line}}}
}

func httpGet(url string) *verifierv1.Criterion {
	return &verifierv1.Criterion{Check: &verifierv1.Criterion_Http{Http: &verifierv1.HttpCheck{
		Location: &verifierv1.HttpCheck_Url{Url: url}}}}
}

// runVerifierHelp runs converge-verifier with args until it exits (a start-up refusal) and
// answers its output.
func runVerifierHelp(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), clustertest.Binary(t, "converge-verifier"), append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, out)
	}
	return string(out), nil
}

// internalName answers a name of this host that resolves to addresses the default policy denies
// (its host name resolves to loopback or a private address on the machines tests run on).
func internalName(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	require.NoError(t, err)
	addrs, err := net.DefaultResolver.LookupNetIP(t.Context(), "ip", host)
	require.NoError(t, err, "this host's name resolves")
	for _, a := range addrs {
		if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() {
			return host
		}
	}
	t.Fatalf("this host's name %s resolves to %v: no internal address to test with", host, addrs)
	return ""
}
