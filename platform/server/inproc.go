package server

import (
	"context"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// In-process calls: a client connection whose unary calls run this server's handlers in the
// caller's process without the transport (no socket, no HTTP/2 framing, no gRPC client or server
// stream). It is what `converge dev --agents N` gives its local agents: the gRPC transport was
// 13 % of converge dev's CPU and the gRPC client about a third of the agents' (issue 17,
// bench/PROFILE.md, branch p17local).
//
// What a call over the wire goes through, it goes through too, in the same order:
//   - the request is marshalled by the caller's codec (a message the Go client refuses to send,
//     such as a string with invalid UTF-8, fails the same way) and decoded by the server's
//     (requestCodec: a request that does not decode is marked malformed), so caller and handler
//     never share a message; the response is a deep copy (proto.Merge into the reset reply, not
//     checked for invalid UTF-8: the server built it);
//   - the server's MaxRecvMsgBytes for the request, the client's default 4 MiB for the response;
//   - the server's whole unary interceptor chain (request id, logging, metrics, auth, quotas,
//     errors, validation, readiness gate, recovery): the caller is authenticated by its bearer
//     token exactly as a remote one (the outgoing metadata becomes the handler's incoming
//     metadata; the token, when given, is sent as "authorization: Bearer <token>" like
//     platform/client's), and has no client certificate;
//   - the caller's deadline and cancellation, but none of its context's values;
//   - the handler's error as the status the caller would decode from the trailers (its code,
//     message and details, copied), the response headers and trailers into grpc.Header and
//     grpc.Trailer call options.
//
// What it does not have: OpenTelemetry's stats handler (no span per in-process call) and the
// listener's connection and stream limits (there is no connection). Streams are not served
// in-process: they go to the connection given to InProcess, if any.

// inprocMethod is one unary method of a registered service.
type inprocMethod struct {
	impl    any
	handler grpc.MethodHandler
}

// inprocRegister records desc's unary methods for in-process calls (beside grpc.Server's own
// registration).
func (s *Server) inprocRegister(desc *grpc.ServiceDesc, impl any) {
	if s.inproc == nil {
		s.inproc = map[string]*inprocMethod{}
	}
	for _, m := range desc.Methods {
		full := "/" + desc.ServiceName + "/" + m.MethodName
		s.inproc[full] = &inprocMethod{impl: impl, handler: m.Handler}
	}
}

// InProcess answers a connection whose unary calls run this server's handlers in the process
// (see the comment above inprocMethod): token, when not "", is the bearer token of every call;
// streams, when not nil, carries the streaming calls (nil: they fail Unimplemented). Calls made
// after the server began to stop fail Unavailable.
func (s *Server) InProcess(token string, streams grpc.ClientConnInterface) grpc.ClientConnInterface {
	c := &inprocConn{srv: s, streams: streams, codec: encoding.GetCodecV2("proto"), serverCodec: newRequestCodec()}
	if token != "" {
		c.auth = "Bearer " + token
	}
	return c
}

type inprocConn struct {
	srv         *Server
	auth        string // "Bearer <token>", or ""
	streams     grpc.ClientConnInterface
	codec       encoding.CodecV2 // the client's
	serverCodec encoding.CodecV2 // the server's (requestCodec)
}

// inprocAddr is the peer address of an in-process caller.
type inprocAddr struct{}

func (inprocAddr) Network() string { return "inprocess" }
func (inprocAddr) String() string  { return "inprocess" }

var inprocPeer = &peer.Peer{Addr: inprocAddr{}, LocalAddr: inprocAddr{}}

// clientMaxRecvMsgBytes is grpc-go's default limit of a response a client accepts.
const clientMaxRecvMsgBytes = 4 << 20

// NewStream hands streams to the connection given to InProcess.
func (c *inprocConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if c.streams == nil {
		return nil, status.Errorf(codes.Unimplemented, "in-process connection: no streams (%s)", method)
	}
	return c.streams.NewStream(ctx, desc, method, opts...)
}

// Invoke runs method's handler through the server's unary interceptor chain.
func (c *inprocConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	m := c.srv.inproc[method]
	if m == nil {
		return c.srv.unknownMethod(method)
	}
	if c.srv.stopCtx.Err() != nil {
		return status.Error(codes.Unavailable, "the server is stopping")
	}

	// The request as it would travel: the client's encoding, the server's limit and decoding.
	req, err := c.codec.Marshal(args)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	defer req.Free()
	if n := req.Len(); n > c.srv.cfg.MaxRecvMsgBytes {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, c.srv.cfg.MaxRecvMsgBytes)
	}

	sctx, done := c.serverContext(ctx)
	defer done()
	st := &inprocStream{method: method}
	sctx = grpc.NewContextWithServerTransportStream(sctx, st)
	resp, herr := m.handler(m.impl, sctx, func(v any) error { return c.serverCodec.Unmarshal(req, v) }, c.srv.inprocChain)
	if herr == nil && resp == nil {
		herr = status.Error(codes.Internal, "grpc: the handler answered no message")
	}
	st.deliver(opts)
	if err := ctx.Err(); err != nil {
		// The caller gave up first: its own context's error, as grpc-go's client answers.
		return status.FromContextError(err).Err()
	}
	if herr != nil {
		return wireStatus(herr)
	}
	return c.copyResponse(resp, reply)
}

// copyResponse fills reply with a deep copy of the handler's response resp. A response of
// reply's own type is cloned (proto.Merge into the reset reply: a third of the codec's cost on
// a small message, issue 17, branch p17local2), its size checked against the client's limit
// first; any other pair goes through the codec as over the wire. Unlike a request, the response
// is not checked for invalid UTF-8 (the server built it; the wire's server would fail such a
// response with Internal, here the caller gets it).
func (c *inprocConn) copyResponse(resp, reply any) error {
	sm, ok1 := resp.(proto.Message)
	rm, ok2 := reply.(proto.Message)
	if ok1 && ok2 && sm.ProtoReflect().Descriptor() == rm.ProtoReflect().Descriptor() {
		if n := proto.Size(sm); n > clientMaxRecvMsgBytes {
			return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, clientMaxRecvMsgBytes)
		}
		proto.Reset(rm)
		proto.Merge(rm, sm)
		return nil
	}
	out, err := c.codec.Marshal(resp)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	defer out.Free()
	if n := out.Len(); n > clientMaxRecvMsgBytes {
		return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, clientMaxRecvMsgBytes)
	}
	if err := c.codec.Unmarshal(out, reply); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

// serverContext is the handler's context: none of the caller's values, its deadline and
// cancellation, the caller's outgoing metadata (and bearer token) as incoming metadata, the
// in-process peer. done releases it.
func (c *inprocConn) serverContext(ctx context.Context) (context.Context, func()) {
	sctx, cancel := context.WithCancel(context.Background())
	if d, ok := ctx.Deadline(); ok {
		sctx, cancel = context.WithDeadline(context.Background(), d)
	}
	stop := context.AfterFunc(ctx, cancel)

	md := metadata.MD{}
	if c.auth != "" {
		md["authorization"] = []string{c.auth} // per-call credentials come first on the wire too
	}
	if out, ok := metadata.FromOutgoingContext(ctx); ok {
		for k, vs := range out {
			if strings.HasPrefix(k, ":") {
				continue // pseudo-headers are the transport's
			}
			md[k] = append(md[k], vs...)
		}
	}
	sctx = metadata.NewIncomingContext(sctx, md)
	sctx = peer.NewContext(sctx, inprocPeer)
	return sctx, func() { stop(); cancel() }
}

// wireStatus is err as a client decodes it from the trailers: a status (its details copied), or
// for a context error its code, for anything else Unknown with the error's text.
func wireStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return status.FromProto(st.Proto()).Err()
}

// unknownMethod is grpc-go's answer for a method the server does not serve.
func (s *Server) unknownMethod(method string) error {
	service, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return status.Errorf(codes.Unimplemented, "malformed method name: %q", method)
	}
	for full := range s.inproc {
		if strings.HasPrefix(full, "/"+service+"/") {
			return status.Errorf(codes.Unimplemented, "unknown method %v for service %v", name, service)
		}
	}
	return status.Errorf(codes.Unimplemented, "unknown service %v", service)
}

// inprocStream is the grpc.ServerTransportStream of an in-process call: it holds the headers and
// trailers the handler sets, for the caller's grpc.Header and grpc.Trailer options.
type inprocStream struct {
	method          string
	header, trailer metadata.MD
	sentHeader      bool
}

func (s *inprocStream) Method() string { return s.method }

func (s *inprocStream) SetHeader(md metadata.MD) error {
	if s.sentHeader {
		return status.Error(codes.Internal, "transport: the stream is done or WriteHeader was already called")
	}
	s.header = metadata.Join(s.header, md)
	return nil
}

func (s *inprocStream) SendHeader(md metadata.MD) error {
	if err := s.SetHeader(md); err != nil {
		return err
	}
	s.sentHeader = true
	return nil
}

func (s *inprocStream) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// deliver copies the headers and trailers into the call's grpc.Header / grpc.Trailer / grpc.Peer
// options.
func (s *inprocStream) deliver(opts []grpc.CallOption) {
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = s.header.Copy()
		case grpc.TrailerCallOption:
			*o.TrailerAddr = s.trailer.Copy()
		case grpc.PeerCallOption:
			*o.PeerAddr = *inprocPeer
		}
	}
}

var _ net.Addr = inprocAddr{}
