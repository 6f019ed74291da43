package repopath_test

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/repopath"
	"github.com/converge-dev/converge/platform/repopath/repopathtest"
)

func name(c repopathtest.Case) string {
	in := c.In
	if len(in) > 40 {
		in = fmt.Sprintf("%s…(%d bytes)", in[:20], len(in))
	}
	return fmt.Sprintf("%q %s", in, c.Why)
}

// TestCases runs the table through every reading.
func TestCases(t *testing.T) {
	t.Parallel()
	for _, c := range repopathtest.Cases {
		t.Run(name(c), func(t *testing.T) {
			t.Parallel()
			err := repopath.Validate(c.In)
			require.Equal(t, c.Path, err == nil, "Validate: %v", err)
			if err != nil {
				require.ErrorIs(t, err, repopath.ErrInvalid)
			}
			cleaned, cerr := repopath.Clean(c.In)
			require.Equal(t, err, cerr)
			if cerr == nil {
				require.Equal(t, c.In, cleaned, "Clean does not rewrite")
			}
			err = repopath.ValidateDir(c.In)
			require.Equal(t, c.Dir, err == nil, "ValidateDir: %v", err)
			err = repopath.ValidateGlob(c.In)
			require.Equal(t, c.Glob, err == nil, "ValidateGlob: %v", err)
			if err != nil {
				require.ErrorIs(t, err, repopath.ErrInvalid)
			}
			_, gerr := repopath.CleanGlob(c.In)
			require.Equal(t, err, gerr)
			// The table itself keeps the order of the readings.
			require.True(t, !c.Glob || c.Path, "a valid glob is a valid path")
			require.True(t, !c.Path || c.Dir, "a valid path is a valid directory")
		})
	}
}

// TestErrors pins which rule answers for a few inputs.
func TestErrors(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]error{
		"":                       repopath.ErrEmpty,
		strings.Repeat("é", 513): repopath.ErrTooLong,
		"a\xff":                  repopath.ErrInvalidUTF8,
		"a\x00":                  repopath.ErrControl,
		`a\b`:                    repopath.ErrBackslash,
		"/a":                     repopath.ErrAbsolute,
		"C:/a":                   repopath.ErrDrive,
		"a//b":                   repopath.ErrEmptySegment,
		"a/":                     repopath.ErrEmptySegment,
		"./a":                    repopath.ErrDotSegment,
		"a/../b":                 repopath.ErrDotDot,
		"x/.Git/config":          repopath.ErrGit,
		"sub/.git":               repopath.ErrGit,
	} {
		require.ErrorIs(t, repopath.Validate(in), want, "%q", in)
		require.ErrorIs(t, repopath.ValidateGlob(in), want, "%q", in)
	}
	for in, want := range map[string]error{
		"{..,a}":  repopath.ErrDotDot,
		"{.git}":  repopath.ErrGit,
		"a[":      repopath.ErrBadGlob,
		"{a,{b}}": repopath.ErrBadGlob,
	} {
		require.ErrorIs(t, repopath.ValidateGlob(in), want, "%q", in)
	}
	require.True(t, errors.Is(repopath.ErrBadGlob, repopath.ErrInvalid))
}

func TestCleanGlob(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"a/**/**/b":    "a/**/b",
		"**/**":        "**",
		"**/**/**/x":   "**/x",
		"a/**/b/**/**": "a/**/b/**",
		"a/***/**/b":   "a/***/**/b", // "***" is no "**" segment
		"*.go":         "*.go",
	} {
		got, err := repopath.CleanGlob(in)
		require.NoError(t, err)
		require.Equal(t, want, got, in)
	}
}

// TestGlobSyntaxRegexp checks that the regular expression the protos use states the glob syntax
// of the Go scanner, on the table and on every short string over the glob alphabet.
func TestGlobSyntaxRegexp(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(repopath.GlobSyntaxRegexp)
	check := func(s string) {
		if strings.ContainsRune(s, '\\') || repopath.Validate(s) != nil {
			return
		}
		want := repopath.ValidateGlob(s) == nil || !errors.Is(repopath.ValidateGlob(s), repopath.ErrBadGlob)
		require.Equal(t, want, re.MatchString(s), "%q", s)
	}
	for _, c := range repopathtest.Cases {
		check(c.In)
	}
	alphabet := []byte("a[]{},!^*")
	var gen func(prefix []byte, n int)
	gen = func(prefix []byte, n int) {
		check(string(prefix))
		if n == 0 {
			return
		}
		for _, b := range alphabet {
			gen(append(prefix, b), n-1)
		}
	}
	gen(nil, 6)
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{"*.go", "a.go", true},
		{"*.go", "a/b.go", false},
		{"**/*.go", "a/b.go", true},
		{"a/**", "a", true},
		{"a/**", "a/b/c", true},
		{"src/{a,b}/*.ts", "src/b/x.ts", true},
		{"src/{a,b}/*.ts", "src/c/x.ts", false},
		{"[abc].go", "b.go", true},
		{"a[", "a[", false}, // invalid glob matches nothing
	} {
		require.Equal(t, tc.want, repopath.Match(tc.pattern, tc.path), "%q ~ %q", tc.pattern, tc.path)
	}
}

func TestBaseAncestors(t *testing.T) {
	t.Parallel()
	require.Equal(t, "server/routes", repopath.Base("server/routes/*.ts"))
	require.Equal(t, "server/routes", repopath.Base("server/routes/a.ts"))
	require.Equal(t, "server", repopath.Base("server/**"))
	require.Empty(t, repopath.Base("**/*.go"))
	require.Empty(t, repopath.Base("*.go"))
	require.Empty(t, repopath.Base("a.go"))
	require.Equal(t, []string{"", "a", "a/b", "a/b/c.go"}, repopath.Ancestors("a/b/c.go"))
	require.Equal(t, []string{"", "a"}, repopath.Ancestors("a"))
	require.Equal(t, "src/a", repopath.LiteralPrefix("src/a*.go"))
	require.Equal(t, "src/a.go", repopath.LiteralPrefix("src/a.go"))
	require.True(t, repopath.IsLiteral("a/b"))
	require.True(t, repopath.IsGlob("a/{b,c}"))
}

// Every path a glob matches has the glob's base among its ancestors: the property the Registry's
// stores' candidate lookup relies on (FuzzGlob checks it on derived inputs too).
func TestBaseIsAnAncestorOfEveryMatch(t *testing.T) {
	t.Parallel()
	patterns := []string{"server/routes/*.ts", "server/**", "**/*.go", "a/{b,c/d}/e", "db/*/x", "a", "a/b/c.go", "x/**/y"}
	pathsToTry := []string{"server/routes/a.ts", "server", "server/x/y.go", "a.go", "a/b/e", "a/c/d/e", "db/q/x", "a", "a/b/c.go", "x/y", "x/1/2/y"}
	matched := 0
	for _, pat := range patterns {
		for _, p := range pathsToTry {
			if repopath.Match(pat, p) {
				matched++
				require.Contains(t, repopath.Ancestors(p), repopath.Base(pat), "glob %q matches %q", pat, p)
			}
		}
	}
	require.Greater(t, matched, 10)
}

func TestMoreSpecific(t *testing.T) {
	t.Parallel()
	// Most specific first; every glob matches server/routes/habits.ts.
	ranked := []string{
		"server/routes/habits.ts", // literal
		"server/routes/habits.*",  // longest literal prefix
		"server/routes/h*",        //
		"server/routes/*.ts",      // same prefix as the next, fewer wildcards
		"server/routes/**",        // '**' counts more than '*'
		"server/**",               // fewer wildcards beat more, even when more narrow
		"server/**/*.ts",          // the match down (the contract's rule: see MoreSpecific)
		"**",                      //
		"**/*.ts",                 //
	}
	for _, p := range ranked {
		require.True(t, repopath.Match(p, "server/routes/habits.ts"), p)
	}
	shuffled := slices.Clone(ranked)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, func(a, b string) int {
		if repopath.MoreSpecific(a, b) {
			return -1
		}
		if repopath.MoreSpecific(b, a) {
			return 1
		}
		return 0
	})
	require.Equal(t, ranked, shuffled)
	require.False(t, repopath.MoreSpecific("a", "a"), "a glob is not more specific than itself")
	// Ties end in byte order.
	require.True(t, repopath.MoreSpecific("a/[b]", "a/[c]"))
	require.False(t, repopath.MoreSpecific("a/[c]", "a/[b]"))
	require.True(t, repopath.MoreSpecific("{a,b}/**", "**"), "braces are no wildcard")
	require.Equal(t, repopath.Specificity{Prefix: 2, Wildcards: 1}, repopath.SpecificityOf("a/[b/]c"))
	require.Equal(t, repopath.Specificity{Prefix: 0, Wildcards: 5}, repopath.SpecificityOf("**/*"))
	require.Equal(t, repopath.Specificity{Literal: true, Prefix: 3}, repopath.SpecificityOf("a/b"))
}

// FuzzClean checks the path invariants on the table's inputs and whatever the fuzzer derives.
func FuzzClean(f *testing.F) {
	for _, c := range repopathtest.Cases {
		f.Add(c.In)
	}
	f.Fuzz(func(t *testing.T, p string) {
		cleaned, err := repopath.Clean(p)
		if err != nil {
			require.ErrorIs(t, err, repopath.ErrInvalid)
			require.Error(t, repopath.ValidateGlob(p), "a glob is a path first")
			return
		}
		again, err := repopath.Clean(cleaned)
		require.NoError(t, err)
		require.Equal(t, cleaned, again, "Clean is idempotent")
		require.Equal(t, p, cleaned, "Clean does not rewrite")
		require.True(t, utf8.ValidString(p))
		require.LessOrEqual(t, len(p), repopath.MaxBytes)
		require.Equal(t, p, path.Clean(p), "a valid path is clean for package path")
		require.True(t, filepath.IsLocal(p), "a valid path stays in its root")
		require.False(t, strings.HasPrefix(p, "/"))
		require.NotContains(t, p, `\`)
		for _, seg := range strings.Split(p, "/") {
			require.NotEqual(t, "..", seg)
			require.NotEqual(t, ".", seg)
			require.NotEqual(t, ".git", strings.ToLower(seg))
		}
		require.NoError(t, repopath.ValidateDir(p))
		require.NoError(t, repopath.ValidateDir(p+"/"))
		if repopath.IsLiteral(p) {
			require.True(t, repopath.Match(p, p), "a literal path matches itself")
		}
		for _, a := range repopath.Ancestors(p)[1:] {
			require.NoError(t, repopath.Validate(a), "ancestors of a valid path are valid")
		}
	})
}

// FuzzGlob checks the glob invariants on the table's inputs and whatever the fuzzer derives.
func FuzzGlob(f *testing.F) {
	for _, c := range repopathtest.Cases {
		f.Add(c.In, "a/b.go")
	}
	f.Fuzz(func(t *testing.T, pattern, p string) {
		cleaned, err := repopath.CleanGlob(pattern)
		if err != nil {
			require.ErrorIs(t, err, repopath.ErrInvalid)
			require.False(t, repopath.Match(pattern, p) && repopath.ValidateGlob(pattern) == nil)
			return
		}
		require.True(t, doublestar.ValidatePattern(pattern))
		require.NoError(t, repopath.Validate(pattern), "a valid glob is a valid path")
		again, err := repopath.CleanGlob(cleaned)
		require.NoError(t, err)
		require.Equal(t, cleaned, again, "CleanGlob is idempotent")
		require.NoError(t, repopath.ValidateGlob(cleaned))
		require.True(t, regexp.MustCompile(repopath.GlobSyntaxRegexp).MatchString(pattern))
		if repopath.Validate(p) != nil {
			return
		}
		m := repopath.Match(pattern, p)
		require.Equal(t, m, repopath.Match(cleaned, p), "CleanGlob keeps what a glob matches")
		if m {
			base := repopath.Base(pattern)
			require.Contains(t, repopath.Ancestors(p), base, "a match lies under the glob's base")
			require.True(t, strings.HasPrefix(p, repopath.LiteralPrefix(pattern)), "a match starts with the literal prefix")
		}
		if repopath.IsLiteral(pattern) {
			require.Equal(t, pattern == p, m, "a literal glob matches itself only")
		}
	})
}
