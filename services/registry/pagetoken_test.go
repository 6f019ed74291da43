package registry_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/pagetoken/pagetokentest"
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

		// ListAgents: another execution_id or status filter refuses the token; another page size
		// does not.
		agents, agentToken := pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, a := range res.GetAgents() {
				ids = append(ids, a.GetInstanceId())
			}
			return ids, res.GetNextPageToken()
		})
		require.ElementsMatch(t, []string{"a0", "a1", "a2", "a3", "a4"}, agents)
		_, err := c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-2", PageSize: 1, PageToken: agentToken})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 1, PageToken: agentToken,
			Statuses: []commonv1.AgentStatus{commonv1.AgentStatus_AGENT_STATUS_RUNNING}})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = c.ListAgents(ctx, &registryv1.ListAgentsRequest{ExecutionId: "exec-1", PageSize: 3, PageToken: agentToken})
		require.NoError(t, err)

		// ListLocks: another holder or prefix refuses the token.
		locks, lockToken := pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := c.ListLocks(ctx, &registryv1.ListLocksRequest{Holder: "agent-1", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, l := range res.GetLocks() {
				ids = append(ids, l.GetResource())
			}
			return ids, res.GetNextPageToken()
		})
		require.Equal(t, []string{"src/f0.go", "src/f1.go", "src/f2.go", "src/f3.go", "src/f4.go"}, locks)
		_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{Holder: "agent-2", PageSize: 1, PageToken: lockToken})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = c.ListLocks(ctx, &registryv1.ListLocksRequest{Holder: "agent-1", Prefix: "src/", PageSize: 1, PageToken: lockToken})
		pagetokentest.RequireOtherFilters(t, err)

		// ListOwners: another owner, or a token of another list, is refused.
		owns, ownerToken := pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "alice", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, o := range res.GetOwnerships() {
				ids = append(ids, o.GetPattern())
			}
			return ids, res.GetNextPageToken()
		})
		require.Equal(t, []string{"src/p0/**", "src/p1/**", "src/p2/**", "src/p3/**", "src/p4/**"}, owns)
		_, err = c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "bob", PageSize: 1, PageToken: ownerToken})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "alice", PageToken: lockToken})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = c.ListOwners(ctx, &registryv1.ListOwnersRequest{Owner: "alice", PageToken: ownerToken[:len(ownerToken)-2]})
		pagetokentest.RequireMalformed(t, err)
	})
}
