package security

// Finding 3: SSRF. http checks, grpc checks and git targets reached any address, followed
// redirects and returned the response. Against the real converge-verifier with its default
// destination policy: loopback Scheduler/Verifier addresses are refused, a redirect from an
// allowed server to a denied one is refused, a git target at a denied address is refused, and
// header_env to any URL is refused (verifier_secrets_test.go).

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

func TestVerifierRefusesInternalDestinations(t *testing.T) {
	t.Parallel()
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "internal secret page")
	}))
	t.Cleanup(internal.Close)
	redirector := httptest.NewServer(http.RedirectHandler(internal.URL+"/", http.StatusFound))
	t.Cleanup(redirector.Close)
	// The operator allows exactly the redirector's port: not loopback as a whole.
	v := startVerifier(t, nil, "--allow-destination", redirector.Listener.Addr().String())

	// A grpc check to the loopback Verifier itself (its own RPCs, as a Scheduler's would be).
	self := &verifierv1.Criterion{Check: &verifierv1.Criterion_Grpc{Grpc: &verifierv1.GrpcCheck{Address: v.addr,
		Call: &verifierv1.GrpcCheck_Unary{Unary: &verifierv1.GrpcUnaryCall{Method: "converge.verifier.v1.VerifierService/ListReports", RequestJson: "{}"}}}}}
	_, err := v.client.Verify(t.Context(), v.request("grpc-self", self))
	requireViolationOf(t, err, "criteria.criteria[0].grpc.address", "loopback")

	_, err = v.client.Verify(t.Context(), v.request("http-loopback", httpGet(internal.URL+"/")))
	requireViolationOf(t, err, "criteria.criteria[0].http.url", "loopback")
	_, err = v.client.Verify(t.Context(), v.request("metadata", httpGet("http://169.254.169.254/latest/meta-data/")))
	requireViolationOf(t, err, "criteria.criteria[0].http.url", "cloud metadata")

	// Redirect from the allowed port to a denied one.
	follow := httpGet(redirector.URL + "/")
	follow.GetHttp().FollowRedirects = true
	res, err := v.client.Verify(t.Context(), v.request("redirect", follow))
	require.NoError(t, err)
	r := res.GetReport().GetResults()[0]
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED, r.GetBlockReason(), "%v", r)
	js, _ := protojson.Marshal(res.GetReport())
	require.NotContains(t, string(js), "internal secret page")

	// A git target at a denied address, literal and by name.
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	git := v.request("git", &verifierv1.Criterion{Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "x"}}}})
	git.Target = &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: internal.URL + "/repo.git"}}}
	_, err = v.client.Verify(t.Context(), git)
	requireViolationOf(t, err, "target.git.repository_url", "loopback")
	git.Target = &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: "http://" + internalName(t) + ":" + port + "/repo.git"}}}
	res, err = v.client.Verify(t.Context(), git)
	require.NoError(t, err)
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED, res.GetReport().GetResults()[0].GetBlockReason(), "%v", res.GetReport().GetResults()[0])
}
