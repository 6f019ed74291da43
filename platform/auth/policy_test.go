package auth_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/converge-dev/converge/gen"
	"github.com/converge-dev/converge/platform/auth"
)

// contractMethods walks every service descriptor of converge's contracts (gen) and answers the
// full method names of their RPCs.
func contractMethods(t *testing.T) []string {
	t.Helper()
	files, err := gen.Files()
	require.NoError(t, err)
	var methods []string
	files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !strings.HasPrefix(string(fd.Package()), "converge.") {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				methods = append(methods, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	require.NotEmpty(t, methods)
	return methods
}

// Every RPC of every contract is in the policy table, and the table names no RPC that does not
// exist: a new RPC cannot ship without someone deciding who may call it.
func TestPolicyCoversEveryRPC(t *testing.T) {
	t.Parallel()
	methods := contractMethods(t)
	seen := map[string]bool{}
	for _, m := range methods {
		seen[m] = true
		roles, ok := auth.Policy[m]
		require.True(t, ok, "%s is not in auth.Policy: decide which roles may call it", m)
		require.Contains(t, roles, auth.RoleOperator, "%s: operators may call every RPC", m)
		for _, r := range roles {
			require.Contains(t, auth.Roles, r, "%s: unknown role %q", m, r)
		}
	}
	for m := range auth.Policy {
		require.True(t, seen[m], "auth.Policy lists %s, which no contract has", m)
	}
}

// The findings of the review: an agent may not sign off, drain, administer; it may claim and lock.
func TestPolicyDecisions(t *testing.T) {
	t.Parallel()
	agent := auth.Principal{Name: "pool-a", Roles: []auth.Role{auth.RoleAgent}}
	verify := auth.Principal{Name: "team-b", Roles: []auth.Role{auth.RoleVerifyClient}}
	reader := auth.Principal{Name: "dash", Roles: []auth.Role{auth.RoleReadOnly}}
	for _, m := range []string{
		"/converge.verifier.v1.VerifierService/RecordHumanVerdict",
		"/converge.agent.v1.AgentService/Drain",
		"/converge.scheduler.v1.SchedulerService/StartExecution",
		"/converge.verifier.v1.VerifierService/Verify",
	} {
		require.False(t, auth.Allowed(m, agent), m)
	}
	for _, m := range []string{
		"/converge.scheduler.v1.SchedulerService/ClaimTask",
		"/converge.scheduler.v1.SchedulerService/CompleteTask",
		"/converge.registry.v1.RegistryService/AcquireLock",
		"/converge.knowledge.v1.KnowledgeService/RecordItem",
	} {
		require.True(t, auth.Allowed(m, agent), m)
	}
	require.True(t, auth.Allowed("/converge.verifier.v1.VerifierService/Verify", verify))
	require.False(t, auth.Allowed("/converge.verifier.v1.VerifierService/RecordHumanVerdict", verify))
	require.False(t, auth.Allowed("/converge.scheduler.v1.SchedulerService/ClaimTask", verify))
	require.True(t, auth.Allowed("/converge.scheduler.v1.SchedulerService/ListExecutions", reader))
	require.False(t, auth.Allowed("/converge.scheduler.v1.SchedulerService/CancelExecution", reader))

	// A method outside the contracts is operators' only.
	require.Equal(t, []auth.Role{auth.RoleOperator}, auth.AllowedRoles("/x.Y/Z"))
	require.True(t, auth.Allowed("/x.Y/Z", auth.Principal{Roles: []auth.Role{auth.RoleOperator}}))
}

func TestAuthorizeNamesMethodAndRoles(t *testing.T) {
	t.Parallel()
	err := auth.Authorize("/converge.agent.v1.AgentService/Drain", auth.Principal{Name: "pool-a", Roles: []auth.Role{auth.RoleAgent}})
	require.EqualError(t, err, `principal "pool-a" may not call /converge.agent.v1.AgentService/Drain: it needs one of the roles operator`)
	require.NoError(t, auth.Authorize("/converge.agent.v1.AgentService/Drain", auth.Principal{Name: "ops", Roles: []auth.Role{auth.RoleOperator}}))
}

func TestActsFor(t *testing.T) {
	t.Parallel()
	a := auth.Principal{Name: "pool-a", Roles: []auth.Role{auth.RoleAgent}}
	ops := auth.Principal{Name: "ops", Roles: []auth.Role{auth.RoleOperator}}
	require.True(t, auth.ActsFor(a, true, "pool-a"))
	require.False(t, auth.ActsFor(a, true, "pool-b"))
	require.True(t, auth.ActsFor(a, true, ""), "an owner nobody recorded binds nobody")
	require.True(t, auth.ActsFor(ops, true, "pool-b"), "operators act for anyone")
	require.True(t, auth.ActsFor(auth.Principal{}, false, "pool-b"), "a server that authenticates nobody binds nobody")
}
