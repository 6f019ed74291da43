// Package servicecmd is what every converge server binary shares: the flags and CONVERGE_*
// environment that configure it, the logger, and the readiness probe that migrates the store on
// first contact. Each flag's default is read from its environment variable, so
// `CONVERGE_POSTGRES_URL=... converge-knowledge` and `converge-knowledge --postgres-url ...` are
// the same; `--help` names the variable of every flag.
package servicecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/gen"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
)

// Needs says which backing stores a binary connects to; it decides which flags exist.
type Needs uint8

const (
	// NeedsPostgres adds --postgres-url and --migrate.
	NeedsPostgres Needs = 1 << iota
	// NeedsRedis adds --redis-url.
	NeedsRedis
)

// Flags configure one converge server binary.
type Flags struct {
	// Listen is the gRPC listen address.
	Listen string
	// MetricsListen is the Prometheus /metrics HTTP address; empty for none.
	MetricsListen string
	// TLSCert, TLSKey and TLSClientCA are PEM files; cert and key turn TLS on, the CA mutual TLS.
	TLSCert, TLSKey, TLSClientCA string
	// AuthTokens are accepted bearer tokens (each the operator principal, auth.StaticTokenPrincipal).
	AuthTokens []string
	// AuthFile is the auth file: principals, roles, hashed tokens, certificate identities
	// (auth.File); reloaded on SIGHUP.
	AuthFile string
	// AllowUnauthenticated permits a non-loopback listener without tokens or client certificates.
	AllowUnauthenticated bool
	// PostgresURL is the durable store.
	PostgresURL string
	// RedisURL is the hot store (locks, heartbeats).
	RedisURL string
	// Migrate applies pending migrations when the store first answers.
	Migrate bool
	// LogFormat is "text" or "json".
	LogFormat string
	// LogLevel is "debug", "info", "warn" or "error".
	LogLevel string
	// LimitFlags are the resource limits (limits.go).
	LimitFlags
}

// Bind registers the flags on cmd, with defaults from the CONVERGE_* environment.
func (f *Flags) Bind(cmd *cobra.Command, defaultListen string, needs Needs) {
	fs := cmd.Flags()
	fs.StringVar(&f.Listen, "listen", env("CONVERGE_LISTEN", defaultListen), "gRPC listen address [CONVERGE_LISTEN]")
	fs.StringVar(&f.MetricsListen, "metrics-listen", env("CONVERGE_METRICS_LISTEN", ""), "Prometheus /metrics HTTP address, empty for none [CONVERGE_METRICS_LISTEN]")
	fs.StringVar(&f.TLSCert, "tls-cert", env("CONVERGE_TLS_CERT", ""), "server certificate PEM file; with --tls-key turns TLS on [CONVERGE_TLS_CERT]")
	fs.StringVar(&f.TLSKey, "tls-key", env("CONVERGE_TLS_KEY", ""), "server private key PEM file [CONVERGE_TLS_KEY]")
	fs.StringVar(&f.TLSClientCA, "tls-client-ca", env("CONVERGE_TLS_CLIENT_CA", ""), "client CA PEM file; turns mutual TLS on [CONVERGE_TLS_CLIENT_CA]")
	fs.StringSliceVar(&f.AuthTokens, "auth-token", splitList(os.Getenv("CONVERGE_AUTH_TOKENS")), "accepted bearer token, repeatable; each is the principal \"operator\" (role operator): give other callers an --auth-file [CONVERGE_AUTH_TOKENS, comma-separated; or CONVERGE_AUTH_TOKENS_FILE, one per line]")
	fs.StringVar(&f.AuthFile, "auth-file", env("CONVERGE_AUTH_FILE", ""), "auth file (YAML or JSON): principals with roles, sha256 token hashes and mTLS certificate identities; reloaded on SIGHUP [CONVERGE_AUTH_FILE]")
	fs.BoolVar(&f.AllowUnauthenticated, "allow-unauthenticated", envBool("CONVERGE_ALLOW_UNAUTHENTICATED"), "serve a non-loopback address without an auth file, tokens or client certificates [CONVERGE_ALLOW_UNAUTHENTICATED]")
	fs.StringVar(&f.LogFormat, "log-format", env("CONVERGE_LOG_FORMAT", "text"), "log format: text or json [CONVERGE_LOG_FORMAT]")
	fs.StringVar(&f.LogLevel, "log-level", env("CONVERGE_LOG_LEVEL", "info"), "log level: debug, info, warn or error [CONVERGE_LOG_LEVEL]")
	f.LimitFlags.bind(fs)
	if needs&NeedsPostgres != 0 {
		fs.StringVar(&f.PostgresURL, "postgres-url", env("CONVERGE_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/converge?sslmode=disable"), "Postgres URL [CONVERGE_POSTGRES_URL, or a file named by CONVERGE_POSTGRES_URL_FILE]")
		fs.BoolVar(&f.Migrate, "migrate", envBool("CONVERGE_MIGRATE"), "apply pending schema migrations when Postgres first answers [CONVERGE_MIGRATE]")
	}
	if needs&NeedsRedis != 0 {
		fs.StringVar(&f.RedisURL, "redis-url", env("CONVERGE_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL [CONVERGE_REDIS_URL, or a file named by CONVERGE_REDIS_URL_FILE]")
	}
}

// Logger builds the logger the flags ask for, writing to w.
func (f *Flags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.LogLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.LogLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", f.LogFormat)
	}
}

// ServerConfig answers the server configuration the flags describe, without services.
func (f *Flags) ServerConfig(name string, logger *slog.Logger) server.Config {
	cfg := server.Config{
		Name:                 name,
		ListenAddr:           f.Listen,
		AuthTokens:           f.AuthTokens,
		AuthFile:             f.AuthFile,
		AllowUnauthenticated: f.AllowUnauthenticated,
		MetricsAddr:          f.MetricsListen,
		Logger:               logger,
		Limits:               f.Limits(),
	}
	if f.TLSCert != "" || f.TLSKey != "" || f.TLSClientCA != "" {
		cfg.TLS = &server.TLSConfig{CertFile: f.TLSCert, KeyFile: f.TLSKey, ClientCAFile: f.TLSClientCA}
	}
	return cfg
}

// NewServer builds a server configured by the flags for services. Reflection describes them with
// the contracts' comments (gen.Files).
func (f *Flags) NewServer(name string, logger *slog.Logger, services ...server.Service) (*server.Server, error) {
	files, err := gen.Files()
	if err != nil {
		return nil, err
	}
	cfg := f.ServerConfig(name, logger)
	cfg.DescriptorResolver = files
	cfg.Services = services
	return cfg.Complete()
}

// Serve runs services on a server configured by the flags until ctx ends, then drains and stops.
func (f *Flags) Serve(ctx context.Context, name string, logger *slog.Logger, services ...server.Service) error {
	srv, err := f.NewServer(name, logger, services...)
	if err != nil {
		return err
	}
	return srv.ListenAndServe(ctx)
}

// Store is what ReadyProbe needs of a service's store (the embedded database.Postgres and
// database.SQLite handles provide it).
type Store interface {
	// Migrate applies pending migrations.
	Migrate(ctx context.Context) error
	// MigrationStatus reports each of the binary's migrations and whether it is applied.
	MigrationStatus(ctx context.Context) ([]database.MigrationStatus, error)
	// Ping answers whether the store answers.
	Ping(ctx context.Context) error
}

// SchemaBehindError is the readiness failure of a store whose schema lacks migrations this binary
// has: the service stays NOT_SERVING (rather than answer raw SQL errors about missing tables)
// until someone migrates it.
type SchemaBehindError struct {
	// Pending names the migrations not applied, in order.
	Pending []string
}

// PublicReason lets the server tell clients why the service is not ready (server.PublicReason).
func (e *SchemaBehindError) PublicReason() string { return e.Error() }

func (e *SchemaBehindError) Error() string {
	return fmt.Sprintf("schema is behind this binary: %d migration(s) not applied (%s); start with --migrate "+
		"(CONVERGE_MIGRATE=true) or run `converge migrate --postgres-url ...` first",
		len(e.Pending), strings.Join(e.Pending, ", "))
}

// ReadyProbe answers a server.Service Ready function for st. Until the schema is found current,
// each probe (with migrate set) applies pending migrations and then checks that none is left:
// a schema behind the binary fails readiness with a [SchemaBehindError] that names --migrate and
// `converge migrate`, so the service stays NOT_SERVING instead of answering raw SQL errors. The
// first time the schema is current, each of then runs once (in order, synchronously): that is
// where a service's background loops start, so none runs against a schema that is not there.
// Every probe then pings.
func ReadyProbe(st Store, migrate bool, then ...func()) func(context.Context) error {
	var (
		mu      sync.Mutex
		current bool
	)
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !current {
			if migrate {
				if err := st.Migrate(ctx); err != nil {
					return fmt.Errorf("migrate: %w", err)
				}
			}
			status, err := st.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			var pending []string
			for _, m := range status {
				if !m.Applied {
					pending = append(pending, m.Name)
				}
			}
			if len(pending) > 0 {
				return &SchemaBehindError{Pending: pending}
			}
			current = true
			for _, f := range then {
				f()
			}
		}
		return st.Ping(ctx)
	}
}

// AllReady combines probes: ready when every one is.
func AllReady(probes ...func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var errs []error
		for _, p := range probes {
			if err := p(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

// DurationFromEnv sets cmd's duration flag from the environment variable env when the command
// line does not give it; a value that is not a Go duration ("45s", "1m") is an error naming both.
// Call it first thing in RunE (flags parsed): registering the flag with the variable's value as
// its default would fail at start-up without saying which variable was wrong.
func DurationFromEnv(cmd *cobra.Command, flag, env string) error {
	v, ok := os.LookupEnv(env)
	if !ok || v == "" || cmd.Flags().Changed(flag) {
		return nil
	}
	if _, err := time.ParseDuration(v); err != nil {
		return fmt.Errorf("%s=%q (--%s): not a duration such as 30s or 1m: %w", env, v, flag, err)
	}
	return cmd.Flags().Set(flag, v)
}

// BoolFromEnv is DurationFromEnv for a boolean flag: a value strconv.ParseBool does not read
// (true, false, 1, 0, …) is an error naming the variable and the flag.
func BoolFromEnv(cmd *cobra.Command, flag, env string) error {
	v, ok := os.LookupEnv(env)
	if !ok || v == "" || cmd.Flags().Changed(flag) {
		return nil
	}
	if _, err := strconv.ParseBool(v); err != nil {
		return fmt.Errorf("%s=%q (--%s): want true or false", env, v, flag)
	}
	return cmd.Flags().Set(flag, v)
}

// Execute runs cmd and answers the process exit code, printing the error (once) on failure.
func Execute(cmd *cobra.Command) int {
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
		return 1
	}
	return 0
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envBool(name string) bool {
	v, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && v
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
