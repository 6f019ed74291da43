package knowledge_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/server/servertest"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
	"github.com/converge-dev/converge/services/knowledge/store/sqlite"
)

// t0 is when every test starts: a millisecond instant, as the stores keep it.
var t0 = time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)

// backends open a new, migrated store of each kind for one test.
var backends = map[string]func(t *testing.T) store.Store{
	"sqlite": func(t *testing.T) store.Store {
		st, err := sqlite.New(t.Context(), dbtest.SQLite(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
	"postgres": func(t *testing.T) store.Store {
		st, err := postgres.New(t.Context(), dbtest.Postgres(t), database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
}

// forEachBackend runs test once per backend, as parallel subtests.
func forEachBackend(t *testing.T, test func(t *testing.T, newStore func(t *testing.T) store.Store)) {
	t.Helper()
	for name, newStore := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newStore)
		})
	}
}

// clock is the test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testBundle is a Knowledge server on a store, served by the real platform server (interceptors,
// validation and all) over an in-memory connection.
type testBundle struct {
	ctx    context.Context
	client knowledgev1.KnowledgeServiceClient
	clock  *clock
	store  store.Store
}

func setup(t *testing.T, newStore func(t *testing.T) store.Store) *testBundle {
	t.Helper()
	st := newStore(t)
	clk := &clock{now: t0}
	conn := servertest.Serve(t, server.Config{
		Name: "knowledge-test",
		Services: []server.Service{{
			Desc:  &knowledgev1.KnowledgeService_ServiceDesc,
			Impl:  knowledge.New(st, knowledge.WithClock(clk.Now)),
			Ready: st.Ping,
		}},
	})
	return &testBundle{ctx: t.Context(), client: knowledgev1.NewKnowledgeServiceClient(conn), clock: clk, store: st}
}

// record records an item and returns it.
func (b *testBundle) record(t *testing.T, req *knowledgev1.RecordItemRequest) *knowledgev1.Item {
	t.Helper()
	res, err := b.client.RecordItem(b.ctx, req)
	require.NoError(t, err)
	return res.GetItem()
}

// gotcha records a gotcha with the given pattern, content and confidence.
func (b *testBundle) gotcha(t *testing.T, pattern, content string, c float64) *knowledgev1.Item {
	t.Helper()
	return b.record(t, &knowledgev1.RecordItemRequest{
		Type: knowledgev1.ItemType_ITEM_TYPE_GOTCHA, Content: content, FilePattern: pattern, Confidence: &c,
	})
}

// query runs a query and returns the contents of the items answered, in order.
func (b *testBundle) query(t *testing.T, req *knowledgev1.QueryItemsRequest) []string {
	t.Helper()
	res, err := b.client.QueryItems(b.ctx, req)
	require.NoError(t, err)
	contents := []string{}
	for _, m := range res.GetMatches() {
		contents = append(contents, m.GetItem().GetContent())
	}
	return contents
}

// requireInvalid checks err is InvalidArgument with violations of exactly these fields.
func requireInvalid(t *testing.T, err error, fields ...string) {
	t.Helper()
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	var got []string
	for _, v := range grpcerr.Violations(err) {
		got = append(got, v.Field)
		require.NotEmpty(t, v.Description, v.Field)
	}
	require.ElementsMatch(t, fields, got, "%v", err)
}
