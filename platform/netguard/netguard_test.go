package netguard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/netguard"
)

func TestPolicyDeniesInternalRangesUnlessAllowed(t *testing.T) {
	t.Parallel()
	def, err := netguard.Parse(nil)
	require.NoError(t, err)
	cases := []struct {
		addr, what string
	}{
		{"127.0.0.1:7070", "loopback"},
		{"[::1]:7070", "loopback"},
		{"[::ffff:127.0.0.1]:80", "loopback"},
		{"169.254.169.254:80", "a cloud metadata endpoint"},
		{"[fd00:ec2::254]:80", "a cloud metadata endpoint"},
		{"10.2.3.4:5432", "private"},
		{"172.20.0.1:80", "private"},
		{"192.168.1.1:80", "private"},
		{"[fd12::1]:80", "private"},
		{"0.0.0.0:80", "unspecified"},
		{"100.64.1.1:80", "shared (CGNAT)"},
	}
	for _, c := range cases {
		err := def.Check("", netip.MustParseAddrPort(c.addr))
		d, ok := netguard.IsDenied(err)
		require.True(t, ok, "%s must be denied", c.addr)
		require.Equal(t, c.what, d.What, c.addr)
		require.Contains(t, err.Error(), "--allow-destination")
	}
	require.NoError(t, def.Check("example.com", netip.MustParseAddrPort("93.184.215.14:443")), "public addresses are allowed")

	p, err := netguard.Parse([]string{"10.1.0.0/16", "192.168.1.5", "[::1]:7076", "git.internal:443", "loopback"})
	require.NoError(t, err)
	require.NoError(t, p.Check("", netip.MustParseAddrPort("10.1.2.3:80")))
	require.Error(t, p.Check("", netip.MustParseAddrPort("10.2.2.3:80")))
	require.NoError(t, p.Check("", netip.MustParseAddrPort("192.168.1.5:22")))
	require.NoError(t, p.Check("git.internal", netip.MustParseAddrPort("10.9.9.9:443")), "a name rule allows what the name resolves to")
	require.Error(t, p.Check("git.internal", netip.MustParseAddrPort("10.9.9.9:80")), "on its port only")
	require.NoError(t, p.Check("", netip.MustParseAddrPort("127.0.0.1:1")))
	require.Error(t, p.Check("", netip.MustParseAddrPort("169.254.169.254:80")), "loopback does not allow metadata")

	only, err := netguard.Parse([]string{"127.0.0.1:7076"})
	require.NoError(t, err)
	require.NoError(t, only.Check("", netip.MustParseAddrPort("127.0.0.1:7076")))
	require.Error(t, only.Check("", netip.MustParseAddrPort("127.0.0.1:7070")), "one loopback port is not all of loopback")

	require.NoError(t, netguard.AllowAll().Check("", netip.MustParseAddrPort("169.254.169.254:80")))
	_, err = netguard.Parse([]string{"10.0.0.0/8:99999"})
	require.Error(t, err)
}

// The policy holds after resolution: "localhost" is refused at connect time, and so is a
// redirect from an allowed server to a denied one (each dial is checked).
func TestDialAfterResolutionAndOnRedirects(t *testing.T) {
	t.Parallel()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "internal") }))
	t.Cleanup(target.Close)
	u, _ := url.Parse(target.URL)
	_, port, _ := net.SplitHostPort(u.Host)

	def, err := netguard.Parse(nil)
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{DialContext: def.DialContext(&net.Dialer{Timeout: 5 * time.Second})}}
	_, err = client.Get("http://localhost:" + port + "/")
	d, ok := netguard.IsDenied(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "loopback", d.What)

	// A redirector on an allowed loopback port sends the client to the denied one.
	redirector := httptest.NewServer(http.RedirectHandler(target.URL+"/", http.StatusFound))
	t.Cleanup(redirector.Close)
	ru, _ := url.Parse(redirector.URL)
	p, err := netguard.Parse([]string{ru.Host})
	require.NoError(t, err)
	client = &http.Client{Transport: &http.Transport{DialContext: p.DialContext(nil)}}
	_, err = client.Get(redirector.URL)
	_, ok = netguard.IsDenied(err)
	require.True(t, ok, "the redirect's dial is refused: %v", err)
}

// git pointed at the Proxy (redirects off, no_proxy empty) fetches from an allowed server and
// is refused a denied one.
func TestProxyConfinesGit(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed")
	}
	hits := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.URL.Path
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)

	run := func(p *netguard.Policy) (string, *netguard.Proxy) {
		px, err := netguard.StartProxy(p, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { _ = px.Close() })
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "git", "-c", "http.proxy="+px.URL(), "-c", "http.followRedirects=false",
			"ls-remote", srv.URL+"/repo.git")
		cmd.Env = append(cmd.Environ(), "NO_PROXY=", "no_proxy=", "GIT_TERMINAL_PROMPT=0")
		out, _ := cmd.CombinedOutput()
		return string(out), px
	}
	out, px := run(nil)
	require.NotEmpty(t, px.Denied(), "git's connection to loopback is refused: %s", out)
	require.Empty(t, hits, "nothing reached the denied server")

	allowed, err := netguard.Parse([]string{u.Host})
	require.NoError(t, err)
	out, px = run(allowed)
	require.Empty(t, px.Denied(), out)
	select {
	case path := <-hits:
		require.True(t, strings.HasPrefix(path, "/repo.git/"), path)
	default:
		t.Fatalf("git did not reach the allowed server through the proxy: %s", out)
	}
}
