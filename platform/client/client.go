// Package client dials converge services the way every converge client does: plaintext on
// loopback or TLS, a bearer token on every call when one is given, and otelgrpc tracing when
// the process has set an OpenTelemetry provider or propagator.
package client

import (
	"context"
	"crypto/tls"
	"fmt"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/converge-dev/converge/platform/telemetry"
)

// Options are how to reach a service.
type Options struct {
	// Token is sent as "authorization: Bearer <token>" on every call; empty = none.
	Token string
	// TLS uses TLS with the system roots (or Config when set) instead of plaintext.
	TLS bool
	// Config is the TLS configuration when TLS is set; nil = system roots.
	Config *tls.Config
}

// Dial returns a client connection to addr (host:port). It does not block: the first call
// connects.
func Dial(addr string, o Options) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if o.TLS {
		cfg := o.Config
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg)
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, TransportOptions()...)
	if telemetry.OTelConfigured() {
		// Without a provider or propagator set the handler would only cost CPU (platform/telemetry).
		opts = append(opts, grpc.WithStatsHandler(otelgrpc.NewClientHandler()))
	}
	if o.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(newBearer(o.Token)))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

// The HTTP/2 flow-control windows of a converge client, the servers' own (platform/server's
// StreamWindowBytes and ConnWindowBytes; this package does not import the server's).
const (
	StreamWindowBytes = 1 << 20
	ConnWindowBytes   = 16 << 20
)

// TransportOptions are the transport settings of every converge client, for a caller that
// dials some other way (an in-memory listener in tests): static flow-control windows, so that
// grpc-go's BDP estimation is off. With it on, every response makes the client send a BDP ping
// and a connection WINDOW_UPDATE, and the server's ping after each request is answered: three
// writes per unary call instead of one on each side (bench/PROFILE.md, branch p17grpc).
func TransportOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(StreamWindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
	}
}

// bearer puts the token on every call. Its metadata is built once: grpc-go only reads the map
// (it copies it into the call's headers), so every call shares it.
type bearer struct {
	md map[string]string
}

func newBearer(token string) bearer {
	return bearer{md: map[string]string{"authorization": "Bearer " + token}}
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

// RequireTransportSecurity is false so tokens also work on loopback plaintext (dev, tests); the
// servers refuse plaintext on non-loopback addresses unless told otherwise.
func (b bearer) RequireTransportSecurity() bool { return false }
