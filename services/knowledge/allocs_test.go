package knowledge_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

// heldHit returns a Knowledge server on a new Postgres store (the one that holds items) with 30
// gotchas matching cmd/**/*.go, and a query of 20 of them whose items are all held.
func heldHit(tb testing.TB) (*knowledge.Server, *postgres.Store, *knowledgev1.QueryItemsRequest) {
	tb.Helper()
	ctx := context.Background()
	st, err := postgres.New(ctx, dbtest.Postgres(tb), database.WithMigrate())
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = st.Close() })
	clk := &clock{now: t0}
	srv := knowledge.New(st, knowledge.WithClock(clk.Now))
	for i := range 30 {
		_, err := srv.RecordItem(ctx, &knowledgev1.RecordItemRequest{
			Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA, Content: fmt.Sprintf("gotcha %d", i), FilePattern: "cmd/**/*.go",
			Tags: []string{"go"}, Source: &knowledgev1.Source{ExecutionId: "ex_1", TaskId: "build", AgentId: "agent-1"},
		})
		require.NoError(tb, err)
	}
	req := &knowledgev1.QueryItemsRequest{
		Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "cmd/converge/main.go"},
		Types:  []knowledgev1.ItemType{knowledgev1.ItemType_ITEM_TYPE_GOTCHA},
	}
	for range 3 { // read the items once and hold them (answered again: protected)
		res, err := srv.QueryItems(ctx, req)
		require.NoError(tb, err)
		require.Len(tb, res.GetMatches(), 20)
	}
	return srv, st, req
}

// A query whose items are all held allocates a few objects per item answered, not one per
// message and field: the response's items, matches, Sources and Timestamps come in one slice
// each, and the store scans its candidates into one set of targets (bench/PROFILE.md, p17p4).
// The handler is called directly, without gRPC. Not parallel: testing.AllocsPerRun counts the
// whole process's allocations.
func TestQueryItemsHeldHitAllocations(t *testing.T) {
	srv, st, req := heldHit(t)
	reads := st.AnswerReads()
	var err error
	allocs := testing.AllocsPerRun(20, func() {
		var res *knowledgev1.QueryItemsResponse
		if res, err = srv.QueryItems(t.Context(), req); err == nil && len(res.GetMatches()) != 20 {
			err = fmt.Errorf("%d matches, want 20", len(res.GetMatches()))
		}
	})
	require.NoError(t, err)
	require.Equal(t, reads, st.AnswerReads(), "every item answered from memory")
	t.Logf("%.0f allocations per query of 20 held items", allocs)
	// 558 before the slices and the candidates' one set of scan targets, 215 with them.
	require.LessOrEqual(t, allocs, 300.0, "allocations per query of 20 held items")
}

// BenchmarkQueryItemsHeldHit is the handler's cost for a query of 20 held items: the candidates
// statement on Postgres included, gRPC not.
func BenchmarkQueryItemsHeldHit(b *testing.B) {
	srv, _, req := heldHit(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srv.QueryItems(b.Context(), req); err != nil {
			b.Fatal(err)
		}
	}
}
