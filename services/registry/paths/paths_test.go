package paths_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/services/registry/paths"
)

func TestClean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string
		err  error
	}{
		{in: "server/routes/habits.ts", want: "server/routes/habits.ts"},
		{in: "a//b/./c", want: "a/b/c"},
		{in: "./a/", want: "a"},
		{in: "a/b/", want: "a/b"},
		{in: "a/.../b", want: "a/.../b"}, // "..." is a name, not a parent
		{in: "a/..b", want: "a/..b"},
		{in: "a/*.go", want: "a/*.go"},
		{in: "", err: paths.ErrEmpty},
		{in: ".", err: paths.ErrEmpty},
		{in: "./", err: paths.ErrEmpty},
		{in: "/", err: paths.ErrAbsolute},
		{in: "/etc/passwd", err: paths.ErrAbsolute},
		{in: "..", err: paths.ErrDotDot},
		{in: "../etc/passwd", err: paths.ErrDotDot},
		{in: "a/../../b", err: paths.ErrDotDot},
		{in: "a/..", err: paths.ErrDotDot},
		{in: "a\x00b", err: paths.ErrInvalidChar},
		{in: "a\tb", err: paths.ErrInvalidChar},
		{in: `a\b`, err: paths.ErrInvalidChar},
		{in: "a\xffb", err: paths.ErrInvalidChar},
		{in: strings.Repeat("a", paths.MaxLen+1), err: paths.ErrTooLong},
	} {
		got, err := paths.Clean(tc.in)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, "Clean(%q)", tc.in)
			continue
		}
		require.NoError(t, err, "Clean(%q)", tc.in)
		require.Equal(t, tc.want, got, "Clean(%q)", tc.in)
	}
}

func TestCleanPattern(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string
		err  error
	}{
		{in: "server/routes/**", want: "server/routes/**"},
		{in: "./db//**/*.sql", want: "db/**/*.sql"},
		{in: "{a,b}/*.go", want: "{a,b}/*.go"},
		{in: `a\*b`, want: `a\*b`},
		{in: "[abc].go", want: "[abc].go"},
		{in: "a/[", err: paths.ErrBadPattern},
		{in: "a/[]", err: paths.ErrBadPattern},
		{in: "a/{b,c", err: paths.ErrBadPattern},
		{in: "a/b}", err: paths.ErrBadPattern},
		{in: `a\`, err: paths.ErrBadPattern},
		{in: "/**", err: paths.ErrAbsolute},
		{in: "../**", err: paths.ErrDotDot},
		{in: "", err: paths.ErrEmpty},
	} {
		got, err := paths.CleanPattern(tc.in)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, "CleanPattern(%q)", tc.in)
			continue
		}
		require.NoError(t, err, "CleanPattern(%q)", tc.in)
		require.Equal(t, tc.want, got, "CleanPattern(%q)", tc.in)
	}
}

func TestBaseAndAncestors(t *testing.T) {
	t.Parallel()
	require.Equal(t, "server/routes", paths.Base("server/routes/*.ts"))
	require.Equal(t, "server/routes", paths.Base("server/routes/a.ts"))
	require.Equal(t, "server", paths.Base("server/**"))
	require.Empty(t, paths.Base("**/*.go"))
	require.Empty(t, paths.Base("*.go"))
	require.Empty(t, paths.Base("a.go"))
	require.Equal(t, "a*b", paths.Base(`a\*b/*.go`))
	require.Equal(t, []string{"", "a", "a/b", "a/b/c.go"}, paths.Ancestors("a/b/c.go"))
	require.Equal(t, []string{"", "a"}, paths.Ancestors("a"))
}

// Every path a pattern matches has the pattern's base among its ancestors: the property the
// stores' candidate lookup relies on.
func TestBaseIsAnAncestorOfEveryMatch(t *testing.T) {
	t.Parallel()
	patterns := []string{"server/routes/*.ts", "server/**", "**/*.go", "a/{b,c/d}/e", "db/*/x", `a\*b/*`, "a", "a/b/c.go", "x/**/y"}
	pathsToTry := []string{"server/routes/a.ts", "server", "server/x/y.go", "a.go", "a/b/e", "a/c/d/e", "db/q/x", "a*b/z", "a", "a/b/c.go", "x/y", "x/1/2/y"}
	for _, pat := range patterns {
		for _, p := range pathsToTry {
			if paths.Match(pat, p) {
				require.Contains(t, paths.Ancestors(p), paths.Base(pat), "pattern %q matches %q", pat, p)
			}
		}
	}
}

func TestMoreSpecific(t *testing.T) {
	t.Parallel()
	// Most specific first; every pattern matches server/routes/habits.ts.
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
		require.True(t, paths.Match(p, "server/routes/habits.ts"), p)
	}
	shuffled := slices.Clone(ranked)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, func(a, b string) int {
		if paths.MoreSpecific(a, b) {
			return -1
		}
		if paths.MoreSpecific(b, a) {
			return 1
		}
		return 0
	})
	require.Equal(t, ranked, shuffled)
	require.False(t, paths.MoreSpecific("a", "a"), "a pattern is not more specific than itself")
	// Ties end in byte order.
	require.True(t, paths.MoreSpecific("a/[b]", "a/[c]"))
	require.False(t, paths.MoreSpecific("a/[c]", "a/[b]"))
	require.True(t, paths.MoreSpecific("{a,b}/**", "**"), "braces are no wildcard")
}

// FuzzClean: Clean never panics, is idempotent, and what it accepts has no "..", "." or empty
// segment, no leading or trailing '/', and fits MaxLen. The same holds for CleanPattern, whose
// result is also a valid glob.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"a/b", "a//b/./c/", "../x", "/abs", ".", "", "a/..", "a/.../b", `a\*b`, "{a,b}/**", "a\x00b", "[", "a/[]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, clean := range []func(string) (string, error){paths.Clean, paths.CleanPattern} {
			out, err := clean(in)
			if err != nil {
				known := []error{paths.ErrEmpty, paths.ErrAbsolute, paths.ErrDotDot, paths.ErrTooLong, paths.ErrInvalidChar, paths.ErrBadPattern}
				if !slices.ContainsFunc(known, func(e error) bool { return errors.Is(err, e) }) {
					t.Fatalf("clean(%q): unexpected error %v", in, err)
				}
				continue
			}
			if out == "" || strings.HasPrefix(out, "/") || strings.HasSuffix(out, "/") || len(out) > paths.MaxLen {
				t.Fatalf("clean(%q) = %q", in, out)
			}
			for _, seg := range strings.Split(out, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("clean(%q) = %q has segment %q", in, out, seg)
				}
			}
			again, err := clean(out)
			if err != nil || again != out {
				t.Fatalf("not idempotent: clean(%q) = %q, clean(%q) = %q, %v", in, out, out, again, err)
			}
		}
		if p, err := paths.CleanPattern(in); err == nil {
			_ = paths.SpecificityOf(p)
			_ = paths.Base(p)
		}
	})
}
