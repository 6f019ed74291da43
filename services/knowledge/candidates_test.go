package knowledge_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// candidateLimits is a real store that notes the Limit of every Candidates call.
type candidateLimits struct {
	store.Store
	mu     sync.Mutex
	limits []int
}

func (c *candidateLimits) Candidates(ctx context.Context, q store.CandidateQuery) ([]store.Candidate, error) {
	c.mu.Lock()
	c.limits = append(c.limits, q.Limit)
	c.mu.Unlock()
	return c.Store.Candidates(ctx, q)
}

// A query whose candidates all match reads them in one round, and asks the store for a quarter
// more than the limit (at least 8, at least 16 in all), not twice the limit: every candidate
// asked for costs the statement an index entry in each bucket (bench/PROFILE.md, p17p4).
func TestQueryItemsAsksForFewCandidatesBeyondTheLimit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		st := &candidateLimits{Store: newStore(t)}
		clk := &clock{now: t0}
		conn := servertest.Serve(t, server.Config{
			Name:     "knowledge-test",
			Services: []server.Service{{Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: knowledge.New(st, knowledge.WithClock(clk.Now)), Ready: st.Ping}},
		})
		b := &testBundle{ctx: t.Context(), client: knowledgev1.NewKnowledgeServiceClient(conn), clock: clk, store: st}
		for i := range 60 {
			b.gotcha(t, "cmd/**/*.go", fmt.Sprintf("gotcha %d", i), 0.8)
		}
		for _, tc := range []struct{ limit, asked int }{{20, 28}, {1, 16}, {100, 125}} {
			st.mu.Lock()
			st.limits = nil
			st.mu.Unlock()
			got := b.query(t, &knowledgev1.QueryItemsRequest{
				Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "cmd/main.go"}, Limit: int32(tc.limit),
			})
			require.Len(t, got, min(tc.limit, 60))
			st.mu.Lock()
			require.Equal(t, []int{tc.asked}, st.limits, "limit %d", tc.limit)
			st.mu.Unlock()
		}
	})
}
