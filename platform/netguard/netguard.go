// Package netguard is converge's destination policy: which addresses a server may connect to on
// behalf of its callers (the Verifier's http and grpc checks and git targets). Loopback,
// link-local (with the cloud metadata endpoints 169.254.169.254 and fd00:ec2::254), private,
// shared (CGNAT), unspecified and multicast addresses are denied unless the operator allows them;
// every other (public) address is allowed.
//
// The policy is enforced after DNS resolution, on every connection: Dialer's Control hook sees
// the address the socket is about to connect to, so a name that resolves to 127.0.0.1, a DNS
// answer that changes between a check and the dial, and a redirect to a private address are all
// refused at connect time. Processes that connect on their own (git) go through Proxy, an HTTP
// proxy that dials with the same hook.
//
//	p, err := netguard.Parse([]string{"10.1.0.0/16", "scheduler-0.scheduler:7076"})
//	tr := &http.Transport{DialContext: p.DialContext(&net.Dialer{Timeout: 5 * time.Second})}
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
)

// A rule allows a set of destinations: addresses in a prefix, or a host name as the caller
// gave it (before resolution); Port 0 is any port.
type rule struct {
	prefix netip.Prefix // valid for an address rule
	host   string       // lower-case name for a name rule
	port   int
}

// Policy says which destinations may be connected to. The zero value (and nil) denies the
// default-denied ranges and allows every public address.
type Policy struct {
	all   bool
	rules []rule
}

// deniedRanges are the ranges denied unless allowed, with the name errors give them.
var deniedRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata endpoint"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata endpoint"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("fc00::/7"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (may reach any IPv4 address)"},
}

// keywords name sets of ranges in Parse.
var keywords = map[string][]string{
	"loopback":   {"127.0.0.0/8", "::1/128"},
	"private":    {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"},
	"link-local": {"169.254.0.0/16", "fe80::/10"},
}

// AllowAll is a policy that allows every destination (converge dev: the user's own machine).
func AllowAll() *Policy { return &Policy{all: true} }

// Parse builds a policy from the operator's allow entries (--allow-destination), each one of:
//   - a CIDR prefix or an address: "10.1.0.0/16", "192.168.1.5", "fd12::/64";
//   - a host name, allowed whatever it resolves to: "scheduler-0.scheduler";
//   - either with a port, then only that port: "10.1.2.3:8080", "[::1]:7076", "git.internal:443";
//   - a keyword: "loopback", "private", "link-local", or "all" (every destination).
func Parse(entries []string) (*Policy, error) {
	p := &Policy{}
	for _, raw := range entries {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		if e == "all" || e == "*" {
			p.all = true
			continue
		}
		if cidrs, ok := keywords[e]; ok {
			for _, c := range cidrs {
				p.rules = append(p.rules, rule{prefix: netip.MustParsePrefix(c)})
			}
			continue
		}
		r, err := parseRule(e)
		if err != nil {
			return nil, fmt.Errorf("allowed destination %q: %w", raw, err)
		}
		p.rules = append(p.rules, r)
	}
	return p, nil
}

func parseRule(e string) (rule, error) {
	if pfx, err := netip.ParsePrefix(e); err == nil {
		return rule{prefix: pfx.Masked()}, nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		return rule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	host, port := e, 0
	if h, ps, err := net.SplitHostPort(e); err == nil {
		n, err := strconv.Atoi(ps)
		if err != nil || n <= 0 || n > 65535 {
			return rule{}, fmt.Errorf("port %q is not a number from 1 to 65535", ps)
		}
		host, port = h, n
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return rule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), port: port}, nil
	}
	if host == "" || strings.ContainsAny(host, "/ ") {
		return rule{}, errors.New("want a CIDR prefix, an address or a host name, optionally with :port")
	}
	return rule{host: strings.ToLower(strings.TrimSuffix(host, ".")), port: port}, nil
}

// DeniedError is a connection the policy refused.
type DeniedError struct {
	// Host is the name the caller asked for ("" when it gave an address).
	Host string
	// Addr is the address the connection would have gone to.
	Addr netip.AddrPort
	// What names the denied range ("loopback", "a cloud metadata endpoint", ...).
	What string
}

func (e *DeniedError) Error() string {
	to := e.Addr.String()
	if e.Host != "" && e.Host != e.Addr.Addr().String() {
		to = fmt.Sprintf("%s (%s)", net.JoinHostPort(e.Host, strconv.Itoa(int(e.Addr.Port()))), e.Addr)
	}
	return fmt.Sprintf("destination %s is %s: refused by the destination policy (its operator can allow it with --allow-destination)", to, e.What)
}

// Check answers nil when a connection to addr, asked for as host (a name, or "" / the address
// itself), is allowed, else a *DeniedError.
func (p *Policy) Check(host string, addr netip.AddrPort) error {
	ip := addr.Addr().Unmap()
	addr = netip.AddrPortFrom(ip, addr.Port())
	what := ""
	for _, d := range deniedRanges {
		if d.prefix.Contains(ip) {
			what = d.what
			break
		}
	}
	if !ip.IsValid() {
		what = "not an address"
	}
	if what == "" || p == nil {
		if what == "" {
			return nil
		}
		return &DeniedError{Host: host, Addr: addr, What: what}
	}
	if p.all {
		return nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, r := range p.rules {
		if r.port != 0 && r.port != int(addr.Port()) {
			continue
		}
		if (r.prefix.IsValid() && r.prefix.Contains(ip)) || (r.host != "" && r.host == host) {
			return nil
		}
	}
	return &DeniedError{Host: host, Addr: addr, What: what}
}

// Control answers a net.Dialer Control hook that refuses connections the policy denies; host is
// the name the caller asked for (rules by name match it).
func (p *Policy) Control(host string) func(network, address string, c syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("netguard: unexpected address %q: %w", address, err)
		}
		return p.Check(host, ap)
	}
}

// DialContext answers a dial function (for http.Transport.DialContext, grpc.WithContextDialer,
// Proxy) that connects through a copy of base with the policy's Control hook. base's own
// Control, if any, runs after the policy's.
func (p *Policy) DialContext(base *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if base == nil {
		base = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		d := *base
		guard, inner := p.Control(host), base.Control
		d.ControlContext = nil
		d.Control = func(network, address string, c syscall.RawConn) error {
			if err := guard(network, address, c); err != nil {
				return err
			}
			if inner != nil {
				return inner(network, address, c)
			}
			return nil
		}
		return d.DialContext(ctx, network, addr)
	}
}

// IsDenied reports whether err (from a dial, an HTTP request, ...) is a refusal of the policy,
// and answers it.
func IsDenied(err error) (*DeniedError, bool) {
	var d *DeniedError
	ok := errors.As(err, &d)
	return d, ok
}
