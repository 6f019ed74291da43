package check

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// healthMethod is the full name of the standard health check.
const healthMethod = "grpc.health.v1.Health/Check"

// runGRPC runs a grpc check: a health check, or a unary call resolved through reflection.
func runGRPC(ctx context.Context, t *Target, o *Options, gc *verifierv1.GrpcCheck) outcome {
	addr := gc.GetAddress()
	if addr == "" {
		addr = t.GRPCAddress
	}
	security := gc.GetSecurity()
	if security == verifierv1.TransportSecurity_TRANSPORT_SECURITY_UNSPECIFIED {
		security = t.GRPCSecurity
	}
	useTLS := security == verifierv1.TransportSecurity_TRANSPORT_SECURITY_TLS ||
		security == verifierv1.TransportSecurity_TRANSPORT_SECURITY_TLS_SKIP_VERIFY
	var tlsConfig *tls.Config
	if useTLS {
		host, _, _ := net.SplitHostPort(addr)
		tlsConfig = &tls.Config{
			ServerName:         host,
			InsecureSkipVerify: security == verifierv1.TransportSecurity_TRANSPORT_SECURITY_TLS_SKIP_VERIFY, //nolint:gosec // asked for by the check
			MinVersion:         tls.VersionTLS12,
		}
	}

	md := metadata.MD{}
	for k, v := range gc.GetMetadata() {
		md.Set(k, v)
	}
	var missing []string
	for key, variable := range gc.GetMetadataEnv() {
		v, ok := o.lookupEnv(variable)
		if !ok {
			missing = append(missing, variable)
			continue
		}
		md.Set(key, v)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return blocked(verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING, 0,
			"environment variable %s is not set on the verifier (metadata_env)", strings.Join(missing, ", "))
	}

	method := healthMethod
	if u := gc.GetUnary(); u != nil {
		method = strings.TrimPrefix(u.GetMethod(), "/")
	}
	timeout := o.timeout(gc.GetTimeout())

	// A connection is what is retried: the server must accept one (and finish the TLS
	// handshake). Whatever the server then answers is judged.
	first := time.Now()
	for attempt := int32(1); ; attempt++ {
		o.attempt(attempt)
		err := probe(ctx, o, addr, tlsConfig, timeout)
		if res, ok := denied(err, attempt); ok {
			res.evidence.Kind = &verifierv1.Evidence_Grpc{Grpc: &verifierv1.GrpcEvidence{Address: addr, Method: method, Tls: useTLS}}
			return res
		}
		if err == nil {
			out := grpcCall(ctx, o, gc, addr, method, tlsConfig, md, timeout)
			out.attempts = attempt
			return out
		}
		if ctx.Err() != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, attempt, "cancelled")
		}
		if int(attempt) >= o.MaxAttempts || !sleep(ctx, o.backoff(attempt)) {
			res := blocked(verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, attempt, "%s, %s",
				connectError(err), plural(int(attempt), "attempt"))
			res.evidence.Summary = fmt.Sprintf("%s at %s not called: %s, %s over %s", method, addr, connectError(err),
				plural(int(attempt), "attempt"), roundDuration(time.Since(first)).Round(100*time.Millisecond))
			res.evidence.Kind = &verifierv1.Evidence_Grpc{Grpc: &verifierv1.GrpcEvidence{Address: addr, Method: method, Tls: useTLS}}
			return res
		}
	}
}

// probe opens (and closes) one connection to addr, with the TLS handshake when tlsConfig is set.
func probe(ctx context.Context, o *Options, addr string, tlsConfig *tls.Config, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := o.dialContext(timeout)(pctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if tlsConfig != nil {
		cfg := tlsConfig.Clone()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(pctx); err != nil {
			return fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
	}
	return nil
}

// grpcCall makes the call on a connection that was just shown to open, and judges it.
func grpcCall(ctx context.Context, o *Options, gc *verifierv1.GrpcCheck, addr, method string,
	tlsConfig *tls.Config, md metadata.MD, timeout time.Duration) outcome {
	ev := &verifierv1.GrpcEvidence{Address: addr, Method: method, Tls: tlsConfig != nil}
	evidence := &verifierv1.Evidence{Kind: &verifierv1.Evidence_Grpc{Grpc: ev}}
	var a assertions

	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return o.dialContext(timeout)(ctx, "tcp", addr) // the destination policy, on every dial
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 1, "gRPC client for %s: %v", addr, err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if len(md) > 0 {
		cctx = metadata.NewOutgoingContext(cctx, md)
	}

	var (
		response string
		hasResp  bool
		callErr  error
		latency  time.Duration
	)
	if u := gc.GetUnary(); u != nil {
		response, hasResp, latency, callErr = unaryCall(cctx, conn, method, u.GetRequestJson())
	} else {
		start := time.Now()
		var res *healthpb.HealthCheckResponse
		res, callErr = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: gc.GetHealth().GetService()})
		latency = time.Since(start)
		if callErr == nil {
			b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(res)
			if err == nil {
				response, hasResp = string(b), true
			}
		}
	}
	if ctx.Err() != nil {
		return blocked(verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, 1, "cancelled")
	}
	st := status.Convert(callErr)
	ev.Code = int32(st.Code())
	ev.Message = clean(st.Message())
	ev.Latency = durationpb.New(latency)
	ev.ResponseExcerpt = head(response, o.ExcerptBytes)

	e := gc.GetExpect()
	want := codes.Code(e.GetCode())
	a.add(fmt.Sprintf("code == %s", want), st.Code() == want, codeActual(st))
	if s := e.GetMessageContains(); s != "" {
		actual := "found"
		if !strings.Contains(st.Message(), s) {
			actual = "not found in " + quoteHead(st.Message())
		}
		a.add(fmt.Sprintf("message contains %q", s), strings.Contains(st.Message(), s), actual)
	}
	jsonFields := e.GetResponseJson()
	if gc.GetHealth() != nil && len(jsonFields) == 0 && want == codes.OK {
		jsonFields = []*verifierv1.JsonFieldExpectation{{Path: "/status", EqualsJson: `"SERVING"`}}
	}
	if len(jsonFields) > 0 {
		if hasResp {
			checkJSONFields(&a, "response", response, jsonFields)
		} else {
			for _, f := range jsonFields {
				a.add(fmt.Sprintf("response %s = %s", pointerName(f.GetPath()), f.GetEqualsJson()), false, "no response")
			}
		}
	}
	if max := e.GetMaxLatency(); max != nil {
		a.add(fmt.Sprintf("latency <= %s", max.AsDuration()), latency <= max.AsDuration(), roundDuration(latency).String())
	}
	evidence.Summary = fmt.Sprintf("%s at %s → %s in %s", method, addr, st.Code(), roundDuration(latency))
	if gc.GetHealth() != nil && hasResp {
		evidence.Summary = fmt.Sprintf("%s at %s → %s in %s", method, addr, strings.Trim(healthStatus(response), `"`), roundDuration(latency))
	}
	evidence.Assertions = a.list
	return outcome{status: judge(&a), evidence: evidence, attempts: 1}
}

func codeActual(st *status.Status) string {
	if st.Code() == codes.OK {
		return "OK"
	}
	return fmt.Sprintf("%s: %s", st.Code(), head(st.Message(), actualLen))
}

func healthStatus(response string) string {
	v, err := decodeJSON(response)
	if err != nil {
		return "?"
	}
	s, _ := resolvePointer(v, "/status")
	return shortJSON(s)
}

// unaryCall calls method with the request given as JSON, resolving its types through the
// server's reflection service, and answers the response as protojson. A failure to resolve or
// encode is answered as a status error: the server's contract did not fit the check.
func unaryCall(ctx context.Context, conn *grpc.ClientConn, method, requestJSON string) (string, bool, time.Duration, error) {
	md, types, err := resolveMethod(ctx, conn, method)
	if err != nil {
		return "", false, 0, err
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return "", false, 0, status.Errorf(codes.Unimplemented, "%s is a streaming method: grpc checks call unary methods", method)
	}
	if requestJSON == "" {
		requestJSON = "{}"
	}
	req := newMessage(md.Input())
	if err := (protojson.UnmarshalOptions{Resolver: types}).Unmarshal([]byte(requestJSON), req); err != nil {
		return "", false, 0, status.Errorf(codes.InvalidArgument, "request_json does not fit %s: %v", md.Input().FullName(), err)
	}
	res := newMessage(md.Output())
	start := time.Now()
	err = conn.Invoke(ctx, "/"+method, req, res)
	latency := time.Since(start)
	if err != nil {
		return "", false, latency, err
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: true, Resolver: types}.Marshal(res)
	if err != nil {
		return "", false, latency, status.Errorf(codes.Internal, "render the response as JSON: %v", err)
	}
	return string(b), true, latency, nil
}
