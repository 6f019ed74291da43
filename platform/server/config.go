package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"time"

	"buf.build/go/protovalidate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/reflect/protodesc"

	"github.com/converge-dev/converge/platform/auth"
)

// Defaults applied by Complete to zero-valued Config fields.
const (
	DefaultName               = "converge-dev"
	DefaultListenAddr         = "127.0.0.1:7070"
	DefaultDrainDelay         = 2 * time.Second
	DefaultShutdownTimeout    = 15 * time.Second
	DefaultReadyProbeInterval = 5 * time.Second
	DefaultMaxRecvMsgBytes    = 8 << 20 // 8 MiB
)

// Config describes a gRPC server. The zero value is a valid development
// server: loopback only, no TLS, no auth. Call Complete to validate it, apply
// defaults and build a runnable Server.
type Config struct {
	// Name identifies the server in logs, e.g. "registry" (default
	// "converge-dev").
	Name string

	// ListenAddr is the TCP address ListenAndServe binds (default
	// "127.0.0.1:7070"). It is also the address the open-server safety check
	// in Complete looks at.
	ListenAddr string

	// TLS enables TLS when CertFile and KeyFile are set, and mutual TLS when
	// ClientCAFile is also set. Nil or empty means plaintext.
	TLS *TLSConfig

	// AuthTokens are accepted bearer tokens ("authorization: Bearer
	// <token>"), each the principal auth.StaticTokenPrincipal with the role
	// operator. Every RPC except health and reflection must then be
	// authenticated.
	AuthTokens []string

	// AuthFile is an auth file (auth.File, YAML or JSON): principals with
	// roles, hashed tokens and mTLS certificate identities. It is read by
	// Complete and again on SIGHUP while serving (a file that does not load
	// then keeps the previous one, and is logged). Set, every RPC except
	// health and reflection is authenticated and checked against
	// auth.Policy (PermissionDenied when the principal holds none of the
	// method's roles).
	AuthFile string

	// AllowUnauthenticated must be set to listen on a non-loopback address
	// with neither AuthTokens nor client certificates (TLS.ClientCAFile).
	// Without it Complete refuses, so that production never runs open by
	// accident (DESIGN §9).
	AllowUnauthenticated bool

	// MetricsAddr is the address of an HTTP server exposing Prometheus
	// metrics at /metrics, e.g. "0.0.0.0:9090". Empty turns it off; the
	// metrics are still collected and available from Server.MetricsHandler.
	MetricsAddr string

	// DrainDelay is how long health reports NOT_SERVING before GracefulStop
	// begins, so that load balancers stop sending new calls first (default
	// 2s). A negative value means no delay.
	DrainDelay time.Duration

	// ShutdownTimeout bounds GracefulStop: calls still running after it are
	// cut by Stop (default 15s). The longest shutdown is DrainDelay +
	// ShutdownTimeout.
	ShutdownTimeout time.Duration

	// ReadyProbeInterval is how often a ready service's Ready probe is
	// repeated (default 5s).
	ReadyProbeInterval time.Duration

	// MaxRecvMsgBytes is the largest request message accepted (default 8 MiB).
	MaxRecvMsgBytes int

	// Logger receives server and request logs (default: text to stderr).
	Logger *slog.Logger

	// Registerer is where the gRPC metrics are registered. Nil means a new
	// registry per server (with Go and process collectors), so that tests and
	// several servers in one process do not collide. To serve MetricsAddr it
	// must also be a prometheus.Gatherer, as *prometheus.Registry is.
	Registerer prometheus.Registerer

	// DescriptorResolver is what server reflection describes services with.
	// Generated Go code carries no source comments, so pass the descriptors
	// with comments (from the gen module) to make `grpcurl describe` show
	// them. What it does not know (health, reflection, error detail types)
	// is answered from protoregistry.GlobalFiles, which is also what nil
	// means.
	DescriptorResolver protodesc.Resolver

	// ExtensionResolver is what server reflection looks extensions up in.
	// Nil means protoregistry.GlobalTypes.
	ExtensionResolver reflection.ExtensionResolver

	// DisableTracing turns off the OpenTelemetry stats handler. It is on by
	// default when the process has set an OpenTelemetry tracer provider, meter
	// provider or propagator (otel.Set…) before Complete, and uses them; with
	// none set it is left out, since it would only cost CPU (platform/telemetry).
	DisableTracing bool

	// Services are the gRPC services to serve. Health and reflection are
	// always added.
	Services []Service

	// Limits bound connections, streams and per-principal calls (limits.go); zero fields take
	// the defaults.
	Limits Limits
}

// TLSConfig names the PEM files for TLS.
type TLSConfig struct {
	// CertFile is the server certificate chain.
	CertFile string
	// KeyFile is the server private key.
	KeyFile string
	// ClientCAFile, when set, turns on mutual TLS: clients must present a
	// certificate signed by one of these CAs.
	ClientCAFile string
}

// Service registers one gRPC service implementation.
type Service struct {
	// Desc is the generated service descriptor, e.g.
	// &registryv1.RegistryService_ServiceDesc.
	Desc *grpc.ServiceDesc
	// Impl implements Desc.HandlerType.
	Impl any
	// Ready probes what the service depends on, typically its store. Health
	// reports the service NOT_SERVING until Ready returns nil, and again
	// whenever a later probe fails. Each call gets a context with a
	// deadline of 5s. Nil means always ready.
	Ready func(ctx context.Context) error
}

// readyProbeTimeout bounds each call to Service.Ready.
const readyProbeTimeout = 5 * time.Second

// completedConfig is a Config with defaults applied and everything loaded
// that can fail before serving.
type completedConfig struct {
	Config

	tlsConfig *tls.Config
	authTable *auth.Table
	gatherer  prometheus.Gatherer
	validator protovalidate.Validator
}

// Complete validates c, applies defaults, loads TLS material and builds a
// Server ready to Serve. c is not modified.
//
// It refuses a server that would accept unauthenticated calls from the
// network: no AuthTokens, no TLS.ClientCAFile, AllowUnauthenticated unset and
// a ListenAddr that is not loopback.
func (c Config) Complete() (*Server, error) {
	cc, err := c.complete()
	if err != nil {
		return nil, err
	}
	return newServer(cc)
}

func (c Config) complete() (*completedConfig, error) {
	cc := &completedConfig{Config: c}
	if cc.Name == "" {
		cc.Name = DefaultName
	}
	if cc.ListenAddr == "" {
		cc.ListenAddr = DefaultListenAddr
	}
	if cc.DrainDelay == 0 {
		cc.DrainDelay = DefaultDrainDelay
	} else if cc.DrainDelay < 0 {
		cc.DrainDelay = 0
	}
	if cc.ShutdownTimeout <= 0 {
		cc.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cc.ReadyProbeInterval <= 0 {
		cc.ReadyProbeInterval = DefaultReadyProbeInterval
	}
	if cc.MaxRecvMsgBytes <= 0 {
		cc.MaxRecvMsgBytes = DefaultMaxRecvMsgBytes
	}
	cc.Limits = completeLimits(cc.Limits)
	if cc.Logger == nil {
		cc.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cc.Logger = cc.Logger.With("server", cc.Name)

	if _, _, err := net.SplitHostPort(cc.ListenAddr); err != nil {
		return nil, fmt.Errorf("server: invalid ListenAddr %q: %w", cc.ListenAddr, err)
	}
	if cc.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(cc.MetricsAddr); err != nil {
			return nil, fmt.Errorf("server: invalid MetricsAddr %q: %w", cc.MetricsAddr, err)
		}
	}

	for i, tok := range cc.AuthTokens {
		if tok == "" {
			return nil, fmt.Errorf("server: AuthTokens[%d] is empty", i)
		}
	}
	table, err := cc.loadAuth()
	if err != nil {
		return nil, err
	}
	cc.authTable = table

	tlsConfig, err := loadTLS(cc.TLS)
	if err != nil {
		return nil, err
	}
	cc.tlsConfig = tlsConfig

	if !cc.authenticates() && !cc.AllowUnauthenticated && !isLoopbackAddr(cc.ListenAddr) {
		return nil, fmt.Errorf("server: refusing to listen on non-loopback address %q without authentication: "+
			unauthenticatedHint, cc.ListenAddr)
	}

	// /metrics follows the gRPC listener's rules (metrics.go): open only on loopback unless the
	// server authenticates (then it asks for a token too) or AllowUnauthenticated.
	if cc.MetricsAddr != "" && !cc.authenticates() && !cc.AllowUnauthenticated && !isLoopbackAddr(cc.MetricsAddr) {
		return nil, fmt.Errorf("server: refusing to serve metrics on non-loopback address %q without authentication: "+
			unauthenticatedHint, cc.MetricsAddr)
	}

	if err := validateServices(cc.Services); err != nil {
		return nil, err
	}

	if cc.Registerer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		)
		cc.Registerer = reg
	}
	cc.gatherer, _ = cc.Registerer.(prometheus.Gatherer)
	if cc.MetricsAddr != "" && cc.gatherer == nil {
		return nil, errors.New("server: MetricsAddr is set but Registerer is not a prometheus.Gatherer")
	}

	cc.validator, err = processValidator() // validator.go
	if err != nil {
		return nil, fmt.Errorf("server: build request validator: %w", err)
	}
	warmValidator(cc.validator, cc.Services)
	return cc, nil
}

// authenticates reports whether callers must prove who they are, by token or
// by client certificate.
func (cc *completedConfig) authenticates() bool {
	return len(cc.AuthTokens) > 0 || cc.AuthFile != "" || cc.mtls()
}

func (cc *completedConfig) mtls() bool { return cc.TLS != nil && cc.TLS.ClientCAFile != "" }

// loadAuth builds the principals table: the auth file's principals and the plain tokens. A
// verified client certificate no entry names is an operator only on a server with neither an
// auth file nor tokens (mTLS alone, as before auth files existed).
func (cc *completedConfig) loadAuth() (*auth.Table, error) {
	var f *auth.File
	if cc.AuthFile != "" {
		var err error
		if f, err = auth.LoadFile(cc.AuthFile); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	t, err := auth.NewTable(f, cc.AuthTokens, cc.AuthFile == "" && len(cc.AuthTokens) == 0)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return t, nil
}

// loadTLS checks and loads the TLS files. It returns nil for plaintext.
func loadTLS(t *TLSConfig) (*tls.Config, error) {
	if t == nil || (t.CertFile == "" && t.KeyFile == "" && t.ClientCAFile == "") {
		return nil, nil
	}
	switch {
	case t.CertFile == "" && t.KeyFile == "":
		return nil, errors.New("server: TLS.ClientCAFile requires TLS.CertFile and TLS.KeyFile")
	case t.CertFile == "":
		return nil, errors.New("server: TLS.KeyFile is set but TLS.CertFile is not; both are needed")
	case t.KeyFile == "":
		return nil, errors.New("server: TLS.CertFile is set but TLS.KeyFile is not; both are needed")
	}
	for _, f := range []struct{ field, path string }{
		{"TLS.CertFile", t.CertFile}, {"TLS.KeyFile", t.KeyFile}, {"TLS.ClientCAFile", t.ClientCAFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("server: %s: %w", f.field, err)
		}
	}

	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("server: load TLS key pair (cert %s, key %s): %w", t.CertFile, t.KeyFile, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server: TLS.ClientCAFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: TLS.ClientCAFile %s contains no PEM certificate", t.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// validateServices checks what grpc.Server.RegisterService would otherwise
// panic on, and duplicates.
func validateServices(services []Service) error {
	seen := make(map[string]bool, len(services))
	for i, svc := range services {
		if svc.Desc == nil {
			return fmt.Errorf("server: Services[%d]: Desc is nil", i)
		}
		name := svc.Desc.ServiceName
		if svc.Impl == nil {
			return fmt.Errorf("server: service %s: Impl is nil", name)
		}
		if seen[name] {
			return fmt.Errorf("server: service %s registered twice", name)
		}
		if builtinServices[name] {
			return fmt.Errorf("server: service %s is built in; do not register it", name)
		}
		seen[name] = true
		if svc.Desc.HandlerType != nil {
			want := reflect.TypeOf(svc.Desc.HandlerType).Elem()
			if got := reflect.TypeOf(svc.Impl); !got.Implements(want) {
				return fmt.Errorf("server: service %s: %v does not implement %v", name, got, want)
			}
		}
	}
	return nil
}

// builtinServices are registered on every server by newServer.
var builtinServices = map[string]bool{
	healthgrpc.Health_ServiceDesc.ServiceName:                  true,
	reflectionv1.ServerReflection_ServiceDesc.ServiceName:      true,
	reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName: true,
}

// isLoopbackAddr reports whether a host:port address can only be reached from
// this machine. Unspecified hosts ("", 0.0.0.0, ::) and names other than
// "localhost" are not loopback.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// unauthenticatedHint names what an operator sets (flags and environment) to serve a non-loopback
// address; programs embedding the server set the Config fields of the same names.
const unauthenticatedHint = "give --auth-file (CONVERGE_AUTH_FILE), --auth-token (CONVERGE_AUTH_TOKENS) or --tls-client-ca (CONVERGE_TLS_CLIENT_CA), " +
	"or accept unauthenticated calls with --allow-unauthenticated (CONVERGE_ALLOW_UNAUTHENTICATED=true); " +
	"embedding programs set Config.AuthFile, AuthTokens, TLS.ClientCAFile or AllowUnauthenticated"
