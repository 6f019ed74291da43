package database

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// defaultConnectTimeout bounds one connection attempt (dial, TLS, startup) when the URL does not
// set connect_timeout, so that a black-holed host makes Ping fail instead of hang.
const defaultConnectTimeout = 10 * time.Second

// redactedPassword replaces passwords in URLs that are printed.
const redactedPassword = "xxxxx"

// OpenPostgres parses rawURL and returns a pgx pool for it.
//
// The pool connects lazily: OpenPostgres fails only when the URL is invalid, never because
// Postgres is down or unreachable. Callers check readiness with [PingPostgres] (a gRPC server
// reports NOT_SERVING until it succeeds) and keep retrying.
//
// rawURL must be a URL, postgres://user:password@host:port/database?param=value; every libpq
// parameter pgx understands may be given as a query parameter (sslmode, connect_timeout, ...),
// plus pgxpool's pool_* parameters. Errors name the part of the URL that is wrong and never
// contain the password. Honours [WithService] and [WithMaxConns].
func OpenPostgres(ctx context.Context, rawURL string, opts ...Option) (*pgxpool.Pool, error) {
	config, err := ParsePostgresConfig(rawURL, opts...)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("database: open Postgres pool for %s: %w", RedactURL(rawURL), err)
	}
	return pool, nil
}

// ParsePostgresConfig is the parsing half of [OpenPostgres]: it validates rawURL and returns the
// pool configuration with converge's defaults applied (application_name from [WithService],
// a connect timeout, [WithMaxConns], [WithTracer], [WithSessions]).
func ParsePostgresConfig(rawURL string, opts ...Option) (*pgxpool.Config, error) {
	o := collectOptions(opts)
	if err := validatePostgresURL(rawURL); err != nil {
		return nil, err
	}
	config, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		// pgx redacts the password from its message on a best-effort basis and keeps the raw URL
		// in a public field of the error, so the error is not wrapped and its text is scrubbed
		// once more here.
		msg := scrubSecret(err.Error(), urlSecret(rawURL))
		return nil, fmt.Errorf("database: invalid Postgres URL: %s", msg)
	}
	if o.service != "" {
		if _, set := config.ConnConfig.RuntimeParams["application_name"]; !set {
			config.ConnConfig.RuntimeParams["application_name"] = "converge-" + o.service
		}
	}
	if config.ConnConfig.ConnectTimeout == 0 {
		config.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if o.maxConns > 0 {
		config.MaxConns = o.maxConns
	}
	if o.tracer != nil {
		config.ConnConfig.Tracer = o.tracer
	}
	if o.sessions != nil {
		config.AfterConnect, config.BeforeClose = o.sessions.afterConnect, o.sessions.beforeClose
	}
	return config, nil
}

// PingPostgres checks that pool can reach Postgres and run a statement. It opens a connection if
// the pool has none, so it is the readiness check of a service that opened its pool lazily.
func PingPostgres(ctx context.Context, pool *pgxpool.Pool) error {
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: ping Postgres: %w", err)
	}
	return nil
}

// validatePostgresURL checks the parts of a Postgres URL that net/url can see, so that the
// common mistakes get an error naming the part instead of pgx's generic "cannot parse".
func validatePostgresURL(rawURL string) error {
	if strings.TrimSpace(rawURL) == "" {
		return errors.New("database: Postgres URL is empty")
	}
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return errors.New("database: invalid Postgres URL: want postgres://user:password@host:port/database, " +
			"keyword/value connection strings are not supported")
	}
	if scheme != "postgres" && scheme != "postgresql" {
		return fmt.Errorf("database: invalid Postgres URL: scheme %q is not postgres or postgresql", scheme)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error repeats the whole URL, password included; keep only the reason.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("database: invalid Postgres URL: %s", scrubSecret(err.Error(), urlSecret(rawURL)))
	}
	if port := u.Port(); port != "" && !strings.Contains(u.Host, ",") {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("database: invalid Postgres URL %s: port %q is not between 1 and 65535", RedactURL(rawURL), port)
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); strings.Contains(db, "/") {
		return fmt.Errorf("database: invalid Postgres URL %s: database name %q contains '/'", RedactURL(rawURL), db)
	}
	return nil
}

// RedactURL returns rawURL with its password (in the user info or in password/sslpassword query
// parameters) replaced by "xxxxx", for logs and error messages. A URL that does not parse is
// returned with whatever looks like its password masked.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return scrubSecret(rawURL, urlSecret(rawURL))
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redactedPassword)
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for _, key := range []string{"password", "sslpassword"} {
			if q.Has(key) {
				q.Set(key, redactedPassword)
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// urlSecret finds the password of a URL textually, without parsing it, so that it can be scrubbed
// from messages about URLs that do not parse. It returns "" when there is no password.
func urlSecret(rawURL string) string {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	// The user info ends at the last '@' before the query.
	rest, _, _ = strings.Cut(rest, "?")
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, password, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return ""
	}
	return password
}

// scrubSecret replaces every occurrence of secret in msg, raw and URL-escaped.
func scrubSecret(msg, secret string) string {
	if secret == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, secret, redactedPassword)
	if unescaped, err := url.PathUnescape(secret); err == nil && unescaped != "" {
		msg = strings.ReplaceAll(msg, unescaped, redactedPassword)
	}
	return msg
}
