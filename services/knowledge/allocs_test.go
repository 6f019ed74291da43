package knowledge_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// A query whose items are all held allocates a few objects per item answered, not one per
// message and field: the response's items, matches, Sources and Timestamps come in one slice
// each, and the store scans its candidates into one set of targets (bench/PROFILE.md, p17p4).
// The handler is called directly, without gRPC, on the Postgres store (the one that holds items).
// Not parallel: testing.AllocsPerRun counts the whole process's allocations.
func TestQueryItemsHeldHitAllocations(t *testing.T) {
	st := backends["postgres"](t)
	b := setup(t, func(*testing.T) store.Store { return st })
	for i := range 30 {
		b.record(t, &knowledgev1.RecordItemRequest{
			Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA, Content: fmt.Sprintf("gotcha %d", i), FilePattern: "cmd/**/*.go",
			Tags: []string{"go"}, Source: &knowledgev1.Source{ExecutionId: "ex_1", TaskId: "build", AgentId: "agent-1"},
		})
	}
	srv := knowledge.New(st, knowledge.WithClock(b.clock.Now))
	req := &knowledgev1.QueryItemsRequest{
		Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "cmd/converge/main.go"},
		Types:  []knowledgev1.ItemType{knowledgev1.ItemType_ITEM_TYPE_GOTCHA},
	}
	for range 3 { // read the items once and hold them (answered again: protected)
		res, err := srv.QueryItems(b.ctx, req)
		require.NoError(t, err)
		require.Len(t, res.GetMatches(), 20)
	}
	reads := st.(interface{ AnswerReads() int64 }).AnswerReads()
	var err error
	allocs := testing.AllocsPerRun(20, func() {
		var res *knowledgev1.QueryItemsResponse
		if res, err = srv.QueryItems(b.ctx, req); err == nil && len(res.GetMatches()) != 20 {
			err = fmt.Errorf("%d matches, want 20", len(res.GetMatches()))
		}
	})
	require.NoError(t, err)
	require.Equal(t, reads, st.(interface{ AnswerReads() int64 }).AnswerReads(), "every item answered from memory")
	t.Logf("%.0f allocations per query of 20 held items", allocs)
	// 558 before the slices and the candidates' one set of scan targets, 215 with them.
	require.LessOrEqual(t, allocs, 300.0, "allocations per query of 20 held items")
}
