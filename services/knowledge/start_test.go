package knowledge_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/database/dbtest"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
)

// Start writes the hits queries counted in the background: another replica reads them without
// the answering one closing.
func TestStartWritesHits(t *testing.T) {
	t.Parallel()
	url := dbtest.Postgres(t)
	st, err := postgres.New(t.Context(), url, database.WithMigrate())
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	other, err := postgres.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })

	it, _, err := st.Record(t.Context(), store.NewItem{
		Type: store.TypeGotcha, Content: "x", FilePattern: "*.sql", Confidence: 0.9,
	}, time.Now())
	require.NoError(t, err)
	srv := knowledge.New(st)
	srv.Start(t.Context())
	res, err := srv.QueryItems(t.Context(), &knowledgev1.QueryItemsRequest{
		Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "db/a.sql"},
	})
	require.NoError(t, err)
	require.Len(t, res.GetMatches(), 1)
	require.Equal(t, int64(1), res.GetMatches()[0].GetItem().GetHitCount())

	require.Eventually(t, func() bool {
		got, err := other.Get(t.Context(), it.ID)
		return err == nil && got.HitCount == 1
	}, 30*time.Second, 20*time.Millisecond)
}
