package globpath_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/knowledge/globpath"
)

func TestNormalizePath(t *testing.T) {
	t.Parallel()

	ok := map[string]string{
		"server/routes/habits.ts":        "server/routes/habits.ts",
		"./server//routes/./habits.ts":   "server/routes/habits.ts",
		"docs/":                          "docs",
		"a[1].ts":                        "a[1].ts", // glob characters are plain in a path
		".env":                           ".env",
		"..foo/bar..":                    "..foo/bar..",
		strings.Repeat("a/", 511) + "bc": strings.Repeat("a/", 511) + "bc",
	}
	for in, want := range ok {
		got, err := globpath.NormalizePath(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}

	bad := map[string]error{
		"":                         globpath.ErrEmpty,
		".":                        globpath.ErrEmpty,
		".//./":                    globpath.ErrEmpty,
		"/etc/passwd":              globpath.ErrAbsolute,
		"../etc/passwd":            globpath.ErrDotDot,
		"a/../../b":                globpath.ErrDotDot,
		"a/..":                     globpath.ErrDotDot,
		`src\main.go`:              globpath.ErrBackslash,
		"a\x00b":                   globpath.ErrControl,
		"a\nb":                     globpath.ErrControl,
		"\xff":                     globpath.ErrControl,
		strings.Repeat("a", 1025):  globpath.ErrTooLong,
		strings.Repeat("é", 1025):  globpath.ErrTooLong,
		strings.Repeat("./", 1000): globpath.ErrTooLong,
	}
	for in, want := range bad {
		_, err := globpath.NormalizePath(in)
		require.ErrorIs(t, err, want, "%q", in)
	}
}

func TestNormalizePattern(t *testing.T) {
	t.Parallel()

	ok := map[string]string{
		"*.sql":              "*.sql",
		"./server/routes/*":  "server/routes/*",
		"server//routes/*":   "server/routes/*",
		"docs/":              "docs/**",
		"docs/**/":           "docs/**",
		"a/**/**/b":          "a/**/b",
		"**/**":              "**",
		"src/**/*.{ts,tsx}":  "src/**/*.{ts,tsx}",
		"a]":                 "a]",
		"Makefile":           "Makefile",
		"server/routes/x.ts": "server/routes/x.ts",
	}
	for in, want := range ok {
		got, err := globpath.NormalizePattern(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}

	bad := map[string]error{
		"":                                     globpath.ErrEmpty,
		"./":                                   globpath.ErrEmpty,
		"/src/*.go":                            globpath.ErrAbsolute,
		"../*.go":                              globpath.ErrDotDot,
		`src\*.go`:                             globpath.ErrBackslash,
		"src/[a-":                              globpath.ErrBadGlob,
		"src/{a,b":                             globpath.ErrBadGlob,
		"a}":                                   globpath.ErrBadGlob,
		"a\tb":                                 globpath.ErrControl,
		"x/" + strings.Repeat("y", 1021) + "/": globpath.ErrTooLong, // grows past the limit with "**"
	}
	for in, want := range bad {
		_, err := globpath.NormalizePattern(in)
		require.ErrorIs(t, err, want, "%q", in)
	}
}

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
		require.Equal(t, tt.want, globpath.Match(tt.pattern, tt.path), "%s ~ %s", tt.pattern, tt.path)
		if tt.want {
			requireInBuckets(t, tt.pattern, tt.path)
		}
	}
}

func TestPatternBucket(t *testing.T) {
	t.Parallel()

	tests := map[string]globpath.Bucket{
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
		require.Equal(t, want, globpath.PatternBucket(pattern), pattern)
	}
}

func TestPathBuckets(t *testing.T) {
	t.Parallel()

	require.Equal(t, []globpath.Bucket{
		{"", ""}, {"", "sql"},
		{"**/database/", ""}, {"**/database/", "sql"},
		{"**/migrations/", ""}, {"**/migrations/", "sql"},
		{"**/001_habits.sql/", ""}, {"**/001_habits.sql/", "sql"},
		{"database/", ""}, {"database/", "sql"},
		{"database/migrations/", ""}, {"database/migrations/", "sql"},
		{"database/migrations/001_habits.sql", "sql"},
		{"database/migrations/001_habits.sql/", ""},
	}, globpath.PathBuckets("database/migrations/001_habits.sql"))

	require.Equal(t, []globpath.Bucket{{"", ""}, {"**/Makefile/", ""}, {"Makefile", ""}, {"Makefile/", ""}},
		globpath.PathBuckets("Makefile"))

	// Each bucket once, even when names repeat or a directory is called "**".
	require.Equal(t, []globpath.Bucket{{"", ""}, {"**/a/", ""}, {"**/**/", ""}, {"a/", ""}, {"a/a/", ""},
		{"a/a/**/", ""}, {"a/a/**/a", ""}, {"a/a/**/a/", ""}},
		globpath.PathBuckets("a/a/**/a"))
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
		got[i] = globpath.Specificity(p)
	}
	require.True(t, slices.IsSortedFunc(got, func(a, b int32) int { return int(b - a) }), "%v", got)
	require.Equal(t, int32(1_000_000_027), globpath.Specificity("database/migrations/001.sql"))
	require.Equal(t, int32(2_098_024), globpath.Specificity("database/migrations/*.sql"))
	require.Equal(t, int32(98_004), globpath.Specificity("*.sql"))
	require.Equal(t, int32(97_000), globpath.Specificity("**"))
}

// requireInBuckets checks the index is sound: a pattern matching a path is stored in a bucket the
// path looks up.
func requireInBuckets(t *testing.T, pattern, path string) {
	t.Helper()
	require.Contains(t, globpath.PathBuckets(path), globpath.PatternBucket(pattern),
		"pattern %q matches %q but its bucket is not among the path's", pattern, path)
}

// FuzzNormalizePattern: never panics; a normalised pattern is a valid glob, normalises to
// itself, and has no '..' segment, no leading '/', no empty or '.' segment.
func FuzzNormalizePattern(f *testing.F) {
	for _, s := range []string{"*.sql", "./a//b/", "a/**/**/b", "../x", "/x", `a\b`, "{a,b}/[c-d]?", "a}", "docs/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := globpath.NormalizePattern(s)
		if err != nil {
			return
		}
		requireCanonical(t, out)
		require.True(t, doublestar.ValidatePattern(out), "%q → %q is not a valid glob", s, out)
		again, err := globpath.NormalizePattern(out)
		require.NoError(t, err, "%q → %q", s, out)
		require.Equal(t, out, again, "not idempotent: %q", s)
		globpath.Specificity(out)
		globpath.PatternBucket(out)
	})
}

// FuzzNormalizePath: as FuzzNormalizePattern, for concrete paths.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"database/migrations/001_habits.sql", "./a//b/", "../x", "/x", `a\b`, ".env"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := globpath.NormalizePath(s)
		if err != nil {
			return
		}
		requireCanonical(t, out)
		again, err := globpath.NormalizePath(out)
		require.NoError(t, err, "%q → %q", s, out)
		require.Equal(t, out, again, "not idempotent: %q", s)
		// Each bucket once: a repeated bucket would answer its items twice.
		buckets := globpath.PathBuckets(out)
		seen := map[globpath.Bucket]bool{}
		for _, b := range buckets {
			require.False(t, seen[b], "bucket %v twice for %q", b, out)
			seen[b] = true
		}
	})
}

// FuzzMatch: matching never panics, and whenever a pattern matches a path the pattern's bucket
// is one the path looks up, so the indexed candidate query never misses a match.
func FuzzMatch(f *testing.F) {
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
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, rawPattern, rawPath string) {
		pattern, err := globpath.NormalizePattern(rawPattern)
		if err != nil {
			return
		}
		path, err := globpath.NormalizePath(rawPath)
		if err != nil {
			return
		}
		if globpath.Match(pattern, path) {
			requireInBuckets(t, pattern, path)
		}
		// Random pairs rarely match; a path made from the pattern by filling its wildcards does.
		filled := strings.NewReplacer("**", "d/e", "*", "s", "?", "q").Replace(pattern)
		if p, err := globpath.NormalizePath(filled); err == nil && globpath.Match(pattern, p) {
			requireInBuckets(t, pattern, p)
		}
		if globpath.IsLiteral(pattern) && strings.Contains(pattern, "/") {
			require.Equal(t, pattern == path, globpath.Match(pattern, path), "literal %q vs %q", pattern, path)
		}
	})
}

// requireCanonical checks the invariants of a normalised path or pattern.
func requireCanonical(t *testing.T, s string) {
	t.Helper()
	require.NotEmpty(t, s)
	require.False(t, strings.HasPrefix(s, "/"), "leading '/': %q", s)
	require.False(t, strings.HasSuffix(s, "/"), "trailing '/': %q", s)
	require.NotContains(t, s, `\`)
	for seg := range strings.SplitSeq(s, "/") {
		require.NotEqual(t, "..", seg, "'..' segment in %q", s)
		require.NotEqual(t, ".", seg, "'.' segment in %q", s)
		require.NotEmpty(t, seg, "empty segment in %q", s)
	}
}
