package knowledge_test

import (
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/pagetoken"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
	"github.com/converge-dev/converge/services/knowledge/store/sqlite"
)

// rawBackends open a store on a database the test can also reach with plain SQL.
var rawBackends = []struct {
	name string
	open func(t *testing.T) (store.Store, *sql.DB)
}{
	{"postgres", func(t *testing.T) (store.Store, *sql.DB) {
		url := dbtest.Postgres(t)
		st, err := postgres.New(t.Context(), url, database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		db, err := sql.Open("pgx", url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return st, db
	}},
	{"sqlite", func(t *testing.T) (store.Store, *sql.DB) {
		path := dbtest.SQLite(t)
		st, err := sqlite.New(t.Context(), path, database.WithMigrate())
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		db, err := database.OpenSQLite(path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return st, db
	}},
}

func requireCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	require.Equal(t, code.String(), status.Code(err).String(), "%v", err)
}

// TestUnexpectedErrorIsInternal: a table dropped under the Knowledge service is a bug: Internal
// with the request id and no SQL text (it used to reach the client as Unknown, with the text).
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	for _, rb := range rawBackends {
		t.Run(rb.name, func(t *testing.T) {
			t.Parallel()
			st, db := rb.open(t)
			b := setup(t, func(*testing.T) store.Store { return st })
			_, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{})
			require.NoError(t, err)
			_, err = db.ExecContext(t.Context(), "DROP TABLE knowledge_items")
			require.NoError(t, err)
			for _, call := range []func() error{
				func() error { _, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{}); return err },
				func() error {
					_, err := b.client.QueryItems(b.ctx, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "src/a.go"}})
					return err
				},
			} {
				err := call()
				requireCode(t, err, codes.Internal)
				msg := status.Convert(err).Message()
				require.Regexp(t, regexp.MustCompile(`^internal error \(request id [0-9a-zA-Z_-]+\)$`), msg)
				for _, leak := range []string{"relation", "table", "knowledge_items", "SELECT", "SQLSTATE", "/", ".go"} {
					require.False(t, strings.Contains(msg, leak), "message %q leaks %q", msg, leak)
				}
			}
		})
	}
}

// TestStoreOutageIsUnavailable: a closed store answers Unavailable, without the driver's text.
func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, rb := range rawBackends {
		t.Run(rb.name, func(t *testing.T) {
			t.Parallel()
			st, _ := rb.open(t)
			b := setup(t, func(*testing.T) store.Store { return st })
			_, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{})
			require.NoError(t, err)
			require.NoError(t, st.Close())
			_, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{})
			requireCode(t, err, codes.Unavailable)
			require.NotContains(t, status.Convert(err).Message(), "closed")
			_, err = b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: "kn_1"})
			requireCode(t, err, codes.Unavailable)
		})
	}
}

// TestPageTokensAreBoundToFilters: ListItems walks every item exactly once with a page size of
// 1, and a token replayed with another type or file pattern is InvalidArgument on page_token.
func TestPageTokensAreBoundToFilters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)
		var want []string
		for i := range 4 {
			want = append([]string{b.gotcha(t, "src/*.go", fmt.Sprintf("item %d", i), 0.7).GetId()}, want...)
			b.gotcha(t, "doc/*.md", fmt.Sprintf("doc %d", i), 0.7)
		}
		var got []string
		var first string
		req := &knowledgev1.ListItemsRequest{FilePattern: "src/*.go", PageSize: 1}
		for {
			res, err := b.client.ListItems(b.ctx, req)
			require.NoError(t, err)
			for _, it := range res.GetItems() {
				got = append(got, it.GetId())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			if first == "" {
				first = res.GetNextPageToken()
			}
			req.PageToken = res.GetNextPageToken()
		}
		require.Equal(t, want, got)
		for _, other := range []*knowledgev1.ListItemsRequest{
			{FilePattern: "doc/*.md", PageToken: first},
			{FilePattern: "src/*.go", Type: knowledgev1.ItemType_ITEM_TYPE_DECISION, PageToken: first},
		} {
			_, err := b.client.ListItems(b.ctx, other)
			requireCode(t, err, codes.InvalidArgument)
			require.Equal(t, []grpcerr.FieldViolation{{Field: "page_token", Description: pagetoken.ReasonOtherFilters}}, grpcerr.Violations(err))
		}
	})
}
