package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/server"
)

// whoService answers GetLock with the caller's principal as the holder (auth.FromContext), so a
// test sees what the server authenticated.
type whoService struct {
	registryv1.UnimplementedRegistryServiceServer
}

func (whoService) GetLock(ctx context.Context, _ *registryv1.GetLockRequest) (*registryv1.GetLockResponse, error) {
	p, ok := auth.FromContext(ctx)
	holder := "nobody"
	if ok {
		holder = p.Name
	}
	return &registryv1.GetLockResponse{Lock: &registryv1.Lock{Holder: holder}}, nil
}

func (whoService) AcquireLock(context.Context, *registryv1.AcquireLockRequest) (*registryv1.AcquireLockResponse, error) {
	return &registryv1.AcquireLockResponse{Granted: true}, nil
}

func writeAuthFile(t *testing.T, path, doc string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
}

// twoPrincipals is an auth file: tok-ops an operator, tok-dash read-only, and the test PKI's
// client certificate (CN "client") an agent.
func twoPrincipals() string {
	return fmt.Sprintf(`principals:
  - {name: ops, roles: [operator], token_sha256: ["%s"]}
  - {name: dash, roles: [read-only], token_sha256: ["%s"]}
  - {name: pool-a, roles: [agent], certificates: [{cn: client}]}
`, auth.HashToken("tok-ops"), auth.HashToken("tok-dash"))
}

func getLock(ctx context.Context, conn *grpc.ClientConn) (string, error) {
	res, err := registryv1.NewRegistryServiceClient(conn).GetLock(ctx, &registryv1.GetLockRequest{Resource: "a.go"})
	return res.GetLock().GetHolder(), err
}

func TestAuthFilePrincipalsAndPolicy(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	writeAuthFile(t, path, twoPrincipals())
	ts := startServer(t, server.Config{AuthFile: path, AuthTokens: []string{"tok-plain"},
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: whoService{}}}})
	conn := ts.dial(t)
	client := registryv1.NewRegistryServiceClient(conn)

	// The handler sees who called.
	for tok, want := range map[string]string{"tok-ops": "ops", "tok-dash": "dash", "tok-plain": auth.StaticTokenPrincipal} {
		who, err := getLock(withToken(t.Context(), tok), conn)
		require.NoError(t, err, tok)
		require.Equal(t, want, who)
	}

	// A read-only principal may not lock: PermissionDenied naming the method and the roles.
	_, err := client.AcquireLock(withToken(t.Context(), "tok-dash"), validLock())
	require.Equal(t, codes.PermissionDenied, status.Code(err))
	require.Equal(t, `principal "dash" may not call /converge.registry.v1.RegistryService/AcquireLock: it needs one of the roles operator, agent`,
		status.Convert(err).Message())
	_, err = client.AcquireLock(withToken(t.Context(), "tok-ops"), validLock())
	require.NoError(t, err)

	// Policy is checked before validation: a refused caller learns nothing of the rules.
	_, err = client.AcquireLock(withToken(t.Context(), "tok-dash"), &registryv1.AcquireLockRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err))

	_, err = getLock(withToken(t.Context(), "tok-unknown"), conn)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}

// startServerKeep is startServer that also answers the *server.Server (for ReloadAuth).
func startServerKeep(t *testing.T, cfg server.Config) (*server.Server, *grpc.ClientConn, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	cfg.DrainDelay = -1
	srv, err := cfg.Complete()
	require.NoError(t, err)
	lis := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ctx, lis) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	ts := &testServer{lis: lis}
	return srv, ts.dial(t), logs
}

func TestAuthFileReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	writeAuthFile(t, path, twoPrincipals())
	srv, conn, logs := startServerKeep(t, server.Config{AuthFile: path,
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: whoService{}}}})

	_, err := getLock(withToken(t.Context(), "tok-dash"), conn)
	require.NoError(t, err)

	// dash's token is revoked, a new principal added.
	writeAuthFile(t, path, fmt.Sprintf(`principals: [{name: ops2, roles: [operator], token_sha256: ["%s"]}]`, auth.HashToken("tok-new")))
	require.NoError(t, srv.ReloadAuth())
	_, err = getLock(withToken(t.Context(), "tok-dash"), conn)
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	who, err := getLock(withToken(t.Context(), "tok-new"), conn)
	require.NoError(t, err)
	require.Equal(t, "ops2", who)

	// A broken file keeps the previous principals, and says so in the log.
	writeAuthFile(t, path, `principals: [{name: x, roles: [superuser], token_sha256: ["00"]}]`)
	require.Error(t, srv.ReloadAuth())
	who, err = getLock(withToken(t.Context(), "tok-new"), conn)
	require.NoError(t, err)
	require.Equal(t, "ops2", who)
	require.Contains(t, logs.String(), "auth file not reloaded: keeping the previous principals")
}

func TestAuthFileRefusedAtStart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "auth.yaml")
	writeAuthFile(t, path, `principals: [{name: x, roles: [root], token_sha256: ["00"]}]`)
	_, err := server.Config{AuthFile: path, Logger: discardLogger()}.Complete()
	require.ErrorContains(t, err, `unknown role "root"`)
	_, err = server.Config{AuthFile: filepath.Join(t.TempDir(), "none.yaml"), Logger: discardLogger()}.Complete()
	require.ErrorContains(t, err, "no such file")
}

func TestMutualTLSPrincipals(t *testing.T) {
	t.Parallel()
	certs := newTestPKI(t)
	path := filepath.Join(t.TempDir(), "auth.yaml")
	writeAuthFile(t, path, twoPrincipals())
	ts := startServer(t, server.Config{TLS: certs.serverMTLS(), AuthFile: path,
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: whoService{}}}})
	conn := ts.dial(t, grpc.WithTransportCredentials(credentials.NewTLS(certs.clientTLS(true))))

	// The certificate alone authenticates as the principal its CN maps to.
	who, err := getLock(t.Context(), conn)
	require.NoError(t, err)
	require.Equal(t, "pool-a", who)
	// A token on the same connection takes precedence.
	who, err = getLock(withToken(t.Context(), "tok-ops"), conn)
	require.NoError(t, err)
	require.Equal(t, "ops", who)

	// An mTLS server with no auth file: every certificate of its CA is an operator.
	open := startServer(t, server.Config{TLS: certs.serverMTLS(),
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: whoService{}}}})
	who, err = getLock(t.Context(), open.dial(t, grpc.WithTransportCredentials(credentials.NewTLS(certs.clientTLS(true)))))
	require.NoError(t, err)
	require.Equal(t, "cert:client", who)
}

func TestMutualTLSUnmappedCertificate(t *testing.T) {
	t.Parallel()
	certs := newTestPKI(t)
	path := filepath.Join(t.TempDir(), "auth.yaml")
	writeAuthFile(t, path, `principals: [{name: ops, roles: [operator], certificates: [{cn: someone-else}]}]`)
	ts := startServer(t, server.Config{TLS: certs.serverMTLS(), AuthFile: path,
		Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: whoService{}}}})
	_, err := getLock(t.Context(), ts.dial(t, grpc.WithTransportCredentials(credentials.NewTLS(certs.clientTLS(true)))))
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), `client certificate (CN "client") maps to no principal`)
}

// --metrics-listen follows the gRPC listener's rules: a token when the server authenticates, and
// no open non-loopback address without one.
func TestMetricsFollowAuth(t *testing.T) {
	t.Parallel()
	addr, metricsAddr := freeAddr(t), freeAddr(t)
	srv, err := server.Config{ListenAddr: addr, MetricsAddr: metricsAddr, AuthTokens: []string{"tok"}, Logger: discardLogger(), DrainDelay: -1}.Complete()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	get := func(token string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		_ = res.Body.Close()
		return res.StatusCode
	}
	require.Eventually(t, func() bool { return get("tok") == http.StatusOK }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusUnauthorized, get(""))
	require.Equal(t, http.StatusUnauthorized, get("wrong"))

	_, err = server.Config{MetricsAddr: "0.0.0.0:9090", Logger: discardLogger()}.Complete()
	require.ErrorContains(t, err, `refusing to serve metrics on non-loopback address "0.0.0.0:9090" without authentication`)
	_, err = server.Config{MetricsAddr: "0.0.0.0:9090", AllowUnauthenticated: true, Logger: discardLogger()}.Complete()
	require.NoError(t, err)
}
