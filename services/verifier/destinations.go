package verifier

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/netguard"
)

// This file holds the Verifier's destination policy (platform/netguard) to what its callers
// can make it connect to: http and grpc checks (every dial, redirects included, after DNS) and
// git targets (git fetches through a netguard.Proxy with redirects off). A destination given as
// an address (or "localhost") that the policy refuses is refused with the request
// (InvalidArgument); a name that resolves to a refused address is BLOCKED
// (BLOCK_REASON_DESTINATION_DENIED) when the check dials.

// WithDestinations sets the destination policy of checks and git targets. Without it, New
// applies netguard's defaults: loopback, link-local, metadata and private addresses are refused.
func WithDestinations(p *netguard.Policy) Option { return func(c *config) { c.destinations = p } }

// literalDenied answers the policy's refusal of host:port when host is an address or
// "localhost" (a name only the dial can judge answers nil).
func (s *Server) literalDenied(host string, port int) error {
	host = strings.Trim(host, "[]")
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		addrs = append(addrs, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"))
	}
	for _, a := range addrs {
		if err := s.cfg.destinations.Check(host, netip.AddrPortFrom(a, uint16(port))); err != nil {
			return err
		}
	}
	return nil
}

// urlDenied is literalDenied for a URL.
func (s *Server) urlDenied(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil // validation answers malformed URLs
	}
	port := 80
	if strings.EqualFold(u.Scheme, "https") {
		port = 443
	}
	if p, err := strconv.Atoi(u.Port()); err == nil {
		port = p
	}
	return s.literalDenied(u.Hostname(), port)
}

// addrDenied is literalDenied for a host:port.
func (s *Server) addrDenied(addr string) error {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	port, _ := strconv.Atoi(ps)
	return s.literalDenied(host, port)
}

// checkDestinations refuses the request's destinations that are addresses the policy denies:
// the target's base URL, gRPC address and git repository, and the checks' URLs and addresses.
func (s *Server) checkDestinations(req *verifierv1.VerifyRequest, crit []*verifierv1.Criterion, run []bool, bad *badRequestError) {
	t := req.GetTarget()
	add := func(field string, err error) {
		if err != nil {
			bad.violations = append(bad.violations, fieldViolation(field, "%v", err))
		}
	}
	if t.GetBaseUrl() != "" {
		add("target.base_url", s.urlDenied(t.GetBaseUrl()))
	}
	if t.GetGrpcAddress() != "" {
		add("target.grpc_address", s.addrDenied(t.GetGrpcAddress()))
	}
	if g := t.GetGit(); g != nil {
		add("target.git.repository_url", s.urlDenied(g.GetRepositoryUrl()))
	}
	for i, c := range crit {
		if !run[i] {
			continue
		}
		field := func(path string) string {
			if req.GetCriteriaMarkdown() != "" {
				return fmt.Sprintf("criteria_markdown:L%d", c.GetSourceLine())
			}
			return fmt.Sprintf("criteria.criteria[%d].%s", i, path)
		}
		if u := c.GetHttp().GetUrl(); u != "" {
			add(field("http.url"), s.urlDenied(u))
		}
		if a := c.GetGrpc().GetAddress(); a != "" {
			add(field("grpc.address"), s.addrDenied(a))
		}
	}
}

// gitNetwork starts the proxy a checkout's git commands go through, and answers the git
// arguments and environment that send them there: redirects off, and no proxy setting or
// no_proxy of the verifier's environment that would let git go around it.
func (s *Server) gitNetwork() (*netguard.Proxy, []string, []string, error) {
	px, err := netguard.StartProxy(s.cfg.destinations, gitTimeout)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("start the verifier's git proxy: %w", err)
	}
	args := []string{"-c", "http.proxy=" + px.URL(), "-c", "http.followRedirects=false", "-c", "http.proxyAuthMethod=basic"}
	env := []string{"NO_PROXY=", "no_proxy=", "http_proxy=", "HTTPS_PROXY=", "https_proxy=", "ALL_PROXY=", "all_proxy="}
	return px, args, env, nil
}
