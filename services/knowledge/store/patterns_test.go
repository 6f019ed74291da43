package store_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/platform/repopath/repopathtest"
	"github.com/converge-dev/converge/services/knowledge/store"
)

func TestMatch(t *testing.T) {
	t.Parallel()

	tests := []struct {
		pattern, path string
		want          bool
	}{
		// The examples.
		{"*.sql", "database/migrations/001_habits.sql", true},
		{"server/routes/*", "server/routes/habits.ts", true},
		// No '/': the base name at any depth.
		{"*.sql", "001_habits.sql", true},
		{"*.sql", "database/migrations/001_habits.sqlite", false},
		{"Makefile", "tools/Makefile", true},
		{"*_test.go", "pkg/a/b_test.go", true},
		// With '/': the whole path from the root.
		{"server/routes/*", "server/routes/v1/habits.ts", false},
		{"server/routes/*", "api/server/routes/habits.ts", false},
		{"server/**", "server/routes/v1/habits.ts", true},
		{"server/**", "server", true},
		{"src/**/*.{ts,tsx}", "src/ui/App.tsx", true},
		{"src/**/*.{ts,tsx}", "src/ui/App.css", false},
		{"**/migrations/*.sql", "db/migrations/001.sql", true},
		{"server/routes/habits.ts", "server/routes/habits.ts", true},
		{"server/routes/habits.ts", "server/routes/users.ts", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, store.MatchPattern(tt.pattern, tt.path), "%s ~ %s", tt.pattern, tt.path)
		if tt.want {
			requireInBuckets(t, tt.pattern, tt.path)
		}
	}
}

func TestPatternBucket(t *testing.T) {
	t.Parallel()

	tests := map[string]store.Bucket{
		"*.sql":                     {Prefix: "", Extension: "sql"},
		"server/routes/*":           {Prefix: "server/routes/", Extension: ""},
		"server/routes/habits.ts":   {Prefix: "server/routes/habits.ts", Extension: "ts"},
		"server/rou*/x.go":          {Prefix: "server/", Extension: "go"},
		"src/**/*.test.ts":          {Prefix: "src/", Extension: "ts"},
		"src/*.{ts,tsx}":            {Prefix: "src/", Extension: ""},
		"src/*.*":                   {Prefix: "src/", Extension: ""},
		"**/migrations/*.sql":       {Prefix: "**/migrations/", Extension: "sql"},
		"**/events/**":              {Prefix: "**/events/", Extension: ""},
		"**/*_test.go":              {Prefix: "", Extension: "go"},
		"**/v?/*.go":                {Prefix: "", Extension: "go"},
		"Makefile":                  {Prefix: "**/Makefile/", Extension: ""},
		"**/Makefile":               {Prefix: "**/Makefile/", Extension: ""},
		"package.json":              {Prefix: "**/package.json/", Extension: "json"},
		"*_test.go":                 {Prefix: "", Extension: "go"},
		"{a/b.go,c.ts}":             {Prefix: "", Extension: ""},
		"docs/**":                   {Prefix: "docs/", Extension: ""},
		"database/migrations/*.sql": {Prefix: "database/migrations/", Extension: "sql"},
	}
	for pattern, want := range tests {
		require.Equal(t, want, store.PatternBucket(pattern), pattern)
		requireJoins(t, pattern)
	}
}

// TestPatternRest: what the match index holds of a pattern (migration 0007) gives the pattern
// back, in the buckets whose patterns do not all begin with their prefix too.
func TestPatternRest(t *testing.T) {
	t.Parallel()

	tests := map[string]string{
		"server/routes/habits.ts": "",
		"server/routes/*":         "*",
		"database/**/*.sql":       "**/*.sql",
		"server/rou*/x.go":        "rou*/x.go",
		"*/x.go":                  "*/x.go",
		"*.sql":                   "*.sql",
		"Makefile":                "Makefile",
		"**/Makefile":             "**/Makefile",
		"**/Makefile/Makefile":    "**/Makefile/Makefile",
		"**/Makefile/**/Makefile": "**/Makefile/**/Makefile",
		"**/migrations/*.sql":     "**/migrations/*.sql",
		"{a/b.go,c.ts}":           "{a/b.go,c.ts}",
	}
	for pattern, rest := range tests {
		require.Equal(t, rest, store.PatternRest(pattern), pattern)
		requireJoins(t, pattern)
	}
	_, err := store.JoinPattern("src/", nil)
	require.Error(t, err, "a prefix that does not begin its pattern is refused, not joined")
}

// requireJoins checks that a pattern's bucket prefix and rest join back into the pattern.
func requireJoins(t *testing.T, pattern string) {
	t.Helper()
	rest := store.PatternRest(pattern)
	got, err := store.JoinPattern(store.PatternBucket(pattern).Prefix, &rest)
	require.NoError(t, err)
	require.Equal(t, pattern, got, "rest %q", rest)
}

func TestPathBuckets(t *testing.T) {
	t.Parallel()

	require.Equal(t, []store.Bucket{
		{"", ""}, {"", "sql"},
		{"**/database/", ""}, {"**/database/", "sql"},
		{"**/migrations/", ""}, {"**/migrations/", "sql"},
		{"**/001_habits.sql/", ""}, {"**/001_habits.sql/", "sql"},
		{"database/", ""}, {"database/", "sql"},
		{"database/migrations/", ""}, {"database/migrations/", "sql"},
		{"database/migrations/001_habits.sql", "sql"},
		{"database/migrations/001_habits.sql/", ""},
	}, store.PathBuckets("database/migrations/001_habits.sql"))

	require.Equal(t, []store.Bucket{{"", ""}, {"**/Makefile/", ""}, {"Makefile", ""}, {"Makefile/", ""}},
		store.PathBuckets("Makefile"))

	// Each bucket once, even when names repeat or a directory is called "**".
	require.Equal(t, []store.Bucket{{"", ""}, {"**/a/", ""}, {"**/**/", ""}, {"a/", ""}, {"a/a/", ""},
		{"a/a/**/", ""}, {"a/a/**/a", ""}, {"a/a/**/a/", ""}},
		store.PathBuckets("a/a/**/a"))
}

func TestSpecificity(t *testing.T) {
	t.Parallel()

	// Most specific first.
	ordered := []string{
		"database/migrations/001.sql",
		"database/migrations/*.sql",
		"database/migrations/*",
		"database/**/*.sql",
		"db/*.sql",
		"Makefile",
		"*_test.go",
		"*.sql",
		"*.{ts,tsx}",
		"**",
	}
	got := make([]int32, len(ordered))
	for i, p := range ordered {
		got[i] = store.PatternSpecificity(p)
	}
	require.True(t, slices.IsSortedFunc(got, func(a, b int32) int { return int(b - a) }), "%v", got)
	require.Equal(t, int32(1_000_000_027), store.PatternSpecificity("database/migrations/001.sql"))
	require.Equal(t, int32(2_098_024), store.PatternSpecificity("database/migrations/*.sql"))
	require.Equal(t, int32(98_004), store.PatternSpecificity("*.sql"))
	require.Equal(t, int32(97_000), store.PatternSpecificity("**"))
}

// requireInBuckets checks the index is sound: a pattern matching a path is stored in a bucket the
// path looks up.
func requireInBuckets(t *testing.T, pattern, path string) {
	t.Helper()
	require.Contains(t, store.PathBuckets(path), store.PatternBucket(pattern),
		"pattern %q matches %q but its bucket is not among the path's", pattern, path)
}

// FuzzMatchPattern: matching never panics, and whenever a pattern matches a path the pattern's bucket
// is one the path looks up, so the indexed candidate query never misses a match.
func FuzzMatchPattern(f *testing.F) {
	seeds := [][2]string{
		{"*.sql", "database/migrations/001_habits.sql"},
		{"server/routes/*", "server/routes/habits.ts"},
		{"server/**", "server"},
		{"a/**/b", "a/b"},
		{"{a/b.go,c.ts}", "a/b.go"},
		{"x[/]y.go", "x/y.go"},
		{"*.tar.gz", "dist/a.tar.gz"},
		{"Makefile", "Makefile"},
		{"src/*.{ts,tsx}", "src/a.tsx"},
		{".env", "app/.env"},
		{"**/migrations/*.sql", "db/migrations/001.sql"},
		{"**/events/**", "a/events"},
		{"**/Makefile", "Makefile"},
		{"**/x", "**/x"},
		{"**/x", "a/x"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, rawPattern, rawPath string) {
		pattern, err := repopath.CleanGlob(rawPattern)
		if err != nil {
			return
		}
		path, err := repopath.Clean(rawPath)
		if err != nil {
			return
		}
		if store.MatchPattern(pattern, path) {
			requireInBuckets(t, pattern, path)
		}
		requireJoins(t, pattern)
		// Random pairs rarely match; a path made from the pattern by filling its wildcards does.
		filled := strings.NewReplacer("**", "d/e", "*", "s", "?", "q").Replace(pattern)
		if p, err := repopath.Clean(filled); err == nil && store.MatchPattern(pattern, p) {
			requireInBuckets(t, pattern, p)
		}
		if repopath.IsLiteral(pattern) && strings.Contains(pattern, "/") {
			require.Equal(t, pattern == path, store.MatchPattern(pattern, path), "literal %q vs %q", pattern, path)
		}
	})
}

// TestPathBucketsOnTheTable: for every valid path of repopath's table, each bucket once (a
// repeated bucket would answer its items twice) and a literal pattern finds itself.
func TestPathBucketsOnTheTable(t *testing.T) {
	t.Parallel()
	for _, c := range repopathtest.Cases {
		if !c.Path {
			continue
		}
		buckets := store.PathBuckets(c.In)
		seen := map[store.Bucket]bool{}
		for _, b := range buckets {
			require.False(t, seen[b], "bucket %v twice for %q", b, c.In)
			seen[b] = true
		}
		if c.Glob {
			store.PatternSpecificity(c.In)
			if store.MatchPattern(c.In, c.In) {
				requireInBuckets(t, c.In, c.In)
			}
		}
	}
}
