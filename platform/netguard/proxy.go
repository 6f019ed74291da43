package netguard

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Proxy is an HTTP proxy on a loopback port that connects only where its policy allows: CONNECT
// tunnels (https) and absolute-form requests (http, sent on without following redirects). It is
// for a child process that connects on its own (git): pointed at the proxy, with its redirects
// off and no_proxy empty, it reaches only allowed destinations, checked on every connection
// after resolution. Callers must authenticate with the proxy's credentials (URL carries them),
// so another local user cannot use it as an open relay.
type Proxy struct {
	policy *Policy
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	lis    net.Listener
	srv    *http.Server
	user   string
	pass   string
	tr     *http.Transport

	mu      sync.Mutex
	denied  []error
	tunnels sync.WaitGroup
}

// StartProxy starts a proxy for policy on 127.0.0.1; Close stops it. dialTimeout bounds each
// connection it makes (0: 30 s).
func StartProxy(policy *Policy, dialTimeout time.Duration) (*Proxy, error) {
	if dialTimeout <= 0 {
		dialTimeout = 30 * time.Second
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{policy: policy, lis: lis, user: "converge", pass: rand.Text()}
	p.dial = policy.DialContext(&net.Dialer{Timeout: dialTimeout})
	p.tr = &http.Transport{Proxy: nil, DialContext: p.dial, DisableKeepAlives: true}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

// URL is the proxy's URL with its credentials (http://user:pass@127.0.0.1:port).
func (p *Proxy) URL() string { return "http://" + p.user + ":" + p.pass + "@" + p.lis.Addr().String() }

// Denied answers the refusals of the policy so far (to explain a child's failure).
func (p *Proxy) Denied() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.denied...)
}

// Close stops the proxy and its tunnels.
func (p *Proxy) Close() error {
	err := p.srv.Close()
	p.tr.CloseIdleConnections()
	p.tunnels.Wait()
	return err
}

func (p *Proxy) authorized(r *http.Request) bool {
	h := r.Header.Get("Proxy-Authorization")
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass))
	return subtle.ConstantTimeCompare([]byte(h), []byte(want)) == 1
}

func (p *Proxy) refuse(w http.ResponseWriter, err error) {
	if d, ok := IsDenied(err); ok {
		p.mu.Lock()
		p.denied = append(p.denied, d)
		p.mu.Unlock()
		http.Error(w, d.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.authorized(r) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="converge"`)
		http.Error(w, "proxy authentication required", http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "only absolute http:// requests and CONNECT", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	out.Header.Del("Proxy-Connection")
	resp, err := p.tr.RoundTrip(out) // one exchange: a redirect goes back to the client as it is
	if err != nil {
		p.refuse(w, err)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	addr := r.Host
	if !strings.Contains(addr, ":") {
		addr += ":443"
	}
	upstream, err := p.dial(r.Context(), "tcp", addr)
	if err != nil {
		p.refuse(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = upstream.Close()
		http.Error(w, "no tunnel", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		_ = upstream.Close()
		return
	}
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.tunnels.Add(1)
	go func() {
		defer p.tunnels.Done()
		done := make(chan struct{}, 2)
		go func() {
			if n := buf.Reader.Buffered(); n > 0 {
				b, _ := buf.Reader.Peek(n)
				_, _ = upstream.Write(b)
			}
			_, _ = io.Copy(upstream, client)
			done <- struct{}{}
		}()
		go func() { _, _ = io.Copy(client, upstream); done <- struct{}{} }()
		<-done
		_ = client.Close()
		_ = upstream.Close()
		<-done
	}()
}
