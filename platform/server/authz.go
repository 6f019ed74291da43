package server

import (
	"context"
	"crypto/x509"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	grpcmiddleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	grpcauth "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"

	"github.com/converge-dev/converge/platform/auth"
)

// Authentication and authorization: every call but health and reflection gets its caller's
// principal (a bearer token, else a verified mTLS client certificate, looked up in the server's
// auth.Table) put in its context, where handlers read it with auth.FromContext, and is checked
// against auth.Policy. The table is replaced whole on SIGHUP (ReloadAuth).

// openService reports whether a service stays open without authentication: load balancers and
// operators' grpcurl must reach health and reflection without a token.
func openService(fullMethod string) bool {
	name, _, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	switch name {
	case healthgrpc.Health_ServiceDesc.ServiceName,
		reflectionv1.ServerReflection_ServiceDesc.ServiceName,
		reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName:
		return true
	}
	return false
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if openService(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, err := s.authorize(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	wrapped := grpcmiddleware.WrapServerStream(ss)
	wrapped.WrappedContext = ctx
	return handler(srv, wrapped)
}

// authorize authenticates the call and checks the policy: ctx with the principal, or
// Unauthenticated (no or unknown credentials) / PermissionDenied (the method needs a role the
// principal lacks; the message names the method and the roles that may call it).
func (s *Server) authorize(ctx context.Context, fullMethod string) (context.Context, error) {
	p, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := auth.Authorize(fullMethod, p); err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return auth.NewContext(ctx, p), nil
}

// authenticate answers the caller's principal: its bearer token's if it sent one, else its
// verified client certificate's.
func (s *Server) authenticate(ctx context.Context) (auth.Principal, error) {
	table := s.authTable.Load()
	if token, err := grpcauth.AuthFromMD(ctx, "bearer"); err == nil {
		if p, ok := table.ByToken(token); ok {
			return p, nil
		}
		return auth.Principal{}, status.Error(codes.Unauthenticated, "invalid bearer token")
	}
	if cert := peerCertificate(ctx); cert != nil {
		if p, ok := table.ByCertificate(cert); ok {
			return p, nil
		}
		if !table.HasTokens() {
			return auth.Principal{}, status.Errorf(codes.Unauthenticated,
				"client certificate (CN %q) maps to no principal of this server's auth file", cert.Subject.CommonName)
		}
	}
	return auth.Principal{}, status.Error(codes.Unauthenticated, `missing bearer token: send metadata "authorization: Bearer <token>"`)
}

// peerCertificate answers the verified client certificate of the call's connection, or nil.
func peerCertificate(ctx context.Context) *x509.Certificate {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil
	}
	return info.State.VerifiedChains[0][0]
}

// ReloadAuth reads the auth file again and, if it loads, serves with it from the next call on.
// A file that does not load keeps the previous principals; the error is logged and returned.
// Serve calls it on SIGHUP.
func (s *Server) ReloadAuth() error {
	t, err := s.cfg.loadAuth()
	if err != nil {
		s.logger.Error("auth file not reloaded: keeping the previous principals", "file", s.cfg.AuthFile, "error", err)
		return err
	}
	s.authTable.Store(t)
	s.logger.Info("auth file reloaded", "file", s.cfg.AuthFile)
	return nil
}

// reloadOnHangup calls ReloadAuth on every SIGHUP until ctx ends, when the server has an auth
// file.
func (s *Server) reloadOnHangup(ctx context.Context) {
	if s.cfg.AuthFile == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = s.ReloadAuth()
			}
		}
	}()
}

// metricsAuth guards the /metrics listener like the gRPC one: on a server that authenticates,
// a scrape must carry the bearer token of a principal (any role; Prometheus'
// `authorization: {credentials_file: ...}`), else 401.
func (s *Server) metricsAuth(next http.Handler) http.Handler {
	if !s.cfg.authenticates() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if _, known := s.authTable.Load().ByToken(token); !ok || !strings.EqualFold(scheme, "bearer") || !known {
			w.Header().Set("WWW-Authenticate", `Bearer realm="converge metrics"`)
			http.Error(w, "metrics need a bearer token of this server's principals", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
