package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/server"
)

func TestCompleteRefusesOpenNonLoopback(t *testing.T) {
	t.Parallel()

	certs := newTestPKI(t)
	tests := []struct {
		name    string
		cfg     server.Config
		wantErr string
	}{
		{name: "DefaultIsLoopback", cfg: server.Config{}},
		{name: "IPv4Loopback", cfg: server.Config{ListenAddr: "127.0.0.1:0"}},
		{name: "IPv6Loopback", cfg: server.Config{ListenAddr: "[::1]:7070"}},
		{name: "Localhost", cfg: server.Config{ListenAddr: "localhost:7070"}},
		{name: "AllInterfaces", cfg: server.Config{ListenAddr: "0.0.0.0:7070"}, wantErr: `refusing to listen on non-loopback address "0.0.0.0:7070" without authentication: give --auth-file (CONVERGE_AUTH_FILE), --auth-token (CONVERGE_AUTH_TOKENS) or --tls-client-ca (CONVERGE_TLS_CLIENT_CA), or accept unauthenticated calls with --allow-unauthenticated`},
		{name: "EmptyHost", cfg: server.Config{ListenAddr: ":7070"}, wantErr: "refusing to listen"},
		{name: "IPv6Any", cfg: server.Config{ListenAddr: "[::]:7070"}, wantErr: "refusing to listen"},
		{name: "Hostname", cfg: server.Config{ListenAddr: "registry.internal:7070"}, wantErr: "refusing to listen"},
		{name: "PublicWithTokens", cfg: server.Config{ListenAddr: ":7070", AuthTokens: []string{"t"}}},
		{name: "PublicAllowed", cfg: server.Config{ListenAddr: ":7070", AllowUnauthenticated: true}},
		{name: "PublicWithMTLS", cfg: server.Config{ListenAddr: ":7070", TLS: certs.serverMTLS()}},
		{name: "PublicWithTLSOnly", cfg: server.Config{ListenAddr: ":7070", TLS: certs.serverTLS()}, wantErr: "refusing to listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Logger = discardLogger()
			_, err := tt.cfg.Complete()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestCompleteValidates(t *testing.T) {
	t.Parallel()

	certs := newTestPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	missing := filepath.Join(t.TempDir(), "missing.pem")

	tests := []struct {
		name    string
		cfg     server.Config
		wantErr string
	}{
		{"CertWithoutKey", server.Config{TLS: &server.TLSConfig{CertFile: certs.serverCert}}, "TLS.CertFile is set but TLS.KeyFile is not"},
		{"KeyWithoutCert", server.Config{TLS: &server.TLSConfig{KeyFile: certs.serverKey}}, "TLS.KeyFile is set but TLS.CertFile is not"},
		{"CAWithoutPair", server.Config{TLS: &server.TLSConfig{ClientCAFile: certs.caCert}}, "TLS.ClientCAFile requires TLS.CertFile and TLS.KeyFile"},
		{"MissingCert", server.Config{TLS: &server.TLSConfig{CertFile: missing, KeyFile: certs.serverKey}}, "TLS.CertFile: stat " + missing},
		{"MissingCA", server.Config{TLS: &server.TLSConfig{CertFile: certs.serverCert, KeyFile: certs.serverKey, ClientCAFile: missing}}, "TLS.ClientCAFile: stat"},
		{"MismatchedPair", server.Config{TLS: &server.TLSConfig{CertFile: certs.serverCert, KeyFile: certs.clientKey}}, "load TLS key pair"},
		{"CANotPEM", server.Config{TLS: &server.TLSConfig{CertFile: certs.serverCert, KeyFile: certs.serverKey, ClientCAFile: notPEM}}, "contains no PEM certificate"},
		{"EmptyToken", server.Config{AuthTokens: []string{"ok", ""}}, "AuthTokens[1] is empty"},
		{"BadListenAddr", server.Config{ListenAddr: "7070"}, `invalid ListenAddr "7070"`},
		{"BadMetricsAddr", server.Config{MetricsAddr: "9090"}, `invalid MetricsAddr "9090"`},
		{"MetricsNeedGatherer", server.Config{MetricsAddr: "127.0.0.1:0", Registerer: registererOnly{prometheus.NewRegistry()}}, "Registerer is not a prometheus.Gatherer"},
		{"NilDesc", server.Config{Services: []server.Service{{Impl: &registryService{}}}}, "Services[0]: Desc is nil"},
		{"NilImpl", server.Config{Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc}}}, "Impl is nil"},
		{"WrongImpl", server.Config{Services: []server.Service{{Desc: &registryv1.RegistryService_ServiceDesc, Impl: "nope"}}}, "string does not implement registryv1.RegistryServiceServer"},
		{"BuiltIn", server.Config{Services: []server.Service{{Desc: &healthgrpc.Health_ServiceDesc, Impl: healthgrpc.UnimplementedHealthServer{}}}}, "grpc.health.v1.Health is built in"},
		{"Duplicate", server.Config{Services: []server.Service{registry(&registryService{}), registry(&registryService{})}}, "registered twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.cfg.Logger = discardLogger()
			_, err := tt.cfg.Complete()
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// registererOnly hides the Gatherer half of a registry.
type registererOnly struct{ prometheus.Registerer }

func TestCompleteSharedRegisterer(t *testing.T) {
	t.Parallel()

	// Two servers on one registry (e.g. prometheus.DefaultRegisterer) share
	// the gRPC metrics instead of failing.
	reg := prometheus.NewRegistry()
	for range 2 {
		_, err := server.Config{Registerer: reg, Logger: discardLogger()}.Complete()
		require.NoError(t, err)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()

	certs := newTestPKI(t)

	t.Run("ServerTLS", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, server.Config{TLS: certs.serverTLS()})

		conn := ts.dial(t, grpc.WithTransportCredentials(credentials.NewTLS(certs.clientTLS(false))))
		require.Equal(t, serving, checkHealth(t, conn, ""))

		// A plaintext client cannot talk to it.
		plain := ts.dial(t)
		_, err := healthgrpc.NewHealthClient(plain).Check(t.Context(), &healthgrpc.HealthCheckRequest{})
		require.Error(t, err)
	})

	t.Run("MutualTLS", func(t *testing.T) {
		t.Parallel()
		ts := startServer(t, server.Config{TLS: certs.serverMTLS()})

		conn := ts.dial(t, grpc.WithTransportCredentials(credentials.NewTLS(certs.clientTLS(true))))
		require.Equal(t, serving, checkHealth(t, conn, ""))

		// Without a client certificate the handshake fails.
		noCert := ts.dial(t, grpc.WithTransportCredentials(credentials.NewTLS(certs.clientTLS(false))))
		_, err := healthgrpc.NewHealthClient(noCert).Check(t.Context(), &healthgrpc.HealthCheckRequest{})
		require.Error(t, err)
	})
}

// testPKI is a CA with a server certificate for localhost and a client
// certificate, written as PEM files to a temporary directory.
type testPKI struct {
	caCert                string
	serverCert, serverKey string
	clientCert, clientKey string
	caPool                *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()

	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "converge test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	p := &testPKI{caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	p.caCert = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)

	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		require.NoError(t, err)
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", keyDER)
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func (p *testPKI) serverTLS() *server.TLSConfig {
	return &server.TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey}
}

func (p *testPKI) serverMTLS() *server.TLSConfig {
	return &server.TLSConfig{CertFile: p.serverCert, KeyFile: p.serverKey, ClientCAFile: p.caCert}
}

// clientTLS trusts the test CA and, if withCert, presents the client
// certificate.
func (p *testPKI) clientTLS(withCert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: p.caPool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
		if err != nil {
			panic(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	return path
}
