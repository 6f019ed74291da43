package storetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	harness "github.com/converge-dev/converge/platform/storetest"
	"github.com/converge-dev/converge/services/knowledge/confidence"
	"github.com/converge-dev/converge/services/knowledge/store"
)

// t0 is the suite's "now": a millisecond instant, the precision every backend keeps.
var t0 = time.Date(2026, 1, 16, 10, 0, 0, 123_000_000, time.UTC)

// bundle is what each behaviour test works with.
type bundle struct {
	ctx   context.Context
	store store.Store
}

func setup(t *testing.T, newStore func(t *testing.T) store.Store) *bundle {
	t.Helper()
	return &bundle{ctx: t.Context(), store: newStore(t)}
}

// record records a gotcha with default fields at now and returns it.
func (b *bundle) record(t *testing.T, pattern, content string, now time.Time) store.Item {
	t.Helper()
	it, _, err := b.store.Record(b.ctx, store.NewItem{
		Type: store.TypeGotcha, Content: content, FilePattern: pattern, Confidence: confidence.Default,
	}, now)
	require.NoError(t, err)
	return it
}

// candidates returns the patterns of every candidate of q, following the cursor with pages of
// q.Limit.
func (b *bundle) candidates(t *testing.T, q store.CandidateQuery) []string {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = 100
	}
	if q.MinRank == 0 {
		q.MinRank = math.MinInt64
	}
	var patterns []string
	for {
		page, err := b.store.Candidates(b.ctx, q)
		require.NoError(t, err)
		for _, it := range page {
			patterns = append(patterns, it.FilePattern)
		}
		if len(page) < q.Limit {
			return patterns
		}
		c := page[len(page)-1].Cursor()
		q.After = &c
	}
}

// runItems runs the behaviour of every Store method.
func runItems(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("RecordAndGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		in := store.NewItem{
			Type: store.TypePattern, Content: "Routes return JSON", FilePattern: "server/routes/*.ts",
			Tags: []string{"express", "api"}, Confidence: 0.85,
			Source:   store.Source{ExecutionID: "ex1", TaskID: "1.2", AgentID: "agent-1"},
			Evidence: "task 1.2 passed",
		}
		now := t0.Add(987 * time.Microsecond) // kept to the millisecond
		got, created, err := b.store.Record(b.ctx, in, now)
		require.NoError(t, err)
		require.True(t, created)
		require.Positive(t, got.ID)
		want := store.Item{
			ID: got.ID, Type: store.TypePattern, Content: "Routes return JSON", FilePattern: "server/routes/*.ts",
			Specificity: 1_498_017, Tags: []string{"express", "api"}, Confidence: 0.85,
			Rank:     confidence.Rank(0.85, t0),
			Source:   store.Source{ExecutionID: "ex1", TaskID: "1.2", AgentID: "agent-1"},
			Evidence: "task 1.2 passed", CreatedAt: t0, UpdatedAt: t0, LastConfirmedAt: t0,
		}
		require.Equal(t, want, got)

		again, err := b.store.Get(b.ctx, got.ID)
		require.NoError(t, err)
		require.Equal(t, want, again)

		// Without tags, source or evidence.
		bare := b.record(t, "*.sql", "Use IF NOT EXISTS", t0)
		require.Equal(t, []string{}, bare.Tags)
		require.Equal(t, store.Source{}, bare.Source)
		require.Empty(t, bare.Evidence)
		require.Greater(t, bare.ID, got.ID)

		_, err = b.store.Get(b.ctx, bare.ID+1000)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("RecordConfirmsTwin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		first, created, err := b.store.Record(b.ctx, store.NewItem{
			Type: store.TypeGotcha, Content: "Use TEXT for SQLite timestamps", FilePattern: "*.sql",
			Tags: []string{"sqlite"}, Confidence: 0.7, Evidence: "first",
		}, t0)
		require.NoError(t, err)
		require.True(t, created)

		// Same type, pattern and content up to case and white space: the twin is confirmed; its
		// tags, source and confidence stay, the new evidence replaces the old.
		t1 := t0.Add(time.Hour)
		twin, created, err := b.store.Record(b.ctx, store.NewItem{
			Type: store.TypeGotcha, Content: "  use text\tfor SQLITE\n timestamps ", FilePattern: "*.sql",
			Tags: []string{"other"}, Confidence: 0.1, Source: store.Source{AgentID: "a2"}, Evidence: "second",
		}, t1)
		require.NoError(t, err)
		require.False(t, created)
		want := first
		want.Confidence = confidence.Confirm(0.7)
		want.Rank = confidence.Rank(want.Confidence, t1)
		want.ConfirmCount = 1
		want.Evidence = "second"
		want.UpdatedAt, want.LastConfirmedAt = t1, t1
		require.Equal(t, want, twin)

		// Without evidence the evidence stays.
		t2 := t1.Add(time.Hour)
		twin, created, err = b.store.Record(b.ctx, store.NewItem{
			Type: store.TypeGotcha, Content: "USE TEXT FOR SQLITE TIMESTAMPS", FilePattern: "*.sql", Confidence: 0.7,
		}, t2)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, "second", twin.Evidence)
		require.Equal(t, int64(2), twin.ConfirmCount)
		require.Equal(t, confidence.Confirm(confidence.Confirm(0.7)), twin.Confidence)

		// Another type or pattern is another item.
		for _, it := range []store.NewItem{
			{Type: store.TypeDecision, Content: "Use TEXT for SQLite timestamps", FilePattern: "*.sql", Confidence: 0.7},
			{Type: store.TypeGotcha, Content: "Use TEXT for SQLite timestamps", FilePattern: "db/*.sql", Confidence: 0.7},
		} {
			other, created, err := b.store.Record(b.ctx, it, t2)
			require.NoError(t, err)
			require.True(t, created)
			require.NotEqual(t, first.ID, other.ID)
		}
	})

	t.Run("RecordRace", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		// Many concurrent records of one item: created once, confirmed once per other record,
		// every confirmation applied (none lost to a race).
		const n = 16
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
			ids     = map[int64]bool{}
		)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				it, c, err := b.store.Record(b.ctx, store.NewItem{
					Type: store.TypeGotcha, Content: fmt.Sprintf("Migrations must be IDEMPOTENT%s", spaces(i)),
					FilePattern: "database/migrations/*.sql", Confidence: 0.7,
				}, t0)
				require.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				ids[it.ID] = true
				if c {
					created++
				}
			})
		}
		close(start)
		wg.Wait()
		require.Equal(t, 1, created)
		require.Len(t, ids, 1)

		var id int64
		for id = range ids {
		}
		got, err := b.store.Get(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, int64(n-1), got.ConfirmCount)
		want := 0.7
		for range n - 1 {
			want = confidence.Confirm(want)
		}
		require.Equal(t, want, got.Confidence)
		all, err := b.store.List(b.ctx, store.ListFilter{Limit: 100})
		require.NoError(t, err)
		require.Len(t, all, 1)
	})

	t.Run("ConfirmAndRefute", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		it := b.record(t, "*.sql", "Use IF NOT EXISTS", t0)
		t1 := t0.Add(24 * time.Hour)
		confirmed, err := b.store.Confirm(b.ctx, it.ID, "held in task 2.1", "", t1)
		require.NoError(t, err)
		want := it
		want.Confidence, want.ConfirmCount, want.Evidence = 0.76, 1, "held in task 2.1"
		want.UpdatedAt, want.LastConfirmedAt = t1, t1
		want.Rank = confidence.Rank(0.76, t1)
		require.Equal(t, want, confirmed)

		// A refutation halves the confidence and leaves the decay clock alone.
		t2 := t1.Add(24 * time.Hour)
		refuted, err := b.store.Refute(b.ctx, it.ID, "breaks on Postgres 15", t2)
		require.NoError(t, err)
		want.Confidence, want.RefuteCount, want.Evidence = 0.38, 1, "refuted: breaks on Postgres 15"
		want.UpdatedAt = t2
		want.Rank = confidence.Rank(0.38, t1)
		require.Equal(t, want, refuted)

		// Without evidence or reason the evidence stays.
		again, err := b.store.Confirm(b.ctx, it.ID, "", "", t2)
		require.NoError(t, err)
		require.Equal(t, "refuted: breaks on Postgres 15", again.Evidence)
		again, err = b.store.Refute(b.ctx, it.ID, "", t2)
		require.NoError(t, err)
		require.Equal(t, "refuted: breaks on Postgres 15", again.Evidence)
		require.Equal(t, int64(2), again.ConfirmCount)
		require.Equal(t, int64(2), again.RefuteCount)

		got, err := b.store.Get(b.ctx, it.ID)
		require.NoError(t, err)
		require.Equal(t, again, got)

		_, err = b.store.Confirm(b.ctx, it.ID+1, "", "", t2)
		require.ErrorIs(t, err, store.ErrNotFound)
		_, err = b.store.Refute(b.ctx, it.ID+1, "", t2)
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		it := b.record(t, "*.sql", "Use IF NOT EXISTS", t0)
		require.NoError(t, b.store.Delete(b.ctx, it.ID))
		_, err := b.store.Get(b.ctx, it.ID)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, b.store.Delete(b.ctx, it.ID), store.ErrNotFound)

		// Recording it again creates it anew.
		_, created, err := b.store.Record(b.ctx, store.NewItem{
			Type: store.TypeGotcha, Content: "Use IF NOT EXISTS", FilePattern: "*.sql", Confidence: 0.7,
		}, t0)
		require.NoError(t, err)
		require.True(t, created)
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		var ids []int64
		for i := range 7 {
			typ, pattern := store.TypeGotcha, "*.sql"
			if i%2 == 1 {
				typ, pattern = store.TypeDecision, "server/routes/*"
			}
			it, _, err := b.store.Record(b.ctx, store.NewItem{
				Type: typ, Content: fmt.Sprintf("item %d", i), FilePattern: pattern, Confidence: 0.5,
			}, t0)
			require.NoError(t, err)
			ids = append(ids, it.ID)
		}
		slices.Reverse(ids) // newest first

		list := func(f store.ListFilter) []int64 {
			items, err := b.store.List(b.ctx, f)
			require.NoError(t, err)
			var got []int64
			for _, it := range items {
				got = append(got, it.ID)
			}
			return got
		}
		require.Equal(t, ids, list(store.ListFilter{Limit: 100}))
		require.Equal(t, ids[:3], list(store.ListFilter{Limit: 3}))
		require.Equal(t, ids[3:6], list(store.ListFilter{Limit: 3, BeforeID: ids[2]}))
		require.Equal(t, ids[6:], list(store.ListFilter{Limit: 3, BeforeID: ids[5]}))
		require.Empty(t, list(store.ListFilter{Limit: 3, BeforeID: ids[6]}))

		decisions := []int64{ids[1], ids[3], ids[5]}
		require.Equal(t, decisions, list(store.ListFilter{Limit: 100, Type: store.TypeDecision}))
		require.Equal(t, decisions, list(store.ListFilter{Limit: 100, FilePattern: "server/routes/*"}))
		require.Equal(t, decisions[1:], list(store.ListFilter{Limit: 100, Type: store.TypeDecision, BeforeID: ids[1]}))
		require.Empty(t, list(store.ListFilter{Limit: 100, Type: store.TypeGotcha, FilePattern: "server/routes/*"}))
	})

	t.Run("CandidatesByPath", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		for _, p := range []string{
			"*.sql", "database/migrations/*.sql", "database/**", "database/migrations/001_habits.sql", "**",
			"database/migrations/*", "database/mig*/0*.sql", "**/migrations/*.sql", "**/migrations/**",
			// Not in the buckets of database/migrations/001_habits.sql:
			"docs/*.md", "server/routes/*", "*.ts", "database/seeds/*.sql", "database/migrations/002_x.sql",
			"src/**", "**/seeds/*.sql", "Makefile",
		} {
			b.record(t, p, "about "+p, t0)
		}

		require.ElementsMatch(t, []string{
			"*.sql", "database/migrations/*.sql", "database/**", "database/migrations/001_habits.sql", "**",
			"database/migrations/*", "database/mig*/0*.sql", "**/migrations/*.sql", "**/migrations/**",
		}, b.candidates(t, store.CandidateQuery{Path: "database/migrations/001_habits.sql"}))
		require.ElementsMatch(t, []string{"server/routes/*", "*.ts", "**"},
			b.candidates(t, store.CandidateQuery{Path: "server/routes/habits.ts"}))
		// "src/**" matches "src" itself; a literal name without '/' matches at any depth.
		require.ElementsMatch(t, []string{"src/**", "**"}, b.candidates(t, store.CandidateQuery{Path: "src"}))
		require.ElementsMatch(t, []string{"src/**", "**", "Makefile"}, b.candidates(t, store.CandidateQuery{Path: "src/Makefile"}))

		// By pattern: exactly that pattern.
		require.Equal(t, []string{"database/**"}, b.candidates(t, store.CandidateQuery{Pattern: "database/**"}))
		require.Empty(t, b.candidates(t, store.CandidateQuery{Pattern: "database/*"}))
		// All.
		require.Len(t, b.candidates(t, store.CandidateQuery{}), 17)
	})

	// Each candidate carries its item's whole pattern, whatever part of it the store's index holds
	// (Postgres: the text after the bucket prefix, migration 0007), in the buckets whose patterns
	// do not all begin with their prefix ("**/Makefile/") too, and in text that is not ASCII.
	t.Run("CandidatesCarryWholePatterns", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		patterns := []string{
			"Makefile", "**/Makefile", "**/Makefile/Makefile", "**/Makefile/**", "Makefile/*", "Makefile/Makefile",
			"**", "*", "Make*", "**/Make*/**",
		}
		for _, p := range patterns {
			b.record(t, p, "about "+p, t0)
		}
		got := b.candidatesContent(t, store.CandidateQuery{Path: "Makefile/Makefile"})
		want := make([]string, len(patterns))
		for i, p := range patterns {
			want[i] = "about " + p
		}
		require.ElementsMatch(t, want, got)

		for _, p := range []string{"src/émoji/*.go", "src/émoji/ü.go", "src/**/ü.go"} {
			b.record(t, p, "about "+p, t0)
		}
		require.Subset(t, b.candidatesContent(t, store.CandidateQuery{Path: "src/émoji/ü.go"}),
			[]string{"about src/émoji/*.go", "about src/émoji/ü.go", "about src/**/ü.go", "about **"})
	})

	t.Run("CandidatesRankOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		// Same confidence and time: specificity decides, then the id.
		b.record(t, "*.sql", "a", t0)
		b.record(t, "database/migrations/001_habits.sql", "b", t0)
		b.record(t, "database/migrations/*.sql", "c", t0)
		b.record(t, "database/**", "d", t0)
		b.record(t, "*.sql", "e", t0)
		path := store.CandidateQuery{Path: "database/migrations/001_habits.sql"}
		require.Equal(t, []string{
			"database/migrations/001_habits.sql", "database/migrations/*.sql", "database/**", "*.sql", "*.sql",
		}, b.candidates(t, path))

		// Higher effective confidence first: a confirmation lifts "database/**" to the top; an
		// item confirmed far more recently outranks an older one of equal confidence.
		items, err := b.store.Candidates(b.ctx, store.CandidateQuery{Pattern: "database/**", MinRank: math.MinInt64, Limit: 1})
		require.NoError(t, err)
		_, err = b.store.Confirm(b.ctx, items[0].ID, "", "", t0)
		require.NoError(t, err)
		b.record(t, "*.sql", "f", t0.Add(30*24*time.Hour))
		got := b.candidates(t, path)
		require.Equal(t, []string{"*.sql", "database/**"}, got[:2])

		// Paging by cursor, one item at a time, gives the same order.
		paged := path
		paged.Limit = 1
		require.Equal(t, got, b.candidates(t, paged))
		paged.Limit = 2
		require.Equal(t, got, b.candidates(t, paged))
	})

	t.Run("CandidatesLimitAcrossBuckets", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		// Many items in one bucket, few in others: the first page is the best across all.
		for i := range 30 {
			b.record(t, "*.sql", fmt.Sprintf("generic %d", i), t0.Add(-time.Duration(i)*24*time.Hour))
		}
		b.record(t, "database/migrations/*.sql", "fresh", t0.Add(time.Hour))
		b.record(t, "database/**", "old", t0.Add(-400*24*time.Hour))
		page, err := b.store.Candidates(b.ctx, store.CandidateQuery{
			Path: "database/migrations/001_habits.sql", MinRank: math.MinInt64, Limit: 3,
		})
		require.NoError(t, err)
		require.Len(t, page, 3)
		require.Equal(t, []string{"fresh", "generic 0", "generic 1"}, b.contents(t, page))
	})

	t.Run("CandidatesFilters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		add := func(typ store.Type, pattern, content string, tags []string, c float64, at time.Time) {
			_, _, err := b.store.Record(b.ctx, store.NewItem{
				Type: typ, Content: content, FilePattern: pattern, Tags: tags, Confidence: c,
			}, at)
			require.NoError(t, err)
		}
		add(store.TypeGotcha, "*.sql", "Migrations must be idempotent", []string{"database", "migrations"}, 0.9, t0)
		add(store.TypeGotcha, "*.sql", "Quote reserved words in column names", []string{"database"}, 0.5, t0)
		add(store.TypePattern, "database/**", "Wrap each migration in a transaction", []string{"migrations"}, 0.8, t0)
		add(store.TypeDecision, "database/**", "SQLite in dev, Postgres in production", nil, 0.9, t0.Add(-180*24*time.Hour))
		add(store.TypeGotcha, "*.ts", "The toast needs a Toaster provider", []string{"react"}, 0.9, t0)

		path := "database/migrations/001_habits.sql"
		q := func(q store.CandidateQuery) []string {
			q.Path = path
			return b.candidatesContent(t, q)
		}
		require.Equal(t, []string{
			"Migrations must be idempotent", "Wrap each migration in a transaction", "Quote reserved words in column names",
			"SQLite in dev, Postgres in production", // 0.9 decayed two half-lives: 0.225
		}, q(store.CandidateQuery{}))
		require.Equal(t, []string{"Wrap each migration in a transaction", "SQLite in dev, Postgres in production"},
			q(store.CandidateQuery{Types: []store.Type{store.TypePattern, store.TypeDecision}}))
		require.Equal(t, []string{"Migrations must be idempotent", "Wrap each migration in a transaction"},
			q(store.CandidateQuery{Tags: []string{"migrations"}}))
		require.Equal(t, []string{"Migrations must be idempotent"}, q(store.CandidateQuery{Tags: []string{"migrations", "database"}}))
		require.Empty(t, q(store.CandidateQuery{Tags: []string{"react"}}))
		// Full text: stemmed ("migration" finds "Migrations"), every word must match, tags count.
		require.Equal(t, []string{"Migrations must be idempotent", "Wrap each migration in a transaction"},
			q(store.CandidateQuery{Text: "migration"}))
		require.Equal(t, []string{"Wrap each migration in a transaction"}, q(store.CandidateQuery{Text: "transaction migrations"}))
		require.Equal(t, []string{"Migrations must be idempotent", "Quote reserved words in column names"},
			q(store.CandidateQuery{Text: "database"}))
		require.Empty(t, q(store.CandidateQuery{Text: "kubernetes"}))
		require.Empty(t, q(store.CandidateQuery{Text: "---"}))
		// Minimum rank: what confidence.MinRank gives for an effective 0.6.
		require.Equal(t, []string{"Migrations must be idempotent", "Wrap each migration in a transaction"},
			q(store.CandidateQuery{MinRank: confidence.MinRank(0.6, t0)}))
		// All items, with a text filter.
		all := b.candidatesContent(t, store.CandidateQuery{Text: "toaster"})
		require.Equal(t, []string{"The toast needs a Toaster provider"}, all)
	})

	t.Run("Answer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)

		x := b.record(t, "*.sql", "x", t0)
		y := b.record(t, "*.sql", "y", t0)
		answer := func(ids ...int64) map[int64]store.Item {
			items, err := b.store.Answer(b.ctx, byIDs(ids...))
			require.NoError(t, err)
			byID := map[int64]store.Item{}
			for _, it := range items {
				byID[it.ID] = it
			}
			require.Len(t, byID, len(items))
			return byID
		}
		got := answer(x.ID, y.ID)
		require.Len(t, got, 2)
		want := x
		want.HitCount = 1
		require.Equal(t, want, got[x.ID], "the whole item, its hit counted")
		require.Equal(t, int64(1), got[y.ID].HitCount)

		got = answer(y.ID, y.ID+100) // an id of no item is left out
		require.Len(t, got, 1)
		require.Equal(t, int64(2), got[y.ID].HitCount)
		require.Empty(t, answer())

		// Hits change neither the update time nor the rank.
		it, err := b.store.Get(b.ctx, y.ID)
		require.NoError(t, err)
		require.Equal(t, int64(2), it.HitCount)
		require.Equal(t, y.UpdatedAt, it.UpdatedAt)
		require.Equal(t, y.Rank, it.Rank)

		// Concurrent answers of overlapping items are all counted (and never deadlock).
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				ids := []int64{x.ID, y.ID}
				if i%2 == 1 {
					ids = []int64{y.ID, x.ID}
				}
				for range 10 {
					_, err := b.store.Answer(b.ctx, byIDs(ids...))
					require.NoError(t, err)
				}
			})
		}
		wg.Wait()
		it, err = b.store.Get(b.ctx, x.ID)
		require.NoError(t, err)
		require.Equal(t, int64(81), it.HitCount)
	})

	t.Run("FlushHits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		db := harness.RequireSQL(t, b.store)

		x := b.record(t, "*.sql", "x", t0)
		y := b.record(t, "*.sql", "y", t0)
		gone := b.record(t, "*.sql", "gone", t0)
		// The hits are written to knowledge_item_hits, never to the items' own (wide) rows.
		stored := func(id int64) int64 {
			var n, own int64
			require.NoError(t, db.DB().QueryRowContext(b.ctx, harness.Rebind(db.Dialect(),
				`SELECT COALESCE((SELECT hit_count FROM knowledge_item_hits WHERE item_id = ?), 0)`), id).Scan(&n))
			require.NoError(t, db.DB().QueryRowContext(b.ctx, harness.Rebind(db.Dialect(),
				`SELECT COALESCE((SELECT hit_count FROM knowledge_items WHERE id = ?), 0)`), id).Scan(&own))
			require.Zero(t, own, "hits written to the item's row")
			return n
		}
		for range 3 {
			_, err := b.store.Answer(b.ctx, byIDs(x.ID, y.ID, gone.ID))
			require.NoError(t, err)
		}
		_, err := b.store.Answer(b.ctx, byIDs(y.ID))
		require.NoError(t, err)
		// The hits of an item deleted before the flush go with it.
		require.NoError(t, b.store.Delete(b.ctx, gone.ID))

		// Once flushed, the hits are in the table, and the store counts them once.
		require.NoError(t, b.store.FlushHits(b.ctx))
		require.Equal(t, int64(3), stored(x.ID))
		require.Equal(t, int64(4), stored(y.ID))
		require.Zero(t, stored(gone.ID))
		it, err := b.store.Get(b.ctx, y.ID)
		require.NoError(t, err)
		require.Equal(t, int64(4), it.HitCount)
		require.NoError(t, b.store.FlushHits(b.ctx), "nothing to flush")
		require.Equal(t, int64(4), stored(y.ID))

		// Hits counted after a flush add to it; every method's items include them.
		items, err := b.store.Answer(b.ctx, byIDs(y.ID))
		require.NoError(t, err)
		require.Equal(t, int64(5), items[0].HitCount)
		listed, err := b.store.List(b.ctx, store.ListFilter{Limit: 10})
		require.NoError(t, err)
		require.Len(t, listed, 2)
		require.Equal(t, []int64{5, 3}, []int64{listed[0].HitCount, listed[1].HitCount})
		confirmed, err := b.store.Confirm(b.ctx, y.ID, "", "", t0)
		require.NoError(t, err)
		require.Equal(t, int64(5), confirmed.HitCount)
		refuted, err := b.store.Refute(b.ctx, y.ID, "", t0)
		require.NoError(t, err)
		require.Equal(t, int64(5), refuted.HitCount)
		twin, created, err := b.store.Record(b.ctx, store.NewItem{Type: store.TypeGotcha, FilePattern: "*.sql", Content: "y", Confidence: 0.5}, t0)
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, int64(5), twin.HitCount)

		// Hits counted in the items' own column (before migration 0005, or by a replica of the
		// previous release) add to those of knowledge_item_hits (in an answer, from the item's
		// first answer at this revision).
		harness.Exec(t, db, `UPDATE knowledge_items SET hit_count = 7 WHERE id = ?`, y.ID)
		it, err = b.store.Get(b.ctx, y.ID)
		require.NoError(t, err)
		require.Equal(t, int64(12), it.HitCount)
		require.Equal(t, int64(3), it.Revision(), "two confirmations, one refutation")
		items, err = b.store.Answer(b.ctx, []store.Candidate{{ID: y.ID, Revision: it.Revision()}})
		require.NoError(t, err)
		require.Equal(t, int64(13), items[0].HitCount)
	})
}

// byIDs returns candidates of the items with these ids, as Answer takes them, for items never
// confirmed or refuted (revision 0).
func byIDs(ids ...int64) []store.Candidate {
	cands := make([]store.Candidate, len(ids))
	for i, id := range ids {
		cands[i] = store.Candidate{ID: id}
	}
	return cands
}

// candidatesContent is candidates with the items' content instead of their patterns.
func (b *bundle) candidatesContent(t *testing.T, q store.CandidateQuery) []string {
	t.Helper()
	if q.MinRank == 0 {
		q.MinRank = math.MinInt64
	}
	q.Limit = 100
	cands, err := b.store.Candidates(b.ctx, q)
	require.NoError(t, err)
	return b.contents(t, cands)
}

// contents returns the content of each candidate's item, and checks the candidate matches it.
func (b *bundle) contents(t *testing.T, cands []store.Candidate) []string {
	t.Helper()
	var contents []string
	for _, c := range cands {
		it, err := b.store.Get(b.ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, store.Candidate{
			ID: it.ID, FilePattern: it.FilePattern, Confidence: it.Confidence, Rank: it.Rank,
			Specificity: it.Specificity, LastConfirmedAt: it.LastConfirmedAt, Revision: it.Revision(),
		}, c)
		contents = append(contents, it.Content)
	}
	return contents
}

// spaces returns i spaces: content that normalises to the same text.
func spaces(i int) string {
	s := ""
	for range i {
		s += " "
	}
	return s
}
