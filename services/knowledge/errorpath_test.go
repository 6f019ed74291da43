package knowledge_test

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/platform/grpcerr/grpcerrtest"
	"github.com/converge-dev/converge/platform/pagetoken/pagetokentest"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
	"github.com/converge-dev/converge/services/knowledge/store/sqlite"
)

// TestUnexpectedErrorIsInternal: a table dropped under the Knowledge service is a bug: Internal
// with the request id and no SQL text (it used to reach the client as Unknown, with the text).
func TestUnexpectedErrorIsInternal(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, db *sql.DB) {
		b := setup(t, func(*testing.T) store.Store { return st })
		for _, table := range []string{"knowledge_item_hits", "knowledge_items"} {
			_, err := db.ExecContext(t.Context(), "DROP TABLE "+table)
			require.NoError(t, err)
		}
		_, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{})
		grpcerrtest.RequireInternal(t, err)
		_, err = b.client.QueryItems(b.ctx, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "src/a.go"}})
		grpcerrtest.RequireInternal(t, err)
	})
}

// TestStoreOutageIsUnavailable: a closed store answers Unavailable, without the driver's text.
func TestStoreOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	dbtest.ForEachDialect(t, postgres.New, sqlite.New, func(t *testing.T, _ database.Dialect, st store.Store, _ *sql.DB) {
		b := setup(t, func(*testing.T) store.Store { return st })
		_, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{}) // the service has been ready
		require.NoError(t, err)
		require.NoError(t, st.Close())
		_, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{})
		grpcerrtest.RequireUnavailable(t, err)
		_, err = b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: "kn_1"})
		grpcerrtest.RequireUnavailable(t, err)
	})
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
		got, token := pagetokentest.Walk(t, func(tok string) (ids []string, next string) {
			res, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{FilePattern: "src/*.go", PageSize: 1, PageToken: tok})
			require.NoError(t, err)
			for _, it := range res.GetItems() {
				ids = append(ids, it.GetId())
			}
			return ids, res.GetNextPageToken()
		})
		require.Equal(t, want, got)
		_, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{FilePattern: "doc/*.md", PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)
		_, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{FilePattern: "src/*.go", Type: knowledgev1.ItemType_ITEM_TYPE_DECISION, PageToken: token})
		pagetokentest.RequireOtherFilters(t, err)
	})
}
