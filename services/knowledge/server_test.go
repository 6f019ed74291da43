package knowledge_test

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/services/knowledge"
	"github.com/converge-dev/converge/services/knowledge/confidence"
	"github.com/converge-dev/converge/services/knowledge/store"
)

const (
	gotcha   = knowledgev1.ItemType_ITEM_TYPE_GOTCHA
	pattern  = knowledgev1.ItemType_ITEM_TYPE_PATTERN
	decision = knowledgev1.ItemType_ITEM_TYPE_DECISION
)

func requireProtoEqual(t *testing.T, want, got proto.Message) {
	t.Helper()
	require.True(t, proto.Equal(want, got), "want:\n%v\ngot:\n%v", want, got)
}

func TestRecordItem(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		res, err := b.client.RecordItem(b.ctx, &knowledgev1.RecordItemRequest{
			Type:        gotcha,
			Content:     "Use TEXT for SQLite timestamps, not DATETIME",
			FilePattern: "database/migrations/*.sql",
			Tags:        []string{"sqlite", "migrations"},
			Source:      &knowledgev1.Source{ExecutionId: "ex-1", TaskId: "1.2", AgentId: "agent-1"},
			Evidence:    "task 1.2 failed: no such function: datetime",
		})
		require.NoError(t, err)
		require.Equal(t, knowledgev1.RecordOutcome_RECORD_OUTCOME_CREATED, res.GetOutcome())
		item := res.GetItem()
		require.Regexp(t, `^kn_[0-9]+$`, item.GetId())
		at := timestamppb.New(t0)
		requireProtoEqual(t, &knowledgev1.Item{
			Id:                  item.GetId(),
			Type:                gotcha,
			Content:             "Use TEXT for SQLite timestamps, not DATETIME",
			FilePattern:         "database/migrations/*.sql",
			Tags:                []string{"sqlite", "migrations"},
			Confidence:          0.7, // the default
			EffectiveConfidence: 0.7,
			Source:              &knowledgev1.Source{ExecutionId: "ex-1", TaskId: "1.2", AgentId: "agent-1"},
			Evidence:            "task 1.2 failed: no such function: datetime",
			CreateTime:          at, UpdateTime: at, LastConfirmTime: at,
		}, item)

		// The same lesson again, worded with other case and spacing: the twin is confirmed.
		b.clock.Advance(time.Hour)
		res, err = b.client.RecordItem(b.ctx, &knowledgev1.RecordItemRequest{
			Type: gotcha, Content: "use text for sqlite timestamps,\n  not datetime", FilePattern: "database/migrations/*.sql",
		})
		require.NoError(t, err)
		require.Equal(t, knowledgev1.RecordOutcome_RECORD_OUTCOME_CONFIRMED_EXISTING, res.GetOutcome())
		require.Equal(t, item.GetId(), res.GetItem().GetId())
		require.Equal(t, "Use TEXT for SQLite timestamps, not DATETIME", res.GetItem().GetContent())
		require.Equal(t, 0.76, res.GetItem().GetConfidence())
		require.Equal(t, 0.76, res.GetItem().GetEffectiveConfidence())
		require.Equal(t, int64(1), res.GetItem().GetConfirmCount())
		require.Equal(t, t0.Add(time.Hour), res.GetItem().GetLastConfirmTime().AsTime())
		require.Equal(t, t0, res.GetItem().GetCreateTime().AsTime())

		// Another type is another item; an explicit confidence is kept.
		c := 0.95
		res, err = b.client.RecordItem(b.ctx, &knowledgev1.RecordItemRequest{
			Type: decision, Content: "Use TEXT for SQLite timestamps, not DATETIME", FilePattern: "database/migrations/*.sql",
			Confidence: &c,
		})
		require.NoError(t, err)
		require.Equal(t, knowledgev1.RecordOutcome_RECORD_OUTCOME_CREATED, res.GetOutcome())
		require.Equal(t, 0.95, res.GetItem().GetConfidence())
		require.NotEqual(t, item.GetId(), res.GetItem().GetId())
	})
}

// Agents racing to record one lesson create it once; every other record confirms it.
func TestRecordItemRace(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		const n = 12
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			outcomes = map[knowledgev1.RecordOutcome]int{}
			ids      = map[string]bool{}
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				res, err := b.client.RecordItem(b.ctx, &knowledgev1.RecordItemRequest{
					Type: gotcha, Content: strings.Repeat(" ", i) + "Wrap the app in a Toaster", FilePattern: "client/src/**/*.tsx",
					Source: &knowledgev1.Source{AgentId: fmt.Sprintf("agent-%d", i)},
				})
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				outcomes[res.GetOutcome()]++
				ids[res.GetItem().GetId()] = true
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, map[knowledgev1.RecordOutcome]int{
			knowledgev1.RecordOutcome_RECORD_OUTCOME_CREATED:            1,
			knowledgev1.RecordOutcome_RECORD_OUTCOME_CONFIRMED_EXISTING: n - 1,
		}, outcomes)
		require.Len(t, ids, 1)
		for id := range ids {
			got, err := b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: id})
			require.NoError(t, err)
			require.Equal(t, int64(n-1), got.GetItem().GetConfirmCount())
		}
	})
}

func TestQueryItemsByPath(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		b.gotcha(t, "*.sql", "SQL files: use IF NOT EXISTS", 0.7)
		b.gotcha(t, "database/migrations/*.sql", "Migrations: one table per file", 0.7)
		b.gotcha(t, "database/**", "Database: snake_case names", 0.9)
		b.gotcha(t, "server/routes/*", "Routes: validate the body with zod", 0.8)
		b.gotcha(t, "*.ts", "TypeScript: strict mode", 0.65)
		b.gotcha(t, "server/routes/habits.ts", "habits.ts: keep handlers thin", 0.7)
		b.gotcha(t, "docs/*.md", "Docs: one sentence per line", 0.99)

		// The examples: *.sql matches a migration at any depth, server/routes/* a route.
		// Ranked by effective confidence, then specificity.
		path := &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "database/migrations/001_habits.sql"}}
		require.Equal(t, []string{
			"Database: snake_case names", "Migrations: one table per file", "SQL files: use IF NOT EXISTS",
		}, b.query(t, path))
		require.Equal(t, []string{
			"Routes: validate the body with zod", "habits.ts: keep handlers thin", "TypeScript: strict mode",
		}, b.query(t, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "server/routes/habits.ts"}}))
		require.Equal(t, []string{"Routes: validate the body with zod", "TypeScript: strict mode"},
			b.query(t, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "server/routes/users.ts"}}))
		require.Empty(t, b.query(t, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "README.md"}}))

		// Each match says how specific its pattern is, and every answer counted as a hit.
		res, err := b.client.QueryItems(b.ctx, path)
		require.NoError(t, err)
		require.Len(t, res.GetMatches(), 3)
		require.Equal(t, []int32{997_009, 2_098_024, 98_004}, []int32{
			res.GetMatches()[0].GetSpecificity(), res.GetMatches()[1].GetSpecificity(), res.GetMatches()[2].GetSpecificity(),
		})
		for _, m := range res.GetMatches() {
			require.Equal(t, int64(2), m.GetItem().GetHitCount(), m.GetItem().GetContent())
		}
		// GetItem is not a hit.
		got, err := b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: res.GetMatches()[0].GetItem().GetId()})
		require.NoError(t, err)
		require.Equal(t, int64(2), got.GetItem().GetHitCount())

		// min_confidence filters on the effective confidence: after 30 days without confirmation
		// 0.7 has decayed to 0.5556 and 0.9 to 0.7143.
		b.clock.Advance(30 * 24 * time.Hour)
		path.MinConfidence = 0.6
		res, err = b.client.QueryItems(b.ctx, path)
		require.NoError(t, err)
		require.Len(t, res.GetMatches(), 1)
		require.Equal(t, "Database: snake_case names", res.GetMatches()[0].GetItem().GetContent())
		require.Equal(t, 0.7143, res.GetMatches()[0].GetItem().GetEffectiveConfidence())
		require.Equal(t, 0.9, res.GetMatches()[0].GetItem().GetConfidence())
		path.MinConfidence = 0.5556
		require.Len(t, b.query(t, path), 3, "the minimum is inclusive")
		path.MinConfidence = 0.5557
		require.Len(t, b.query(t, path), 1)

		// A confirmation restarts the decay clock.
		sql := res.GetMatches()[0].GetItem().GetId()
		_, err = b.client.ConfirmItem(b.ctx, &knowledgev1.ConfirmItemRequest{Id: sql})
		require.NoError(t, err)
		path.MinConfidence = 0
		path.Limit = 1
		res, err = b.client.QueryItems(b.ctx, path)
		require.NoError(t, err)
		require.Equal(t, 0.92, res.GetMatches()[0].GetItem().GetEffectiveConfidence())
	})
}

func TestQueryItemsFilters(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		add := func(typ knowledgev1.ItemType, p, content string, tags ...string) {
			b.record(t, &knowledgev1.RecordItemRequest{Type: typ, Content: content, FilePattern: p, Tags: tags})
		}
		add(gotcha, "*.sql", "Migrations must be idempotent", "database", "migrations")
		add(pattern, "*.sql", "Wrap each migration in a transaction", "migrations")
		add(decision, "database/**", "SQLite in dev, Postgres in production", "database")
		add(gotcha, "client/**/*.tsx", "The toast needs a Toaster provider", "react")

		path := func(req *knowledgev1.QueryItemsRequest) *knowledgev1.QueryItemsRequest {
			req.Target = &knowledgev1.QueryItemsRequest_FilePath{FilePath: "database/migrations/001_habits.sql"}
			return req
		}
		require.Len(t, b.query(t, path(&knowledgev1.QueryItemsRequest{})), 3)
		require.Equal(t, []string{"Migrations must be idempotent"},
			b.query(t, path(&knowledgev1.QueryItemsRequest{Types: []knowledgev1.ItemType{gotcha}})))
		require.ElementsMatch(t, []string{"Migrations must be idempotent", "SQLite in dev, Postgres in production"},
			b.query(t, path(&knowledgev1.QueryItemsRequest{Types: []knowledgev1.ItemType{gotcha, decision}})))
		require.ElementsMatch(t, []string{"Migrations must be idempotent", "Wrap each migration in a transaction"},
			b.query(t, path(&knowledgev1.QueryItemsRequest{Tags: []string{"migrations"}})))
		require.Equal(t, []string{"Migrations must be idempotent"},
			b.query(t, path(&knowledgev1.QueryItemsRequest{Tags: []string{"migrations", "database"}})))
		require.Equal(t, []string{"Wrap each migration in a transaction"},
			b.query(t, path(&knowledgev1.QueryItemsRequest{Text: "transactions"})))
		require.Len(t, b.query(t, path(&knowledgev1.QueryItemsRequest{Limit: 2})), 2)

		// By pattern: the items stored under exactly that pattern.
		require.ElementsMatch(t, []string{"Migrations must be idempotent", "Wrap each migration in a transaction"},
			b.query(t, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePattern{FilePattern: "*.sql"}}))
		require.Empty(t, b.query(t, &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePattern{FilePattern: "database/*"}}))
		// All, with a text search over content and tags.
		all := &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{All: true}}
		require.Len(t, b.query(t, all), 4)
		all.Text = "toaster"
		require.Equal(t, []string{"The toast needs a Toaster provider"}, b.query(t, all))
		all.Text = "react"
		require.Equal(t, []string{"The toast needs a Toaster provider"}, b.query(t, all))
	})
}

// Candidates the glob turns down do not crowd out the matches: the query reads on until it has
// its limit.
func TestQueryItemsSkipsNonMatchingCandidates(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		// Same bucket ("" and "go") as *.go, more confident, but not matching main.go.
		for i := range 60 {
			b.gotcha(t, "*_test.go", fmt.Sprintf("tests %d", i), 0.9)
		}
		for i := range 5 {
			b.gotcha(t, "*.go", fmt.Sprintf("go %d", i), 0.5)
		}
		got := b.query(t, &knowledgev1.QueryItemsRequest{
			Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "cmd/main.go"}, Limit: 3,
		})
		require.Equal(t, []string{"go 4", "go 3", "go 2"}, got) // equal rank and specificity: newest first
	})
}

func TestConfirmAndRefute(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		item := b.gotcha(t, "*.sql", "Use IF NOT EXISTS", 0.7)

		// 90 days later, unconfirmed, the effective confidence has halved.
		b.clock.Advance(confidence.HalfLife)
		got, err := b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: item.GetId()})
		require.NoError(t, err)
		require.Equal(t, 0.7, got.GetItem().GetConfidence())
		require.Equal(t, 0.35, got.GetItem().GetEffectiveConfidence())

		// A confirmation raises the confidence and restarts the decay clock.
		confirmed, err := b.client.ConfirmItem(b.ctx, &knowledgev1.ConfirmItemRequest{
			Id: item.GetId(), Evidence: "held in task 3.1", Source: &knowledgev1.Source{AgentId: "agent-2"},
		})
		require.NoError(t, err)
		require.Equal(t, 0.76, confirmed.GetItem().GetConfidence())
		require.Equal(t, 0.76, confirmed.GetItem().GetEffectiveConfidence())
		require.Equal(t, int64(1), confirmed.GetItem().GetConfirmCount())
		require.Equal(t, "held in task 3.1", confirmed.GetItem().GetEvidence())
		require.Equal(t, t0.Add(confidence.HalfLife), confirmed.GetItem().GetLastConfirmTime().AsTime())

		// A refutation halves it; the decay clock keeps running.
		b.clock.Advance(confidence.HalfLife)
		refuted, err := b.client.RefuteItem(b.ctx, &knowledgev1.RefuteItemRequest{Id: item.GetId(), Reason: "Postgres 15 has it"})
		require.NoError(t, err)
		require.Equal(t, 0.38, refuted.GetItem().GetConfidence())
		require.Equal(t, 0.19, refuted.GetItem().GetEffectiveConfidence())
		require.Equal(t, int64(1), refuted.GetItem().GetRefuteCount())
		require.Equal(t, "refuted: Postgres 15 has it", refuted.GetItem().GetEvidence())
		require.Equal(t, t0.Add(confidence.HalfLife), refuted.GetItem().GetLastConfirmTime().AsTime())
		require.Equal(t, t0.Add(2*confidence.HalfLife), refuted.GetItem().GetUpdateTime().AsTime())
	})
}

func TestGetListDelete(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		var ids []string
		for i := range 5 {
			p := "*.sql"
			if i%2 == 1 {
				p = "server/routes/*"
			}
			ids = append([]string{b.gotcha(t, p, fmt.Sprintf("item %d", i), 0.7).GetId()}, ids...) // newest first
		}

		// Pages of two, newest first.
		var listed []string
		req := &knowledgev1.ListItemsRequest{PageSize: 2}
		for {
			res, err := b.client.ListItems(b.ctx, req)
			require.NoError(t, err)
			for _, it := range res.GetItems() {
				listed = append(listed, it.GetId())
			}
			if res.GetNextPageToken() == "" {
				break
			}
			req.PageToken = res.GetNextPageToken()
		}
		require.Equal(t, ids, listed)

		// Filters, and a token used with other filters.
		res, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{FilePattern: "server/routes/*", PageSize: 1})
		require.NoError(t, err)
		require.Equal(t, ids[1], res.GetItems()[0].GetId()) // items 1 and 3 are under server/routes/*
		_, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{PageToken: res.GetNextPageToken()})
		requireInvalid(t, err, "page_token")
		res, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{FilePattern: "server/routes/*", PageToken: res.GetNextPageToken()})
		require.NoError(t, err)
		require.Len(t, res.GetItems(), 1)
		require.Equal(t, ids[3], res.GetItems()[0].GetId())
		res, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{Type: decision})
		require.NoError(t, err)
		require.Empty(t, res.GetItems())
		require.Empty(t, res.GetNextPageToken())

		// Delete; then the item is gone everywhere.
		_, err = b.client.DeleteItem(b.ctx, &knowledgev1.DeleteItemRequest{Id: ids[0]})
		require.NoError(t, err)
		_, err = b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: ids[0]})
		require.Equal(t, codes.NotFound, status.Code(err))
		require.Equal(t, fmt.Sprintf("knowledge item %q not found", ids[0]), status.Convert(err).Message())
		_, err = b.client.DeleteItem(b.ctx, &knowledgev1.DeleteItemRequest{Id: ids[0]})
		require.Equal(t, codes.NotFound, status.Code(err))
		res, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{})
		require.NoError(t, err)
		require.Len(t, res.GetItems(), 4)
	})
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		b.gotcha(t, "*.sql", "x", 0.7)
		for _, id := range []string{"kn_999", "kn_01", "kn_x", "kn_0", "abc", "kn_99999999999999999999"} {
			_, err := b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: id})
			require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", id, err)
			_, err = b.client.ConfirmItem(b.ctx, &knowledgev1.ConfirmItemRequest{Id: id})
			require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", id, err)
			_, err = b.client.RefuteItem(b.ctx, &knowledgev1.RefuteItemRequest{Id: id})
			require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", id, err)
			_, err = b.client.DeleteItem(b.ctx, &knowledgev1.DeleteItemRequest{Id: id})
			require.Equal(t, codes.NotFound, status.Code(err), "%s: %v", id, err)
		}
	})
}

// Bad input is InvalidArgument naming each broken field, whether the proto's rules or the
// service's catch it; never Internal.
func TestInvalidArgument(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, newStore func(t *testing.T) store.Store) {
		b := setup(t, newStore)

		c := func(v float64) *float64 { return &v }
		record := func(mutate func(r *knowledgev1.RecordItemRequest)) error {
			r := &knowledgev1.RecordItemRequest{Type: gotcha, Content: "x", FilePattern: "*.sql"}
			mutate(r)
			_, err := b.client.RecordItem(b.ctx, r)
			return err
		}
		records := []struct {
			name   string
			mutate func(r *knowledgev1.RecordItemRequest)
			fields []string
		}{
			{"bad glob", func(r *knowledgev1.RecordItemRequest) { r.FilePattern = "src/[a-" }, []string{"file_pattern"}},
			{"unbalanced brace", func(r *knowledgev1.RecordItemRequest) { r.FilePattern = "src/{a,b" }, []string{"file_pattern"}},
			{"backslash", func(r *knowledgev1.RecordItemRequest) { r.FilePattern = `src\*.go` }, []string{"file_pattern"}},
			{"absolute", func(r *knowledgev1.RecordItemRequest) { r.FilePattern = "/etc/*" }, []string{"file_pattern"}},
			{"dot dot", func(r *knowledgev1.RecordItemRequest) { r.FilePattern = "a/../../*" }, []string{"file_pattern"}},
			{"only dots", func(r *knowledgev1.RecordItemRequest) { r.FilePattern = ".//." }, []string{"file_pattern"}},
			{"confidence above 1", func(r *knowledgev1.RecordItemRequest) { r.Confidence = c(1.5) }, []string{"confidence"}},
			{"confidence below 0", func(r *knowledgev1.RecordItemRequest) { r.Confidence = c(-0.1) }, []string{"confidence"}},
			{"confidence NaN", func(r *knowledgev1.RecordItemRequest) { r.Confidence = c(math.NaN()) }, []string{"confidence"}},
			{"oversize content", func(r *knowledgev1.RecordItemRequest) { r.Content = strings.Repeat("x", 16<<10+1) }, []string{"content"}},
			{"blank content", func(r *knowledgev1.RecordItemRequest) { r.Content = " \n\t" }, []string{"content"}},
			{"no type", func(r *knowledgev1.RecordItemRequest) { r.Type = 0 }, []string{"type"}},
			{"unknown type", func(r *knowledgev1.RecordItemRequest) { r.Type = 42 }, []string{"type"}},
			{"bad tag", func(r *knowledgev1.RecordItemRequest) { r.Tags = []string{"SQL"} }, []string{"tags[0]"}},
			{"oversize evidence", func(r *knowledgev1.RecordItemRequest) { r.Evidence = strings.Repeat("e", 16<<10+1) }, []string{"evidence"}},
			{"two at once", func(r *knowledgev1.RecordItemRequest) { r.Confidence, r.Content = c(2), "" }, []string{"confidence", "content"}},
		}
		for _, tt := range records {
			requireInvalid(t, record(tt.mutate), tt.fields...)
		}

		queries := []struct {
			name   string
			req    *knowledgev1.QueryItemsRequest
			fields []string
		}{
			{"no target", &knowledgev1.QueryItemsRequest{}, []string{"target"}},
			{"absolute path", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "/etc/passwd"}}, []string{"file_path"}},
			{"backslash path", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: `a\b.go`}}, []string{"file_path"}},
			{"empty path", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "./"}}, []string{"file_path"}},
			{"dot segment", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "./server/routes/habits.ts"}}, []string{"file_path"}},
			{"inside .git", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePath{FilePath: "sub/.git/config"}}, []string{"file_path"}},
			{"directory pattern", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePattern{FilePattern: "docs/"}}, []string{"file_pattern"}},
			{"bad pattern", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_FilePattern{FilePattern: "[z-"}}, []string{"file_pattern"}},
			{"all false", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{}}, []string{"all"}},
			{"min confidence", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{All: true}, MinConfidence: 2}, []string{"min_confidence"}},
			{"limit", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{All: true}, Limit: 501}, []string{"limit"}},
			{"text without words", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{All: true}, Text: "--"}, []string{"text"}},
			{"type", &knowledgev1.QueryItemsRequest{Target: &knowledgev1.QueryItemsRequest_All{All: true}, Types: []knowledgev1.ItemType{0}}, []string{"types[0]"}},
		}
		for _, tt := range queries {
			_, err := b.client.QueryItems(b.ctx, tt.req)
			requireInvalid(t, err, tt.fields...)
		}

		_, err := b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{PageSize: 1001})
		requireInvalid(t, err, "page_size")
		_, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{PageToken: "garbage"})
		requireInvalid(t, err, "page_token")
		_, err = b.client.ListItems(b.ctx, &knowledgev1.ListItemsRequest{FilePattern: "a/{b"})
		requireInvalid(t, err, "file_pattern")
		_, err = b.client.ConfirmItem(b.ctx, &knowledgev1.ConfirmItemRequest{Id: "kn_1", Evidence: strings.Repeat("e", 16<<10+1)})
		requireInvalid(t, err, "evidence")
		_, err = b.client.RefuteItem(b.ctx, &knowledgev1.RefuteItemRequest{Id: "kn_1", Reason: strings.Repeat("e", 16<<10+1)})
		requireInvalid(t, err, "reason")
		_, err = b.client.GetItem(b.ctx, &knowledgev1.GetItemRequest{Id: "../x"})
		requireInvalid(t, err, "id")

		// The messages say what to fix.
		err = record(func(r *knowledgev1.RecordItemRequest) { r.FilePattern = "src/[a-" })
		require.Equal(t, "invalid RecordItemRequest: file_pattern: must be a clean repository-relative doublestar glob: no leading or trailing '/', drive letter, '\\' or control character, no empty, '.', '..' or '.git' segment or alternative, classes closed and not empty, braces balanced and not nested, at most 1024 bytes",
			status.Convert(err).Message())
	})
}

// The handlers check what the store relies on themselves: called without the server's
// validation interceptor, bad input is still InvalidArgument, never a store error.
func TestHandlersValidateWithoutInterceptor(t *testing.T) {
	t.Parallel()
	srv := knowledge.New(backends["sqlite"](t))
	ctx := t.Context()

	c := 1.5
	_, err := srv.RecordItem(ctx, &knowledgev1.RecordItemRequest{FilePattern: "../x", Tags: []string{"A", "A"}, Confidence: &c})
	requireInvalid(t, err, "type", "content", "file_pattern", "tags[0]", "tags[1]", "confidence")
	_, err = srv.RecordItem(ctx, &knowledgev1.RecordItemRequest{Type: gotcha, Content: "x", FilePattern: "*.sql", Tags: []string{"a", "a"}})
	requireInvalid(t, err, "tags[1]")
	_, err = srv.QueryItems(ctx, &knowledgev1.QueryItemsRequest{Types: []knowledgev1.ItemType{9}, Limit: -1, MinConfidence: math.Inf(1)})
	requireInvalid(t, err, "target", "types[0]", "limit", "min_confidence")
	_, err = srv.ListItems(ctx, &knowledgev1.ListItemsRequest{Type: 9, PageSize: -1})
	requireInvalid(t, err, "type", "page_size")
	_, err = srv.GetItem(ctx, &knowledgev1.GetItemRequest{})
	require.Equal(t, codes.NotFound, status.Code(err))
}
