package security

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/converge-dev/converge/gen"
	"github.com/converge-dev/converge/platform/auth"
)

// rpc is one method of converge's contracts, as the role matrix calls it.
type rpc struct {
	service, method string
	fullName        string
	serverStream    bool
	clientStream    bool
}

// contractRPCs walks every service descriptor of the contracts.
func contractRPCs(t *testing.T) []rpc {
	t.Helper()
	files, err := gen.Files()
	require.NoError(t, err)
	var out []rpc
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "converge.") {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				md := sd.Methods().Get(j)
				out = append(out, rpc{service: string(sd.FullName()), method: string(md.Name()),
					fullName:     "/" + string(sd.FullName()) + "/" + string(md.Name()),
					serverStream: md.IsStreamingServer(), clientStream: md.IsStreamingClient()})
			}
		}
		return true
	})
	require.NotEmpty(t, out)
	return out
}

// call sends an empty request (every RPC's request decodes from no bytes) and answers the status
// code. A disallowed caller is refused before validation, so the request's content does not
// matter; an allowed one gets past the policy (typically to InvalidArgument).
func call(ctx context.Context, conn *grpc.ClientConn, r rpc) codes.Code {
	if !r.serverStream && !r.clientStream {
		return status.Code(conn.Invoke(ctx, r.fullName, &emptypb.Empty{}, &emptypb.Empty{}))
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: r.serverStream, ClientStreams: r.clientStream}, r.fullName)
	if err != nil {
		return status.Code(err)
	}
	if err := stream.SendMsg(&emptypb.Empty{}); err != nil {
		return status.Code(stream.RecvMsg(&emptypb.Empty{}))
	}
	if err := stream.CloseSend(); err != nil {
		return status.Code(err)
	}
	return status.Code(stream.RecvMsg(&emptypb.Empty{}))
}

// TestRoleMatrix is finding 1's proof: every RPC of every contract × every role, generated from
// auth.Policy and run against the real binaries (each service its own process, Postgres and
// Redis, one auth file): PermissionDenied exactly where the table says the role may not call,
// and never where it may.
func TestRoleMatrix(t *testing.T) {
	c := startCluster(t, 1)
	agentID := c.Agents()[0]
	addr := map[string]string{
		"converge.scheduler.v1.SchedulerService": c.SchedulerAddr(0),
		"converge.registry.v1.RegistryService":   c.RegistryAddr,
		"converge.knowledge.v1.KnowledgeService": c.KnowledgeAddr,
		"converge.verifier.v1.VerifierService":   c.VerifierAddr,
		"converge.agent.v1.AgentService":         c.AgentAddr(agentID),
	}
	type cell struct {
		r    rpc
		role auth.Role
	}
	var cells []cell
	for _, r := range contractRPCs(t) {
		require.Contains(t, addr, r.service, "the matrix does not know where %s is served", r.service)
		for _, role := range auth.Roles {
			cells = append(cells, cell{r, role})
		}
	}
	// An operator's Drain stops the agent: it goes last.
	drain := func(c cell) bool { return c.r.method == "Drain" && c.role == auth.RoleOperator }
	slices.SortStableFunc(cells, func(a, b cell) int {
		switch {
		case drain(a) && !drain(b):
			return 1
		case drain(b) && !drain(a):
			return -1
		}
		return 0
	})

	conns := map[string]*grpc.ClientConn{}
	for _, cl := range cells {
		key := cl.r.service + "|" + string(cl.role)
		if conns[key] == nil {
			conns[key] = dialAs(t, addr[cl.r.service], principalOf(cl.role))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		got := call(ctx, conns[key], cl.r)
		cancel()
		allowed := auth.Allowed(cl.r.fullName, auth.Principal{Name: principalOf(cl.role), Roles: []auth.Role{cl.role}})
		name := fmt.Sprintf("%s as %s", cl.r.fullName, cl.role)
		if allowed {
			require.NotContains(t, []codes.Code{codes.PermissionDenied, codes.Unauthenticated}, got, "%s: the policy allows it", name)
		} else {
			require.Equal(t, codes.PermissionDenied, got, "%s: the policy refuses it", name)
		}
	}
	t.Logf("role matrix: %d RPCs × %d roles", len(cells)/len(auth.Roles), len(auth.Roles))

	// Without a token, nothing but health and reflection.
	anon := dialAs(t, c.RegistryAddr, "nobody-has-this-name")
	_, err := anon.NewStream(t.Context(), &grpc.StreamDesc{}, "/converge.registry.v1.RegistryService/ListLocks")
	if err == nil {
		err = anon.Invoke(t.Context(), "/converge.registry.v1.RegistryService/ListLocks", &emptypb.Empty{}, &emptypb.Empty{})
	}
	require.Equal(t, codes.Unauthenticated, status.Code(err))
}
