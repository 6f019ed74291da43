package clustertest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy is a TCP fault proxy on loopback: it forwards every connection accepted on Addr to
// Target, and on request delays the bytes (SetLatency), resets every open connection (Reset),
// cuts the link (Cut: open connections reset, new ones refused with a reset, until Restore), or
// takes its port down (Down: nothing listens, connections are refused, until Up).
type Proxy struct {
	// Addr is where the proxy listens; Target where it forwards.
	Addr, Target string

	latency atomic.Int64 // nanoseconds added before each forwarded chunk
	cut     atomic.Bool
	resets  atomic.Int64

	mu       sync.Mutex
	lis      net.Listener // nil while down
	reserved int          // NewProxyDown's bound socket that holds Addr until the first Up (-1: none)
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to target until Close.
func NewProxy(target string) (*Proxy, error) {
	p, err := NewProxyDown(target)
	if err != nil {
		return nil, err
	}
	return p, p.Up()
}

// NewProxyDown answers a proxy to target on a free loopback port that nothing listens on until
// Up: what an unreachable server looks like (connection refused). The port stays the proxy's
// meanwhile (on Linux a socket bound to it, not listening: reserveLoopback).
func NewProxyDown(target string) (*Proxy, error) {
	fd, addr, err := reserveLoopback()
	if err != nil {
		return nil, err
	}
	return &Proxy{Addr: addr, Target: target, conns: map[net.Conn]struct{}{}, reserved: fd}, nil
}

// StartProxy is NewProxy, closed when tb ends.
func StartProxy(tb TB, target string) *Proxy {
	tb.Helper()
	p, err := NewProxy(target)
	if err != nil {
		tb.Fatalf("clustertest: proxy to %s: %v", target, err)
	}
	tb.Cleanup(p.Close)
	return p
}

// Up listens on Addr (again) and forwards what it accepts.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		return nil
	}
	var lis net.Listener
	var err error
	if p.reserved >= 0 {
		lis, err = listenReserved(p.reserved)
		p.reserved = -1
	} else {
		lis, err = net.Listen("tcp", p.Addr)
	}
	if err != nil {
		return err
	}
	p.lis = lis
	p.wg.Add(1)
	go p.accept(lis)
	return nil
}

// Down stops listening (new connections are refused) and resets every open connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	lis := p.lis
	p.lis = nil
	p.mu.Unlock()
	if lis != nil {
		_ = lis.Close()
	}
	p.resetAll()
}

func (p *Proxy) accept(lis net.Listener) {
	defer p.wg.Done()
	for {
		c, err := lis.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// reset closes c with a TCP RST (linger 0), not a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	u, err := net.DialTimeout("tcp", p.Target, 5*time.Second)
	if err != nil {
		reset(c)
		return
	}
	p.track(c, true)
	p.track(u, true)
	defer func() {
		p.track(c, false)
		p.track(u, false)
		_ = c.Close()
		_ = u.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { p.copy(u, c); done <- struct{}{} }()
	go func() { p.copy(c, u); done <- struct{}{} }()
	<-done
}

// copy forwards src to dst chunk by chunk, each chunk after the current latency.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if p.cut.Load() {
				reset(dst)
				reset(src)
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				reset(src)
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			reset(dst)
			return
		}
	}
}

// SetLatency delays every forwarded chunk by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Reset resets every open connection (both sides); new ones go through. It answers how many
// connections it reset.
func (p *Proxy) Reset() int {
	n := p.resetAll()
	p.resets.Add(int64(n))
	return n
}

func (p *Proxy) resetAll() int {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		reset(c)
	}
	return len(conns)
}

// Cut resets every open connection and refuses new ones (accepted, then reset) until Restore.
func (p *Proxy) Cut() {
	p.cut.Store(true)
	p.Reset()
}

// Restore ends a Cut.
func (p *Proxy) Restore() { p.cut.Store(false) }

// Resets answers how many connections Reset and Cut have reset.
func (p *Proxy) Resets() int64 { return p.resets.Load() }

// Close stops the proxy and resets its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.reserved >= 0 {
		releaseReserved(p.reserved)
		p.reserved = -1
	}
	p.mu.Unlock()
	p.Down()
	p.Cut()
	p.wg.Wait()
}
