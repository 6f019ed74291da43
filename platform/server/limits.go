package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/auth"
)

// Defaults of Limits, applied by Complete to zero-valued fields.
const (
	// DefaultMaxConnections bounds the open connections of a server: far below a process's file
	// descriptors (which the stores, git and checks need too).
	DefaultMaxConnections = 1024
	// DefaultMaxConcurrentStreams bounds the calls in flight on one connection (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS): a client that wants more opens another connection.
	DefaultMaxConcurrentStreams = 256
	// DefaultMaxConnectionIdle closes a connection that carried no call for this long (the
	// client reconnects transparently when it needs to).
	DefaultMaxConnectionIdle = 15 * time.Minute
	// DefaultKeepaliveMinTime is the shortest interval between a client's keepalive pings; a
	// client pinging more often is disconnected (GOAWAY "too_many_pings").
	DefaultKeepaliveMinTime = 10 * time.Second
	// DefaultStreamsPerPrincipal bounds the streaming calls (WatchExecution, VerifyStream,
	// RunTask) one principal holds open at once.
	DefaultStreamsPerPrincipal = 256
	// AnonymousPrincipal is the quota bucket of every caller of a server that authenticates
	// nobody (converge dev without a token): they share one.
	AnonymousPrincipal = "anonymous"
	// StreamsQuota is the name of the quota on streaming calls, in ResourceExhausted messages.
	StreamsQuota = "streams per principal"
)

// Limits bound what callers may hold of a server, so that no caller (nor a crowd of idle
// connections) exhausts its file descriptors, memory or store connections, and health keeps
// answering. Zero fields take the defaults above; a negative value turns a limit off.
type Limits struct {
	// MaxConnections is the most connections open at once. At the limit, a new connection
	// closes the one that has carried no call for the longest time (an idle client reconnects
	// when it needs to), so that a health probe or an operator always gets in; when every
	// connection has a call in flight the new one is closed at once.
	MaxConnections int
	// MaxConcurrentStreams is the most calls in flight on one connection.
	MaxConcurrentStreams uint32
	// MaxConnectionIdle closes connections without a call for that long.
	MaxConnectionIdle time.Duration
	// KeepaliveMinTime is the keepalive enforcement policy: pings more frequent than this end
	// the connection. Pings without a call in flight are allowed (long polls and watch
	// streams keep idle connections up).
	KeepaliveMinTime time.Duration
	// StreamsPerPrincipal is the most streaming calls one principal (auth.FromContext; every
	// caller of an unauthenticated server is AnonymousPrincipal) holds open at once, on every
	// connection together; more are answered ResourceExhausted naming the quota. Health and
	// reflection streams do not count.
	StreamsPerPrincipal int
	// Quotas are more per-principal concurrency quotas on given methods (unary or streaming),
	// e.g. the Verifier's verifications.
	Quotas []Quota
}

// Quota bounds the calls of some methods one principal has in flight at once.
type Quota struct {
	// Name names the quota in the ResourceExhausted message, e.g. "verifications per principal".
	Name string
	// Methods are full method names ("/converge.verifier.v1.VerifierService/Verify").
	Methods []string
	// PerPrincipal is the most calls in flight per principal; 0 or less turns it off.
	PerPrincipal int
}

// completeLimits applies the defaults.
func completeLimits(l Limits) Limits {
	if l.MaxConnections == 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if l.MaxConnectionIdle == 0 {
		l.MaxConnectionIdle = DefaultMaxConnectionIdle
	}
	if l.KeepaliveMinTime <= 0 {
		l.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	if l.StreamsPerPrincipal == 0 {
		l.StreamsPerPrincipal = DefaultStreamsPerPrincipal
	}
	return l
}

// limitOptions are the grpc.Server options of the limits.
func (s *Server) limitOptions() []grpc.ServerOption {
	l := s.cfg.Limits
	params := keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}
	if l.MaxConnectionIdle > 0 {
		params.MaxConnectionIdle = l.MaxConnectionIdle
	}
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: true,
		}),
		grpc.StatsHandler(s.conns),
	}
}

// --- connections ---

// connTracker is the listener's accounting of open connections and of the calls each carries:
// the listener side counts connections and picks whom to close at the limit; the stats side
// (a grpc stats.Handler) counts each connection's calls in flight.
type connTracker struct {
	max    int
	logger interface {
		Warn(msg string, args ...any)
	}

	mu      sync.Mutex
	conns   map[string]*trackedConn // by remote address
	refused int
}

func newConnTracker(max int, logger interface{ Warn(string, ...any) }) *connTracker {
	return &connTracker{max: max, logger: logger, conns: map[string]*trackedConn{}}
}

// trackedConn is an accepted connection while it is open.
type trackedConn struct {
	net.Conn
	t      *connTracker
	key    string
	active int       // calls in flight (under t.mu)
	last   time.Time // when it was accepted or last ended a call (under t.mu)
	once   sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		if c.t.conns[c.key] == c {
			delete(c.t.conns, c.key)
		}
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// limitListener applies the tracker to the connections lis accepts.
type limitListener struct {
	net.Listener
	t *connTracker
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc := l.t.admit(c); tc != nil {
			return tc, nil
		}
	}
}

// admit registers c, closing the longest-idle connection at the limit; nil when c was refused
// (and closed) because every open connection has a call in flight.
func (t *connTracker) admit(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, t: t, key: c.RemoteAddr().String(), last: time.Now()}
	t.mu.Lock()
	var victim *trackedConn
	if t.max > 0 && len(t.conns) >= t.max {
		for _, o := range t.conns {
			if o.active == 0 && (victim == nil || o.last.Before(victim.last)) {
				victim = o
			}
		}
		if victim == nil {
			t.refused++
			n := t.refused
			t.mu.Unlock()
			_ = c.Close()
			if n == 1 || n%1000 == 0 {
				t.logger.Warn("connection limit reached with every connection busy: refusing new connections",
					"max_connections", t.max, "refused", n)
			}
			return nil
		}
		delete(t.conns, victim.key)
	}
	if _, dup := t.conns[tc.key]; dup {
		// In-memory listeners (bufconn) give every connection one address: count it anyway.
		tc.key = fmt.Sprintf("%s#%p", tc.key, tc)
	}
	t.conns[tc.key] = tc
	t.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
	}
	return tc
}

// open answers the number of connections open.
func (t *connTracker) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

type connKey struct{}

// TagConn, HandleConn, TagRPC and HandleRPC make the tracker a stats.Handler: each call's begin
// and end move its connection's count of calls in flight.
func (t *connTracker) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.RemoteAddr == nil {
		return ctx
	}
	return context.WithValue(ctx, connKey{}, info.RemoteAddr.String())
}

func (t *connTracker) HandleConn(context.Context, stats.ConnStats) {}

func (t *connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

func (t *connTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	var d int
	switch s.(type) {
	case *stats.Begin:
		d = 1
	case *stats.End:
		d = -1
	default:
		return
	}
	key, _ := ctx.Value(connKey{}).(string)
	t.mu.Lock()
	if c, ok := t.conns[key]; ok {
		c.active += d
		c.last = time.Now()
	}
	t.mu.Unlock()
}

// --- per-principal quotas ---

// quotas counts the calls in flight of each (quota, principal).
type quotas struct {
	streams int
	byName  map[string]*Quota // full method → quota
	mu      sync.Mutex
	inUse   map[quotaKey]int
}

type quotaKey struct{ quota, principal string }

func newQuotas(l Limits) *quotas {
	q := &quotas{streams: l.StreamsPerPrincipal, byName: map[string]*Quota{}, inUse: map[quotaKey]int{}}
	for i := range l.Quotas {
		if l.Quotas[i].PerPrincipal <= 0 {
			continue
		}
		for _, m := range l.Quotas[i].Methods {
			q.byName[m] = &l.Quotas[i]
		}
	}
	return q
}

// principalName is the quota bucket of the call ctx belongs to.
func principalName(ctx context.Context) string {
	if p, ok := auth.FromContext(ctx); ok && p.Name != "" {
		return p.Name
	}
	return AnonymousPrincipal
}

// acquire takes one unit of each quota that applies; release gives them back.
func (q *quotas) acquire(ctx context.Context, method string, stream bool) (release func(), err error) {
	type limit struct {
		name string
		max  int
	}
	var limits []limit
	if stream && q.streams > 0 && countsAsStream(method) {
		limits = append(limits, limit{StreamsQuota, q.streams})
	}
	if qu, ok := q.byName[method]; ok {
		limits = append(limits, limit{qu.Name, qu.PerPrincipal})
	}
	if len(limits) == 0 {
		return func() {}, nil
	}
	who := principalName(ctx)
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, l := range limits {
		if q.inUse[quotaKey{l.name, who}] >= l.max {
			return nil, status.Errorf(codes.ResourceExhausted,
				"quota %q exhausted: principal %q already has %d calls of this kind in flight (the limit); end one and retry",
				l.name, who, l.max)
		}
	}
	for _, l := range limits {
		q.inUse[quotaKey{l.name, who}]++
	}
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		for _, l := range limits {
			k := quotaKey{l.name, who}
			if q.inUse[k]--; q.inUse[k] <= 0 {
				delete(q.inUse, k)
			}
		}
	}, nil
}

// countsAsStream says whether a streaming method counts against StreamsPerPrincipal: health
// watches and reflection do not (a load balancer and grpcurl must always get in).
func countsAsStream(method string) bool {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	switch svc {
	case healthgrpc.Health_ServiceDesc.ServiceName,
		reflectionv1.ServerReflection_ServiceDesc.ServiceName,
		reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName:
		return false
	}
	return true
}

func (s *Server) streamQuota(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	release, err := s.quotas.acquire(ss.Context(), info.FullMethod, info.IsServerStream || info.IsClientStream)
	if err != nil {
		return err
	}
	defer release()
	return handler(srv, ss)
}

// OpenConnections answers how many connections the server holds open (for tests and metrics).
func (s *Server) OpenConnections() int { return s.conns.open() }

// String describes the limits for the startup log.
func (l Limits) String() string {
	return fmt.Sprintf("max_connections=%d max_concurrent_streams=%d max_connection_idle=%s streams_per_principal=%d quotas=%d",
		l.MaxConnections, l.MaxConcurrentStreams, l.MaxConnectionIdle, l.StreamsPerPrincipal, len(l.Quotas))
}
