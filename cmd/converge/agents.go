package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/client"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/agent/worker"
	"github.com/converge-dev/converge/services/agent/workspace"
)

// agentPool is the local agents of `converge dev --agents N` and `converge run`: N workers in the
// process, each with its own data dir (mirror clones and worktrees), talking to the services
// through in-process calls to the server (localConn): the server's whole interceptor chain, the
// bearer token's identity, without the transport.
type agentPool struct {
	logger *slog.Logger
	// prefetch: each worker holds one assignment ahead (worker.Config.Prefetch).
	prefetch bool

	mu      sync.Mutex
	workers []*worker.Worker
	dir     string
	cancel  context.CancelFunc
	done    chan struct{} // closed when every worker's Run has returned
}

// create makes n workers (not running yet), each with its data dir under dir: dir/1, dir/2, ...
// Local repositories must be inside roots (nil: anywhere).
func (p *agentPool) create(n int, conn grpc.ClientConnInterface, dir string, roots []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var allowed *workspace.Roots
	if roots != nil {
		var err error
		if allowed, err = workspace.NewRoots(roots); err != nil {
			return fmt.Errorf("local agents: %w", err)
		}
	}
	suffix := randomHex(2) // instance ids stay unique across restarts on one data dir
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("agent-%d-%s", i, suffix)
		data := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(data, 0o755); err != nil {
			return fmt.Errorf("local agent %d: %w", i, err)
		}
		w, err := worker.New(worker.Config{
			InstanceID: id,
			Scheduler:  schedulerv1.NewSchedulerServiceClient(conn),
			Registry:   registryv1.NewRegistryServiceClient(conn),
			Knowledge:  knowledgev1.NewKnowledgeServiceClient(conn),
			DataDir:    data,
			Logger:     p.logger.With("agent", id),
			Roots:      allowed,
			Prefetch:   p.prefetch,
		})
		if err != nil {
			return fmt.Errorf("local agent %d: %w", i, err)
		}
		p.workers = append(p.workers, w)
	}
	p.dir = dir
	return nil
}

// agentRootsFromEnv answers the directories of $CONVERGE_ALLOWED_ROOTS (':'-separated), or def
// when it is not set.
func agentRootsFromEnv(def ...string) []string {
	v, ok := os.LookupEnv("CONVERGE_ALLOWED_ROOTS")
	if !ok {
		return def
	}
	out := []string{}
	for _, d := range filepath.SplitList(v) {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// first is the first worker, nil without any: the one the process's AgentService shows.
func (p *agentPool) first() *worker.Worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.workers) == 0 {
		return nil
	}
	return p.workers[0]
}

// run starts the workers; they work until stop.
func (p *agentPool) run(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.workers) == 0 || p.done != nil {
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range p.workers {
		wg.Go(func() {
			if err := w.Run(wctx); err != nil && wctx.Err() == nil {
				p.logger.Error("local agent stopped", "agent", w.InstanceID(), "err", err)
			}
		})
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	p.cancel, p.done = cancel, done
	p.logger.Info("local agents started", "agents", len(p.workers), "data", p.dir)
}

// stop drains the workers: each finishes its current assignment (cancelled once timeout passes)
// and claims nothing more. Workers still running after that are cancelled. With timeout 0 they are
// cancelled at once.
func (p *agentPool) stop(timeout time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return
	}
	if timeout > 0 {
		for _, w := range p.workers {
			w.Drain(timeout)
		}
		t := time.NewTimer(timeout + 2*time.Second)
		select {
		case <-p.done:
		case <-t.C:
			p.logger.Warn("local agents did not drain in time; cancelling them", "timeout", timeout)
		}
		t.Stop()
	}
	p.cancel()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.logger.Error("local agents did not stop within 30s of being cancelled")
	}
	p.done = nil
}

// dialSelf connects to the server the flags configure, at addr, as the process's own client: with
// the first bearer token, and over TLS when the server uses it (its own certificate, unverified:
// the address is this process's own listener; with mutual TLS the server's certificate is also
// the client's).
func dialSelf(f servicecmd.Flags, addr string) (*grpc.ClientConn, error) {
	o := client.Options{}
	if len(f.AuthTokens) > 0 {
		o.Token = f.AuthTokens[0]
	}
	if f.TLSCert != "" {
		o.TLS = true
		o.Config = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // our own listener
		if f.TLSClientCA != "" {
			cert, err := tls.LoadX509KeyPair(f.TLSCert, f.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("local client certificate: %w", err)
			}
			o.Config.Certificates = []tls.Certificate{cert}
		}
	}
	return client.Dial(addr, o)
}

// localConn is the local agents' connection to the server of the process. Once the server is
// built (serve), their unary calls run its handlers in the process (server.InProcess: the same
// interceptor chain, authenticated by the same bearer token as over the wire, the messages copied
// through the codec), which saves the gRPC transport on both sides: about a third of the agents'
// CPU and an eighth of the server's (issue 17, bench/PROFILE.md, branch p17local). Until then,
// and for streams, it is the connection to the server's own address (self). Without a bearer
// token on a server that authenticates callers by their client certificate (mutual TLS and no
// token), it stays on self: an in-process caller has no certificate.
type localConn struct {
	self   grpc.ClientConnInterface
	inproc atomic.Pointer[grpc.ClientConnInterface]
}

// serve makes the calls in-process to srv from now on, with token (f's first) as bearer token.
func (c *localConn) serve(srv *server.Server, f servicecmd.Flags) {
	token := ""
	if len(f.AuthTokens) > 0 {
		token = f.AuthTokens[0]
	}
	if token == "" && f.TLSClientCA != "" {
		return
	}
	conn := srv.InProcess(token, c.self)
	c.inproc.Store(&conn)
}

func (c *localConn) conn() grpc.ClientConnInterface {
	if p := c.inproc.Load(); p != nil {
		return *p
	}
	return c.self
}

func (c *localConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.conn().Invoke(ctx, method, args, reply, opts...)
}

func (c *localConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.conn().NewStream(ctx, desc, method, opts...)
}

// waitServing waits until the server behind conn reports SERVING.
func waitServing(ctx context.Context, conn grpc.ClientConnInterface) error {
	health := healthpb.NewHealthClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := health.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
