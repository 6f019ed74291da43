package verifier_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/netguard"
	"github.com/converge-dev/converge/services/verifier"
)

// Under the default destination policy, checks and git targets given as loopback addresses are
// refused with the request; a name that resolves to loopback, and a redirect from an allowed
// server to a denied one, are BLOCKED with DESTINATION_DENIED when the check dials; git fetches
// go through the policy's proxy.
func TestDestinationPolicy(t *testing.T) {
	t.Parallel()
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "internal data") }))
	t.Cleanup(internal.Close)
	redirector := httptest.NewServer(http.RedirectHandler(internal.URL+"/", http.StatusFound))
	t.Cleanup(redirector.Close)
	grpcAddr := grpcTarget(t)

	b := setup(t, backends[1])
	policy, err := netguard.Parse([]string{redirector.Listener.Addr().String()})
	require.NoError(t, err)
	st := backends[1].open(t)
	b.client = verifierv1.NewVerifierServiceClient(serveBuf(t, verifier.New(st, verifier.WithAllowedRoots(b.root),
		verifier.WithDestinations(policy), verifier.WithRetryBackoff(0)), st))
	dir := b.dir(t, nil)

	get := func(url string, follow bool) *verifierv1.Criterion {
		return &verifierv1.Criterion{Check: &verifierv1.Criterion_Http{Http: &verifierv1.HttpCheck{
			Location: &verifierv1.HttpCheck_Url{Url: url}, FollowRedirects: follow}}}
	}
	_, err = b.client.Verify(t.Context(), structured(one(get(internal.URL+"/", false)), dir, "literal"))
	requireViolation(t, err, "criteria.criteria[0].http.url", "loopback")
	grpcCheck := &verifierv1.Criterion{Check: &verifierv1.Criterion_Grpc{Grpc: &verifierv1.GrpcCheck{Address: grpcAddr,
		Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}}}}}
	_, err = b.client.Verify(t.Context(), structured(one(grpcCheck), dir, "grpc"))
	requireViolation(t, err, "criteria.criteria[0].grpc.address", "loopback")
	gitReq := structured(one(get("https://example.com/", false)), dir, "git")
	gitReq.Target = &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: "http://127.0.0.1:9/repo.git"}}}
	_, err = b.client.Verify(t.Context(), gitReq)
	requireViolation(t, err, "target.git.repository_url", "loopback")

	// An allowed server that redirects to a denied one: the redirect's dial is refused.
	r := b.verify(t, structured(one(get(redirector.URL+"/", true)), dir, "redirect"))
	res := resultOf(t, r, "F1")
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED, res.GetBlockReason(), "%v", res)
	require.NotContains(t, res.GetEvidence().String(), "internal data")

	// A name that resolves to loopback (this host's name here) is refused when dialled.
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
	host := internalName(t)
	r = b.verify(t, structured(one(get("http://"+host+":"+port+"/", false)), dir, "name"))
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED, resultOf(t, r, "F1").GetBlockReason())

	// A git target whose name resolves to loopback: git's fetch goes through the proxy and is refused.
	gitReq = structured(one(&verifierv1.Criterion{Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "x"}}}}), dir, "git-name")
	gitReq.Target = &verifierv1.Target{Directory: &verifierv1.Target_Git{Git: &verifierv1.GitSource{RepositoryUrl: "http://" + host + ":" + port + "/repo.git"}}}
	r = b.verify(t, gitReq)
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_DESTINATION_DENIED, resultOf(t, r, "F1").GetBlockReason(), "%v", resultOf(t, r, "F1"))
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
