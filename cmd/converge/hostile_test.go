package main

// The hostile-input battery: every RPC of every converge service, found in the generated
// descriptors (a new RPC is covered without touching this file), is sent requests built field by
// field with protoreflect: empty, 4 MiB and 64 KiB strings, `../x` and `/etc/passwd`, invalid UTF-8
// (in bytes fields, and in string fields through a raw-wire path that skips the client's own UTF-8
// check), NUL and control characters, the extreme and negative numbers, a billion in every number
// (page sizes, limits), unknown enum values, 1,001 list items, JSON nested 10,000 levels in
// every string and a google.protobuf.Struct nested 10,000 levels. Every answer must be a precise
// status: never Internal or Unknown (a bug or a panic), InvalidArgument only with field violations,
// and the server answers health for every service afterwards. It runs against `converge dev` (the
// embedded store, one process) and, with CONVERGE_TEST_HOSTILE_BINARIES=1, the standalone binaries
// on Postgres and Redis.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr"
)

// hostileCase builds one kind of hostile request.
type hostileCase struct {
	name string
	// str is the value of every string field ("" leaves them unset).
	str string
	// bytes is the value of every bytes field (nil leaves them unset).
	bytes []byte
	// num answers the value of a numeric field of kind k (nil: 1 for integers, 0.5 for floats).
	num func(k protoreflect.Kind) protoreflect.Value
	// enum is the value of every enum field (0: the first value after the zero value).
	enum protoreflect.EnumNumber
	// items is how many elements lists get at the top two levels (0: one).
	items int
	// structDepth nests every google.protobuf.Struct this deep (0: a small Struct).
	structDepth int
	// raw sends the request through rawCodec: every occurrence of utf8Marker in the encoded
	// request is replaced by invalid UTF-8 of the same length.
	raw bool
	// empty sends the empty request.
	empty bool
	// maxDepth is how many levels of messages are filled, 1 for the request alone (0: hostileMaxDepth).
	maxDepth int
	// eachField sends one request per top-level string field, with that field set to eachField
	// and every other string to str.
	eachField string
}

const utf8Marker = "QZXWVUTS" // 8 bytes; replaced on the wire by invalidUTF8

var invalidUTF8 = []byte("\xff\xfe\xc0\xaf\xed\xa0\x80\x80")

func nestedJSON(levels int) string {
	return strings.Repeat(`{"a":`, levels) + "1" + strings.Repeat("}", levels)
}

func signedNums(i32 int32, i64 int64, u32 uint32, u64 uint64, f float64) func(protoreflect.Kind) protoreflect.Value {
	return func(k protoreflect.Kind) protoreflect.Value {
		switch k {
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			return protoreflect.ValueOfInt32(i32)
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
			return protoreflect.ValueOfInt64(i64)
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			return protoreflect.ValueOfUint32(u32)
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			return protoreflect.ValueOfUint64(u64)
		case protoreflect.FloatKind:
			return protoreflect.ValueOfFloat32(float32(f))
		default:
			return protoreflect.ValueOfFloat64(f)
		}
	}
}

var hostileCases = []hostileCase{
	{name: "empty", empty: true},
	// Every string 4 MiB: past the server's 8 MiB limit (ResourceExhausted) when there are several.
	{name: "strings_4MiB", str: strings.Repeat("a", 4<<20), maxDepth: 1},
	// One string at a time 4 MiB: under the limit, so it reaches validation and the handler.
	{name: "string_4MiB_each", str: "x", eachField: strings.Repeat("c", 4<<20)},
	{name: "strings_64KiB", str: strings.Repeat("b", 64<<10)},
	{name: "dotdot", str: "../x", bytes: []byte("../x")},
	{name: "etc_passwd", str: "/etc/passwd", bytes: []byte("/etc/passwd")},
	{name: "nul_and_control", str: "a\x00b\r\n\x1b[2J\u202e", bytes: []byte{0, 1, 2}},
	{name: "invalid_utf8_bytes", str: "x", bytes: invalidUTF8},
	{name: "invalid_utf8_strings_raw_wire", str: utf8Marker, raw: true},
	{name: "int_min", str: "x", num: signedNums(math.MinInt32, math.MinInt64, 0, 0, math.Inf(-1))},
	{name: "int_max", str: "x", num: signedNums(math.MaxInt32, math.MaxInt64, math.MaxUint32, math.MaxUint64, math.Inf(1))},
	{name: "negative", str: "x", num: signedNums(-1, -1, math.MaxUint32, math.MaxUint64, -1)},
	{name: "billion", str: "x", num: signedNums(1e9, 1e9, 1e9, 1e9, math.NaN())},
	{name: "enum_999", str: "x", enum: 999},
	{name: "enum_negative", str: "x", enum: -1},
	{name: "many_items", str: "x", items: 1001}, // past every max_items but one (10,000)
	{name: "nested_json_10000", str: nestedJSON(10000)},
	{name: "nested_json_array_10000", str: strings.Repeat("[", 10000) + strings.Repeat("]", 10000)},
	{name: "nested_struct_10000", str: "x", structDepth: 10000},
	{name: "nested_struct_100", str: "x", structDepth: 100},
}

// hostileMaxDepth bounds how deep nested messages are filled (recursive types stop there).
const hostileMaxDepth = 5

// filler fills a message for one case. pick chooses the member of every oneof.
type filler struct {
	c    hostileCase
	pick int
	// huge, when set, is the field that gets c.eachField.
	huge protoreflect.FieldDescriptor
}

func (f filler) fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && od.Fields().Get(f.pick%od.Fields().Len()) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			k, okK := f.scalar(fd.MapKey())
			v, okV := f.value(m, fd.MapValue(), depth, func() protoreflect.Value { return m.Mutable(fd).Map().NewValue() })
			if okK && okV {
				m.Mutable(fd).Map().Set(k.MapKey(), v)
			}
		case fd.IsList():
			n := 1
			if f.c.items > 0 && depth <= 1 {
				n = f.c.items
			}
			list := m.Mutable(fd).List()
			for range n {
				v, ok := f.value(m, fd, depth, list.NewElement)
				if !ok {
					break
				}
				list.Append(v)
			}
			if list.Len() == 0 {
				m.Clear(fd)
			}
		default:
			if v, ok := f.value(m, fd, depth, func() protoreflect.Value { return m.NewField(fd) }); ok {
				m.Set(fd, v)
			}
		}
	}
}

// value answers the value of field (or map value) fd; newMsg makes an empty message of its type.
func (f filler) value(_ protoreflect.Message, fd protoreflect.FieldDescriptor, depth int, newMsg func() protoreflect.Value) (protoreflect.Value, bool) {
	if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
		return f.scalar(fd)
	}
	if depth >= hostileMaxDepth || (f.c.maxDepth > 0 && depth+2 > f.c.maxDepth) {
		return protoreflect.Value{}, false
	}
	v := newMsg()
	if fd.Message().FullName() == "google.protobuf.Struct" {
		f.fillStruct(v.Message())
		return v, true
	}
	f.fill(v.Message(), depth+1)
	return v, true
}

// fillStruct makes a Struct nested structDepth levels ({"a": {"a": ...}}), or a small one.
func (f filler) fillStruct(m protoreflect.Message) {
	s := &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue(f.c.str)}}
	for range f.c.structDepth {
		s = &structpb.Struct{Fields: map[string]*structpb.Value{"a": structpb.NewStructValue(s)}}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		panic(err)
	}
	if err := (proto.UnmarshalOptions{RecursionLimit: math.MaxInt32, Merge: true}).Unmarshal(b, m.Interface()); err != nil {
		panic(err)
	}
}

func (f filler) scalar(fd protoreflect.FieldDescriptor) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if f.huge != nil && fd == f.huge {
			return protoreflect.ValueOfString(f.c.eachField), true
		}
		if f.c.str == "" {
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfString(f.c.str), true
	case protoreflect.BytesKind:
		if f.c.bytes == nil {
			return protoreflect.Value{}, false
		}
		return protoreflect.ValueOfBytes(f.c.bytes), true
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true), true
	case protoreflect.EnumKind:
		if f.c.enum != 0 {
			return protoreflect.ValueOfEnum(f.c.enum), true
		}
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(min(1, vals.Len()-1)).Number()), true
	default:
		if f.c.num != nil {
			return f.c.num(fd.Kind()), true
		}
		return signedNums(1, 1, 1, 1, 0.5)(fd.Kind()), true
	}
}

// hostileRequest answers the encoded request of case c for method m (oneof member pick).
func hostileRequest(t *testing.T, m protoreflect.MethodDescriptor, c hostileCase, pick int, huge protoreflect.FieldDescriptor) []byte {
	t.Helper()
	req := dynamicpb.NewMessage(m.Input())
	if !c.empty {
		filler{c: c, pick: pick, huge: huge}.fill(req, 0)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	require.NoError(t, err)
	if c.raw {
		b = bytes.ReplaceAll(b, []byte(utf8Marker), invalidUTF8)
	}
	return b
}

// rawCodec sends a rawRequest as its bytes and decodes responses as protobuf: it is how a client
// that does not check UTF-8 (any other language's, or a hand-made one) looks to the server.
type rawCodec struct{}

type rawRequest []byte

func (rawCodec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(rawRequest); ok {
		return r, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

// convergeServices answers the service descriptors of every converge service the generated code
// registers, by name.
func convergeServices(t *testing.T) []protoreflect.ServiceDescriptor {
	t.Helper()
	var out []protoreflect.ServiceDescriptor
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if strings.HasPrefix(string(fd.Package()), "converge.") {
			for i := 0; i < fd.Services().Len(); i++ {
				out = append(out, fd.Services().Get(i))
			}
		}
		return true
	})
	require.Len(t, out, len(allServices), "every service converge dev serves is in the generated code")
	return out
}

// oneofArity is the largest number of members of a oneof reachable from md: the battery runs that
// many fillings of each case so that every member is sent.
func oneofArity(md protoreflect.MessageDescriptor, depth int, seen map[protoreflect.FullName]bool) int {
	if depth >= hostileMaxDepth || seen[md.FullName()] {
		return 1
	}
	seen[md.FullName()] = true
	defer delete(seen, md.FullName())
	n := 1
	for i := 0; i < md.Oneofs().Len(); i++ {
		if od := md.Oneofs().Get(i); !od.IsSynthetic() {
			n = max(n, od.Fields().Len())
		}
	}
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() != nil && fd.Message().FullName() != "google.protobuf.Struct" {
			n = max(n, oneofArity(fd.Message(), depth+1, seen))
		}
	}
	return n
}

// runHostileBattery sends every case to every RPC of every service; conns answers the connection
// to a service by full name. skip names RPCs ("service/method") not sent, and why.
func runHostileBattery(t *testing.T, conns func(service string) *grpc.ClientConn, skip map[string]string) {
	services := convergeServices(t)
	for _, sd := range services {
		svc := string(sd.FullName())
		conn := conns(svc)
		t.Run(string(sd.Name()), func(t *testing.T) {
			methods := sd.Methods()
			for i := 0; i < methods.Len(); i++ {
				m := methods.Get(i)
				t.Run(string(m.Name()), func(t *testing.T) {
					if why, ok := skip[svc+"/"+string(m.Name())]; ok {
						t.Skip(why)
					}
					arity := oneofArity(m.Input(), 0, map[protoreflect.FullName]bool{})
					for _, c := range hostileCases {
						t.Run(c.name, func(t *testing.T) {
							if c.eachField != "" {
								fields := m.Input().Fields()
								for i := 0; i < fields.Len(); i++ {
									if fd := fields.Get(i); fd.Kind() == protoreflect.StringKind && !fd.IsMap() {
										hostileCall(t, conn, svc, m, c, 0, fd)
									}
								}
								return
							}
							picks := arity
							if c.empty || len(c.str) > 1<<20 {
								picks = 1 // nothing to learn from the oneofs' other members
							}
							for pick := range picks {
								hostileCall(t, conn, svc, m, c, pick, nil)
							}
						})
					}
				})
			}
		})
	}
	// The servers still answer, for every service.
	for _, sd := range services {
		if why, ok := skip[string(sd.FullName())]; ok {
			t.Logf("no health check of %s: %s", sd.FullName(), why)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := healthpb.NewHealthClient(conns(string(sd.FullName()))).Check(ctx, &healthpb.HealthCheckRequest{Service: string(sd.FullName())})
		cancel()
		require.NoError(t, err, "health of %s after the battery", sd.FullName())
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus(), "health of %s after the battery", sd.FullName())
	}
}

// hostileCallTimeout bounds one call: a server that neither answers nor streams within it hangs
// (generous: it only tells a hang from a slow machine).
const hostileCallTimeout = 60 * time.Second

func hostileCall(t *testing.T, conn *grpc.ClientConn, svc string, m protoreflect.MethodDescriptor, c hostileCase, pick int, huge protoreflect.FieldDescriptor) {
	t.Helper()
	full := "/" + svc + "/" + string(m.Name())
	req := rawRequest(hostileRequest(t, m, c, pick, huge))
	ctx, cancel := context.WithTimeout(context.Background(), hostileCallTimeout)
	defer cancel()
	opts := []grpc.CallOption{grpc.ForceCodec(rawCodec{}), grpc.MaxCallRecvMsgSize(64 << 20)}
	res := dynamicpb.NewMessage(m.Output())
	var err error
	if m.IsStreamingServer() || m.IsStreamingClient() {
		var stream grpc.ClientStream
		stream, err = conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: m.IsStreamingServer(), ClientStreams: m.IsStreamingClient()}, full, opts...)
		if err == nil {
			if err = stream.SendMsg(req); err == nil || err == io.EOF {
				_ = stream.CloseSend()
				// The first message or the status: a stream that answers works.
				err = stream.RecvMsg(res)
				if err == io.EOF {
					err = nil
				}
			}
		}
	} else {
		err = conn.Invoke(ctx, full, req, res, opts...)
	}
	where := fmt.Sprintf("%s case %s (oneof member %d, %d-byte request)", full, c.name, pick, len(req))
	if huge != nil {
		where = fmt.Sprintf("%s case %s (field %s, %d-byte request)", full, c.name, huge.Name(), len(req))
	}
	switch code := status.Code(err); code {
	case codes.Internal, codes.Unknown:
		t.Errorf("%s answered %v: %v", where, code, err)
	case codes.InvalidArgument:
		if len(grpcerr.Violations(err)) == 0 {
			t.Errorf("%s answered InvalidArgument without field violations: %v", where, err)
		}
	case codes.DeadlineExceeded:
		t.Errorf("%s did not answer within %s", where, hostileCallTimeout)
	case codes.Unavailable:
		t.Errorf("%s answered Unavailable (did the server die?): %v", where, err)
	default:
		t.Logf("%s: %v %s", where, code, truncate(status.Convert(err).Message(), 200))
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// The battery against `converge dev`: all five services in one process on the embedded store.
func TestHostileInputEmbedded(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory = true })
	runHostileBattery(t, func(string) *grpc.ClientConn { return b.conn }, nil)
}

// The battery against the standalone binaries on Postgres and Redis (an agent process included).
// It takes minutes on a small shared machine next to the package's other tests, so it runs when
// CONVERGE_TEST_HOSTILE_BINARIES=1 (the embedded run above covers every RPC on every `make test`).
func TestHostileInputPostgres(t *testing.T) {
	if os.Getenv("CONVERGE_TEST_HOSTILE_BINARIES") != "1" {
		t.Skip("set CONVERGE_TEST_HOSTILE_BINARIES=1 to run the battery against the standalone binaries on Postgres and Redis")
	}
	t.Parallel()
	dbtest.SkipUnit(t, "Postgres and Redis")
	c := clustertest.Start(t, clustertest.Options{Agents: 1, WaitAgents: true})
	addrs := map[string]string{
		"converge.registry.v1.RegistryService":   c.RegistryAddr,
		"converge.knowledge.v1.KnowledgeService": c.KnowledgeAddr,
		"converge.verifier.v1.VerifierService":   c.VerifierAddr,
		"converge.scheduler.v1.SchedulerService": c.SchedulerAddr(0),
		"converge.agent.v1.AgentService":         c.AgentAddr(c.Agents()[0]),
	}
	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	runHostileBattery(t, func(service string) *grpc.ClientConn {
		mu.Lock()
		defer mu.Unlock()
		addr, ok := addrs[service]
		require.True(t, ok, "no binary serves %s", service)
		if conns[addr] == nil {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close() })
			conns[addr] = conn
		}
		return conns[addr]
	}, map[string]string{
		// Drain is meant to stop the agent process (it drains, deregisters and exits): that is not
		// a crash. The embedded run sends it the whole battery.
		"converge.agent.v1.AgentService/Drain": "drains the agent process, which then exits by design",
	})
}
