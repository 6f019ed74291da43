package registry_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
)

// TestPageTokensAreBoundToFilters: every paginated list walks each item exactly once with a
// page size of 1, and a token replayed with other filters is InvalidArgument on page_token.
func TestPageTokensAreBoundToFilters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		c := setup(t, b).client
		ctx := t.Context()
		for i := range 5 {
			register(t, c, fmt.Sprintf("a%d", i), "exec-1")
			register(t, c, fmt.Sprintf("b%d", i), "exec-2")
			_, err := c.AcquireLock(ctx, acquire(fmt.Sprintf("src/f%d.go", i), "agent-1", time.Minute, 0))
			require.NoError(t, err)
			_, err = c.AcquireLock(ctx, acquire(fmt.Sprintf("doc/f%d.md", i), "agent-2", time.Minute, 0))
			require.NoError(t, err)
			_, err = c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: fmt.Sprintf("src/p%d/**", i), Owner: "alice"})
			require.NoError(t, err)
			_, err = c.SetOwner(ctx, &registryv1.SetOwnerRequest{Pattern: fmt.Sprintf("doc/p%d/**", i), Owner: "bob"})
			require.NoError(t, err)
		}

		// ListAgents: walk exec-1, then replay its first token for exec-2 and for a status filter.
		var agents []string
		agentReq := &registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 1}
		var firstAgentToken string
		for {
			res, err := c.ListAgents(ctx, agentReq)
			require.NoError(t, err)
			for _, a := range res.GetAgents() {
				agents = append(agents, a.GetInstanceId())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if firstAgentToken == "" {
				firstAgentToken = res.GetNextPageToken()
			}
			agentReq.PageToken = res.GetNextPageToken()
		}
		require.ElementsMatch(t, []string{"a0", "a1", "a2", "a3", "a4"}, agents)
		_, err := c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-2", PageSize: 1, PageToken: firstAgentToken})
		requireInvalid(t, err, "page_token")
		_, err = c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 1, PageToken: firstAgentToken,
			Statuses: []commonv1.AgentStatus{commonv1.AgentStatus_AGENT_STATUS_RUNNING}})
		requireInvalid(t, err, "page_token")
		// Another page size is the same query.
		_, err = c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 3, PageToken: firstAgentToken})
		require.NoError(t, err)

		// ListLocks: walk agent-1's locks, replay for agent-2 and for another prefix.
		var locks []string
		lockReq := &registryv1.ListLocksRequest{Holder: "agent-1", PageSize: 1}
		var firstLockToken string
		for {
			res, err := c.ListLocks(ctx, lockReq)
			require.NoError(t, err)
			for _, l := range res.GetLocks() {
				locks = append(locks, l.GetResource())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if firstLockToken == "" {
				firstLockToken = res.GetNextPageToken()
			}
			lockReq.PageToken = res.GetNextPageToken()
		}
		require.Equal(t, []string{"src/f0.go", "src/f1.go", "src/f2.go", "src/f3.go", "src/f4.go"}, locks)
		_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{Holder: "agent-2", PageSize: 1, PageToken: firstLockToken})
		requireInvalid(t, err, "page_token")
		_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{Holder: "agent-1", Prefix: "src/", PageSize: 1, PageToken: firstLockToken})
		requireInvalid(t, err, "page_token")

		// ListOwners: walk alice's patterns, replay for bob; a token of another list is refused.
		var owns []string
		ownReq := &registryv1.ListOwnersRequest{Owner: "alice", PageSize: 1}
		var firstOwnerToken string
		for {
			res, err := c.ListOwners(ctx, ownReq)
			require.NoError(t, err)
			for _, o := range res.GetOwnerships() {
				owns = append(owns, o.GetPattern())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if firstOwnerToken == "" {
				firstOwnerToken = res.GetNextPageToken()
			}
			ownReq.PageToken = res.GetNextPageToken()
		}
		require.Equal(t, []string{"src/p0/**", "src/p1/**", "src/p2/**", "src/p3/**", "src/p4/**"}, owns)
		_, err = c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "bob", PageSize: 1, PageToken: firstOwnerToken})
		requireInvalid(t, err, "page_token")
		_, err = c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "alice", PageToken: firstLockToken})
		requireInvalid(t, err, "page_token")
		require.Equal(t, codes.InvalidArgument, statusCode(err))
	})
}
