package registry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// Bad input answers InvalidArgument naming the field and the rule, from the contract's rules
// (the validation interceptor) or the service's own (package repopath's path and glob rules, page tokens); never
// Internal.
func TestBadInputIsInvalidArgument(t *testing.T) {
	t.Parallel()
	c := setup(t, backends[1]).client // validation does not depend on the backend
	ttl := durationpb.New(time.Minute)
	for _, tc := range []struct {
		name  string
		call  func(ctx context.Context) error
		field string
		says  string
	}{
		{"parent segment", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "a/../../etc/passwd", Holder: "agent-1", Ttl: ttl})
			return err
		}, "resource", "'..'"},
		{"absolute resource", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "/etc/passwd", Holder: "agent-1", Ttl: ttl})
			return err
		}, "resource", "no leading '/'"},
		{"empty resource", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "", Holder: "agent-1", Ttl: ttl})
			return err
		}, "resource", ""},
		{"resource with an empty segment", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "server//a.go", Holder: "agent-1", Ttl: ttl})
			return err
		}, "resource", "no empty"},
		{"resource with a dot segment", func(ctx context.Context) error {
			_, err := c.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: "./a.go", Holder: "agent-1", Token: 1, Ttl: ttl})
			return err
		}, "resource", "'.'"},
		{"resource inside .git", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "sub/.GIT/config", Holder: "agent-1", Ttl: ttl})
			return err
		}, "resource", "'.git'"},
		{"resource with a control character", func(ctx context.Context) error {
			_, err := c.GetLock(ctx, &registryv1.GetLockRequest{Resource: "a\x00b"})
			return err
		}, "resource", "control character"},
		{"empty holder", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "a.go", Holder: "", Ttl: ttl})
			return err
		}, "holder", ""},
		{"no ttl", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "a.go", Holder: "agent-1"})
			return err
		}, "ttl", ""},
		{"ttl too short", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "a.go", Holder: "agent-1", Ttl: durationpb.New(10 * time.Millisecond)})
			return err
		}, "ttl", ""},
		{"ttl too long", func(ctx context.Context) error {
			_, err := c.RenewLock(ctx, &registryv1.RenewLockRequest{Resource: "a.go", Holder: "agent-1", Token: 1, Ttl: durationpb.New(2 * time.Hour)})
			return err
		}, "ttl", ""},
		{"wait too long", func(ctx context.Context) error {
			_, err := c.AcquireLock(ctx, &registryv1.AcquireLockRequest{Resource: "a.go", Holder: "agent-1", Ttl: ttl, Wait: durationpb.New(time.Hour)})
			return err
		}, "wait", ""},
		{"token 0", func(ctx context.Context) error {
			_, err := c.ReleaseLock(ctx, &registryv1.ReleaseLockRequest{Resource: "a.go", Holder: "agent-1"})
			return err
		}, "token", ""},
		{"absolute prefix", func(ctx context.Context) error {
			_, err := c.ListLocks(ctx, &registryv1.ListLocksRequest{Prefix: "/srv"})
			return err
		}, "prefix", "no leading '/'"},
		{"page size too big", func(ctx context.Context) error {
			_, err := c.ListLocks(ctx, &registryv1.ListLocksRequest{PageSize: 5000})
			return err
		}, "page_size", ""},
		{"garbage page token", func(ctx context.Context) error {
			_, err := c.ListOwners(ctx, &registryv1.ListOwnersRequest{PageToken: "not a token"})
			return err
		}, "page_token", "malformed page token"},
		{"page token of another list", func(ctx context.Context) error {
			_, err := c.ListAgents(ctx, &registryv1.ListAgentsRequest{PageToken: "eyJsIjoibG9ja3MiLCJhIjoieCJ9"})
			return err
		}, "page_token", "malformed page token"},
		{"unclosed class", func(ctx context.Context) error {
			_, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "server/[a-z", Owner: "loop-1"})
			return err
		}, "pattern", "classes closed"},
		{"unclosed alternation", func(ctx context.Context) error {
			_, err := c.ReleaseOwner(ctx, &registryv1.ReleaseOwnerRequest{Pattern: "{a,b/**", Owner: "loop-1"})
			return err
		}, "pattern", "braces balanced"},
		{"pattern with a trailing slash", func(ctx context.Context) error {
			_, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "server/", Owner: "loop-1"})
			return err
		}, "pattern", "trailing '/'"},
		{"nested alternation", func(ctx context.Context) error {
			_, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "{a,{b,c}}/**", Owner: "loop-1"})
			return err
		}, "pattern", "not nested"},
		{"parent pattern", func(ctx context.Context) error {
			_, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "../**", Owner: "loop-1"})
			return err
		}, "pattern", "'..'"},
		{"empty owner", func(ctx context.Context) error {
			_, err := c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: "a/**"})
			return err
		}, "owner", ""},
		{"empty path", func(ctx context.Context) error {
			_, err := c.GetOwner(ctx, &registryv1.GetOwnerRequest{})
			return err
		}, "path", ""},
		{"unknown status", func(ctx context.Context) error {
			_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: 42})
			return err
		}, "status", ""},
		{"unspecified status", func(ctx context.Context) error {
			_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1"})
			return err
		}, "status", ""},
		{"progress 101", func(ctx context.Context) error {
			_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, ProgressPercent: 101})
			return err
		}, "progress_percent", ""},
		{"error context while running", func(ctx context.Context) error {
			_, err := c.Heartbeat(ctx, &registryv1.HeartbeatRequest{InstanceId: "agent-1", Status: running, ErrorContext: &commonv1.ErrorContext{Code: "X"}})
			return err
		}, "error_context", "only with status"},
		{"heartbeat interval too short", func(ctx context.Context) error {
			_, err := c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: "agent-1", Config: &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(time.Millisecond)}})
			return err
		}, "config.heartbeat_interval", ""},
		{"bad instance id", func(ctx context.Context) error {
			_, err := c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: "-agent"})
			return err
		}, "instance_id", ""},
		{"bad agent type", func(ctx context.Context) error {
			_, err := c.RegisterAgent(ctx, &registryv1.RegisterAgentRequest{InstanceId: "agent-1", AgentType: "Build Agent"})
			return err
		}, "agent_type", ""},
		{"threshold below a second", func(ctx context.Context) error {
			_, err := c.ListStaleAgents(ctx, &registryv1.ListStaleAgentsRequest{OlderThan: durationpb.New(500 * time.Millisecond)})
			return err
		}, "older_than", ""},
		{"unknown status filter", func(ctx context.Context) error {
			_, err := c.ListAgents(ctx, &registryv1.ListAgentsRequest{Statuses: []commonv1.AgentStatus{0}})
			return err
		}, "statuses[0]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(t.Context())
			requireInvalid(t, err, tc.field)
			if tc.says != "" {
				require.True(t, strings.Contains(err.Error(), tc.says), "want %q in %v", tc.says, err)
			}
		})
	}
}
