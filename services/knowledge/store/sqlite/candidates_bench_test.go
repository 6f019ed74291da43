package sqlite_test

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/sqlite"
)

// BenchmarkCandidatesMiss is an agent's gotcha query of a task's file in a project without
// items (converge dev's local agents ask one per task): a file path, two types, a minimum rank
// that moves with the clock. With the types bound (`type IN (?, ?)`, or one JSON array through
// json_each), SQLite re-prepared the statement on every call (0.3–0.4 ms; 18–20 % of converge
// dev's CPU in bench/dag's fan-out: issue 17, branch p17local2).
//
//	cd services/knowledge && go test -run - -bench CandidatesMiss -benchmem ./store/sqlite/
func BenchmarkCandidatesMiss(b *testing.B) {
	s, err := sqlite.New(b.Context(), filepath.Join(b.TempDir(), "knowledge.db"), database.WithMigrate())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	q := store.CandidateQuery{Project: "p", MinRank: math.MinInt64, Limit: 16,
		Types: []store.Type{store.TypeGotcha, store.TypePattern}}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.Path = fmt.Sprintf("out/%04d", i%1000)
		q.MinRank = int64(1000 + i)
		i++
		if _, err := s.Candidates(b.Context(), q); err != nil {
			b.Fatal(err)
		}
	}
}
