package verifier_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/services/verifier"
)

func one(c *verifierv1.Criterion) *verifierv1.CriteriaSet {
	c.Id, c.Name, c.Tag = "F1", "x", verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY
	return &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{c}}
}

// The verifier's environment is reachable by checks only through names on its allow-list:
// env_passthrough, header_env and metadata_env naming any other variable (its own
// CONVERGE_AUTH_TOKENS first) are InvalidArgument naming the variable and the field.
func TestEnvNamesOutsideTheAllowListAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1], verifier.WithAllowedEnv("APP_TOKEN"))
	b.env["CONVERGE_AUTH_TOKENS"] = "secret-token-1"
	dir := b.dir(t, nil)
	cases := []struct {
		name  string
		c     *verifierv1.Criterion
		field string
	}{
		{"env_passthrough", &verifierv1.Criterion{Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{
			Argv: []string{"env"}, EnvPassthrough: []string{"APP_TOKEN", "CONVERGE_AUTH_TOKENS"}}}},
			"criteria.criteria[0].command.env_passthrough[1]"},
		{"header_env", &verifierv1.Criterion{Check: &verifierv1.Criterion_Http{Http: &verifierv1.HttpCheck{
			Location: &verifierv1.HttpCheck_Url{Url: "http://example.com/"}, HeaderEnv: map[string]string{"Authorization": "CONVERGE_AUTH_TOKENS"}}}},
			`criteria.criteria[0].http.header_env["Authorization"]`},
		{"metadata_env", &verifierv1.Criterion{Check: &verifierv1.Criterion_Grpc{Grpc: &verifierv1.GrpcCheck{
			Address: "example.com:443", Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}}, MetadataEnv: map[string]string{"authorization": "CONVERGE_POSTGRES_URL"}}}},
			`criteria.criteria[0].grpc.metadata_env["authorization"]`},
	}
	for _, tc := range cases {
		_, err := b.client.Verify(t.Context(), structured(one(tc.c), dir, "env-"+tc.name))
		requireViolation(t, err, tc.field, "not on its allow-list")
	}
	require.Error(t, verifier.CheckAllowedEnv([]string{"HOME", "CONVERGE_POSTGRES_URL"}))
	require.NoError(t, verifier.CheckAllowedEnv([]string{"APP_TOKEN"}))
}

// The value of an allowed variable is redacted from the report and from VerifyStream's events:
// a command that prints it and a server that echoes the header leave only a marker.
func TestAllowedSecretsAreRedactedFromReports(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1], verifier.WithAllowedEnv("APP_TOKEN"))
	const secret = "s3cr3t-value-42"
	b.env["APP_TOKEN"] = secret
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "you sent "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(echo.Close)
	set := &verifierv1.CriteriaSet{Criteria: []*verifierv1.Criterion{
		{Id: "F1", Name: "prints it", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{
				Shell: `echo "token=$APP_TOKEN"; echo "$APP_TOKEN" >&2; exit 1`, EnvPassthrough: []string{"APP_TOKEN"}}}},
		{Id: "F2", Name: "echoes it", Tag: verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY,
			Check: &verifierv1.Criterion_Http{Http: &verifierv1.HttpCheck{Location: &verifierv1.HttpCheck_Url{Url: echo.URL},
				HeaderEnv: map[string]string{"Authorization": "APP_TOKEN"},
				Expect:    &verifierv1.HttpExpectation{Body: &verifierv1.TextExpectation{Contains: []string{"nothing"}}}}}},
	}}
	req := structured(set, b.dir(t, nil), "redact")
	r := b.verify(t, req)
	js, err := protojson.Marshal(r)
	require.NoError(t, err)
	require.NotContains(t, string(js), secret)
	require.Contains(t, resultOf(t, r, "F1").GetEvidence().GetCommand().GetStdoutTail(), "token=[redacted APP_TOKEN]")
	require.Contains(t, resultOf(t, r, "F2").GetEvidence().GetHttp().GetBodyExcerpt(), "you sent [redacted APP_TOKEN]")

	stored, err := b.client.GetReport(t.Context(), &verifierv1.GetReportRequest{Id: r.GetId()})
	require.NoError(t, err)
	js, _ = protojson.Marshal(stored)
	require.NotContains(t, string(js), secret)

	req.LoopKey = "redact-stream"
	var all strings.Builder
	sreq := &verifierv1.VerifyStreamRequest{CriteriaSource: &verifierv1.VerifyStreamRequest_Criteria{Criteria: set}, Target: req.GetTarget(), LoopKey: "redact-stream"}
	s, err := b.client.VerifyStream(t.Context(), sreq)
	require.NoError(t, err)
	for {
		msg, err := s.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, _ := protojson.Marshal(msg)
		all.Write(b)
	}
	require.Contains(t, all.String(), "[redacted APP_TOKEN]")
	require.NotContains(t, all.String(), secret)
}

// --allow-command-checks=false refuses command checks (FailedPrecondition); a command-check role
// refuses callers without it (PermissionDenied) and lets its holders and an unauthenticated
// server's callers through.
func TestCommandChecksCanBeDisabledOrLimitedToARole(t *testing.T) {
	t.Parallel()
	cmd := one(&verifierv1.Criterion{Check: &verifierv1.Criterion_Command{Command: &verifierv1.CommandCheck{Argv: []string{"true"}}}})

	off := setup(t, backends[1], verifier.WithCommandChecks(false))
	_, err := off.client.Verify(t.Context(), structured(cmd, off.dir(t, nil), "off"))
	requireCode(t, err, codes.FailedPrecondition)
	require.ErrorContains(t, err, "--allow-command-checks=false")

	st := backends[1].open(t)
	b := setup(t, backends[1])
	srv := verifier.New(st, verifier.WithAllowedRoots(b.root), verifier.WithCommandCheckRole(auth.RoleOperator))
	dir := b.dir(t, nil)
	ctx := auth.NewContext(t.Context(), auth.Principal{Name: "team-b", Roles: []auth.Role{auth.RoleVerifyClient}})
	_, err = srv.Verify(ctx, structured(cmd, dir, "role"))
	requireCode(t, err, codes.PermissionDenied)
	require.ErrorContains(t, err, "operator role")

	ctx = auth.NewContext(t.Context(), auth.Principal{Name: "ops", Roles: []auth.Role{auth.RoleOperator}})
	res, err := srv.Verify(ctx, structured(cmd, dir, "role"))
	require.NoError(t, err)
	require.Equal(t, "PASS", statusOf(res.GetReport())["F1"])
	_, err = srv.Verify(t.Context(), structured(cmd, dir, "role"))
	require.NoError(t, err, "a server without authentication has no roles to check")
}

// A verification that runs past the verifier's wall-time cap is stopped: DeadlineExceeded naming
// the limit, its checks killed (the 10-minute command does not hold the request).
func TestVerificationWallTimeIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1], verifier.WithMaxVerificationTime(time.Second))
	_, err := b.client.Verify(t.Context(), structured(one(&verifierv1.Criterion{Check: &verifierv1.Criterion_Command{
		Command: &verifierv1.CommandCheck{Shell: "sleep 600", Timeout: durationpb.New(20 * time.Minute)}}}), b.dir(t, nil), "wall"))
	requireCode(t, err, codes.DeadlineExceeded)
	require.ErrorContains(t, err, "--max-verification-time")
}
