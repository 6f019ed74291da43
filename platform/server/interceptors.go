package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"buf.build/go/protovalidate"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	grpcmiddleware "github.com/grpc-ecosystem/go-grpc-middleware/v2"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/converge-dev/converge/platform/grpcerr"
)

// RequestIDMetadataKey is the metadata key carrying the request id, both in
// requests (optional; one is generated when absent) and in response headers.
const RequestIDMetadataKey = "x-request-id"

// maxRequestIDLen bounds a client-supplied request id; longer or non-printable
// ids are replaced by a generated one so logs stay readable.
const maxRequestIDLen = 128

type requestIDKey struct{}

// RequestID returns the request id of the call ctx belongs to, or "" outside
// a call handled by a Server.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// interceptorChain returns the server's one interceptor chain, outermost
// first. Each step sees the call after the steps before it:
//
//  1. request id: read or generate x-request-id, put it in the context and
//     send it back as a header, so every later step can log it.
//  2. logging: one line per finished call with request id, method, code and
//     duration (health probes are not logged: they arrive every few seconds,
//     and health changes are logged by the readiness loop).
//  3. metrics: Prometheus counters and a handling-time histogram per method.
//     It sits outside auth and validation so rejected calls are counted too.
//  4. auth: the caller's principal (bearer token or mTLS client certificate,
//     auth.Table) into the context, and the method's policy (auth.Policy):
//     Unauthenticated / PermissionDenied; health and reflection stay open
//     (DESIGN §9; authz.go).
//     Then the per-principal quotas (limits.go): ResourceExhausted naming
//     the quota when the caller already has its share of calls in flight.
//  5. errors: every error of the steps below and of the handler goes through
//     grpcerr.Resolve, the one path for what a service did not map itself: a
//     store that cannot answer is Unavailable, anything unexpected is logged
//     with the request id and answered Internal without its text.
//  6. validation: protovalidate rules from the proto, and requests that did
//     not decode (codec.go); InvalidArgument with field violations.
//  7. readiness gate: Unavailable for a service that has never been ready.
//  8. recovery: a panic in a handler becomes Internal and is logged with its
//     stack; the server keeps running.
//
// The unary steps are one interceptor (unaryChain); the stream steps one interceptor each.
func (s *Server) interceptorChain(metrics *grpcprom.ServerMetrics) (grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		s.logger.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithFieldsFromContext(func(ctx context.Context) logging.Fields {
			return logging.Fields{"request_id", RequestID(ctx)}
		}),
		logging.WithDurationField(func(d time.Duration) logging.Fields {
			return logging.Fields{"grpc.duration", d}
		}),
	}
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return c.Service != healthgrpc.Health_ServiceDesc.ServiceName
	})
	recoveryOpts := []recovery.Option{recovery.WithRecoveryHandlerContext(s.recoverPanic)}

	unary := s.unaryChain(metrics.UnaryServerInterceptor())
	stream := []grpc.StreamServerInterceptor{
		streamRequestID,
		selector.StreamServerInterceptor(logging.StreamServerInterceptor(logger, logOpts...), notHealth),
		metrics.StreamServerInterceptor(),
	}
	if s.cfg.authenticates() {
		stream = append(stream, s.streamAuth)
	}
	// Per-principal quotas, once the principal is known (limits.go).
	stream = append(stream,
		s.streamQuota,
		s.streamResolve,
		streamValidate(s.cfg.validator),
		s.streamReadyGate,
		recovery.StreamServerInterceptor(recoveryOpts...),
	)
	return unary, stream
}

// --- logging ---

// unaryChain is the unary side of the chain as one interceptor: the steps above in that order,
// each called from the one before it, instead of one interceptor per step through grpc's chain,
// which builds a closure per step per call (seven allocations of every call, bench/PROFILE.md,
// branch p17handler). The metrics step is go-grpc-middleware's interceptor: the steps after it
// are the one closure it is given.
func (s *Server) unaryChain(metrics grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	authenticates := s.cfg.authenticates()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		// 1. request id.
		ctx, id := withRequestID(ctx)
		// Best effort: SetHeader only fails if headers were already sent.
		_ = grpc.SetHeader(ctx, metadata.MD{RequestIDMetadataKey: []string{id}})
		// 3. metrics, then 4.–8.
		rest := func(ctx context.Context, req any) (any, error) {
			return s.unaryGuarded(ctx, req, info, handler, authenticates)
		}
		// 2. logging (not health probes).
		service, method, _ := strings.Cut(strings.TrimPrefix(info.FullMethod, "/"), "/")
		if service == healthgrpc.Health_ServiceDesc.ServiceName {
			return metrics(ctx, req, info, rest)
		}
		start := time.Now()
		resp, err := metrics(ctx, req, info, rest)
		s.logUnary(ctx, service, method, start, err)
		return resp, err
	}
}

// unaryGuarded is steps 4 and 5 of a unary call: auth and the quotas, then every error of the
// steps after them and of the handler resolved (grpcerr.Resolve).
func (s *Server) unaryGuarded(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler, authenticates bool) (any, error) {
	if authenticates && !openService(info.FullMethod) {
		var err error
		if ctx, err = s.authorize(ctx, info.FullMethod); err != nil {
			return nil, err
		}
	}
	release, err := s.quotas.acquire(ctx, info.FullMethod, false)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := s.unaryHandle(ctx, req, info, handler)
	if err != nil {
		return resp, s.resolve(ctx, info.FullMethod, err)
	}
	return resp, nil
}

// unaryHandle is steps 6–8 of a unary call: validation, the readiness gate, and the handler with
// a panic in it recovered (recoverPanic: Internal, logged with its stack).
func (s *Server) unaryHandle(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	if err := validate(s.cfg.validator, req); err != nil {
		return nil, err
	}
	if err := s.notReady(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, s.recoverPanic(ctx, p)
		}
	}()
	return handler(ctx, req)
}

// logUnary logs one line per finished unary call (not health probes), with the fields and
// levels of go-grpc-middleware's logging interceptor (which the streams still use): request id,
// service, method, code, duration, and the error; the level by code (logging's
// DefaultServerCodeToLevel). It builds the line only when the logger takes that level: the
// middleware built its field list on every call, a fifth of a lock RPC's allocations
// (bench/PROFILE.md).
func (s *Server) logUnary(ctx context.Context, service, method string, start time.Time, err error) {
	code := status.Code(err)
	lvl := slog.Level(logging.DefaultServerCodeToLevel(code))
	if !s.logger.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]slog.Attr, 0, 11)
	attrs = append(attrs,
		slog.String("protocol", "grpc"),
		slog.String("grpc.component", "server"),
		slog.String("grpc.service", service),
		slog.String("grpc.method", method),
		slog.String("grpc.method_type", "unary"),
	)
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		attrs = append(attrs, slog.String("peer.address", p.Addr.String()))
	}
	attrs = append(attrs,
		slog.String("request_id", RequestID(ctx)),
		slog.String("grpc.start_time", start.Format(time.RFC3339)),
		slog.String("grpc.code", code.String()),
		slog.Duration("grpc.duration", time.Since(start)),
	)
	if err != nil {
		attrs = append(attrs, slog.String("grpc.error", err.Error()))
	}
	s.logger.LogAttrs(ctx, lvl, "finished call", attrs...)
}

// --- readiness gate ---

// notReady answers Unavailable for a call to a service whose Ready probe has never succeeded (its
// store unreachable, or its schema behind the binary): the handler would only fail on missing
// tables. The probe is run once inline first, so a call that races the first background probe at
// start-up is served. Once a service has been ready, calls go through; a later outage is the
// handler's Unavailable.
func (s *Server) notReady(ctx context.Context, fullMethod string) error {
	name, _, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok {
		return nil
	}
	s.mu.Lock()
	_, known := s.serving[name]
	ever := s.everReady[name]
	s.mu.Unlock()
	if !known || ever {
		return nil
	}
	var ready func(context.Context) error
	for _, svc := range s.cfg.Services {
		if svc.Desc.ServiceName == name {
			ready = svc.Ready
		}
	}
	if ready == nil {
		return nil
	}
	err := probe(ctx, ready)
	if err == nil {
		s.setServing(name, true)
		return nil
	}
	msg := fmt.Sprintf("%s is not ready yet: its store is unreachable or its schema is not current (the server's log says which); retry later", name)
	var public PublicReason
	if errors.As(err, &public) {
		msg = fmt.Sprintf("%s is not ready yet: %s", name, public.PublicReason())
	}
	return status.Error(codes.Unavailable, msg)
}

// PublicReason is implemented by readiness errors whose text is fit for clients (it names no
// address or credential), e.g. a schema behind the binary; other probe errors stay in the log.
type PublicReason interface {
	PublicReason() string
}

func (s *Server) streamReadyGate(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.notReady(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

// --- request id ---

func streamRequestID(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, id := withRequestID(ss.Context())
	_ = ss.SetHeader(metadata.Pairs(RequestIDMetadataKey, id))
	wrapped := grpcmiddleware.WrapServerStream(ss)
	wrapped.WrappedContext = ctx
	return handler(srv, wrapped)
}

// withRequestID takes the caller's request id if it is usable, or generates one.
func withRequestID(ctx context.Context) (context.Context, string) {
	var id string
	if vals := metadata.ValueFromIncomingContext(ctx, RequestIDMetadataKey); len(vals) > 0 && validRequestID(vals[0]) {
		id = vals[0]
	} else {
		id = rand.Text()
	}
	return context.WithValue(ctx, requestIDKey{}, id), id
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for _, r := range id {
		if r <= ' ' || r > '~' {
			return false
		}
	}
	return true
}

// --- validation ---

func streamValidate(v protovalidate.Validator) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, validator: v})
	}
}

// validatingStream validates every message the client sends on a stream.
type validatingStream struct {
	grpc.ServerStream
	validator protovalidate.Validator
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return validate(s.validator, m)
}

// validate checks msg against its protovalidate rules. A broken rule (e.g. a
// CEL expression that does not compile) is a bug in the proto: an error that
// is not a status, which grpcerr.Resolve answers Internal (and logs).
func validate(v protovalidate.Validator, msg any) error {
	return validateWith(v, msg, pathOptions...) // pathrule.go: path fields without CEL when valid
}

// validateWith is validate with protovalidate's options opts.
func validateWith(v protovalidate.Validator, msg any, opts ...protovalidate.ValidationOption) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil // not a protobuf message: nothing to validate against
	}
	if err := malformed(m); err != nil {
		return err // the request did not decode (codec.go)
	}
	err := v.Validate(m, opts...)
	if err == nil {
		return nil
	}
	name := m.ProtoReflect().Descriptor().Name()
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("validate %s: %w", name, err)
	}

	violations := make([]grpcerr.FieldViolation, 0, len(verr.Violations))
	parts := make([]string, 0, len(verr.Violations))
	for _, viol := range verr.Violations {
		fv := grpcerr.FieldViolation{
			Field:       protovalidate.FieldPathString(viol.Proto.GetField()),
			Description: viol.Proto.GetMessage(),
		}
		if fv.Description == "" {
			fv.Description = fmt.Sprintf("violates rule %s", viol.Proto.GetRuleId())
		}
		violations = append(violations, fv)
		if fv.Field == "" {
			parts = append(parts, fv.Description)
		} else {
			parts = append(parts, fv.Field+": "+fv.Description)
		}
	}
	return grpcerr.InvalidArgument(fmt.Sprintf("invalid %s: %s", name, strings.Join(parts, "; ")), violations...)
}

// --- errors ---

func (s *Server) streamResolve(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := handler(srv, ss); err != nil {
		return s.resolve(ss.Context(), info.FullMethod, err)
	}
	return nil
}

// resolve answers the status of a handler's error (grpcerr.Resolve) and logs the ones the
// client is not told: an outage at Warn, a bug at Error, both with the request id.
func (s *Server) resolve(ctx context.Context, method string, err error) error {
	id := RequestID(ctx)
	outcome, out := grpcerr.Resolve(err, id)
	switch outcome {
	case grpcerr.StoreUnavailable:
		s.logger.WarnContext(ctx, "store unavailable", "grpc.method", method, "request_id", id, "error", err.Error())
	case grpcerr.Unexpected:
		s.logger.ErrorContext(ctx, "unexpected error", "grpc.method", method, "request_id", id, "error", err.Error())
	}
	return out
}

// --- recovery ---

// recoverPanic logs a handler panic with its stack and hides the details from
// the client.
func (s *Server) recoverPanic(ctx context.Context, p any) error {
	method, _ := grpc.Method(ctx)
	s.logger.ErrorContext(ctx, "panic in gRPC handler",
		"grpc.method", method,
		"request_id", RequestID(ctx),
		"panic", fmt.Sprint(p),
		"stack", string(debug.Stack()),
	)
	return grpcerr.InternalError(RequestID(ctx))
}
