package repopath

import (
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Base answers the literal leading directories of a valid glob: everything before the last "/"
// that comes before the first meta character; "" when there is none. Every path the glob matches
// is Base itself or lies under it, which is what lets a store find the globs that may match a path
// by looking up the path's ancestors ([Ancestors]).
//
//	Base("server/routes/*.ts") == "server/routes"
//	Base("server/routes/a.ts") == "server/routes"
//	Base("**/*.go")            == ""
func Base(pattern string) string {
	base, _ := doublestar.SplitPattern(pattern)
	if base == "." {
		return ""
	}
	return base
}

// Ancestors answers the bases under which a glob matching the valid path p must sit: "", every
// proper ancestor directory of p, and p itself ("a/**" matches "a").
//
//	Ancestors("a/b/c.go") == ["", "a", "a/b", "a/b/c.go"]
func Ancestors(p string) []string {
	out := []string{""}
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return append(out, p)
}

// Specificity ranks how specifically a glob names the paths it matches; see [MoreSpecific].
type Specificity struct {
	// Literal is true for a glob without meta characters: it names exactly one path.
	Literal bool
	// Prefix is the length in bytes of the literal text before the first meta character
	// ([LiteralPrefix]).
	Prefix int
	// Wildcards counts the glob's wildcards, the parts that match text not written in it: each
	// '?' and character class counts one, each '*' two and each '**' three, so that "a/*" is
	// more specific than "a/**". An alternation's braces are no wildcard (its alternatives are
	// written out); wildcards inside it count.
	Wildcards int
}

// SpecificityOf answers the specificity of a valid glob.
func SpecificityOf(pattern string) Specificity {
	m := strings.IndexAny(pattern, meta)
	if m < 0 {
		return Specificity{Literal: true, Prefix: len(pattern)}
	}
	s := Specificity{Prefix: m}
	for i := m; i < len(pattern); i++ {
		switch pattern[i] {
		case '?':
			s.Wildcards++
		case '[':
			s.Wildcards++
			// Skip the class: its content is not a wildcard of its own. A valid glob has no
			// empty class, so the first ']' after '[' and a '!' or '^' closes it.
			if j := strings.IndexByte(pattern[i+1:], ']'); j >= 0 {
				i += 1 + j
			} else {
				i = len(pattern)
			}
		case '*':
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				s.Wildcards += 3
				for i+1 < len(pattern) && pattern[i+1] == '*' {
					i++
				}
			} else {
				s.Wildcards += 2
			}
		}
	}
	return s
}

// MoreSpecific reports whether glob a is more specific than glob b, both valid and both matching
// the same path. The rule, in order:
//
//  1. a literal glob (no meta characters) beats any other;
//  2. the longer literal prefix (text before the first meta character) wins;
//  3. fewer wildcards win, counting '*' as two, '**' as three, '?' and a character class as one
//     (an alternation's braces are not counted, the wildcards inside it are);
//  4. the longer glob wins;
//  5. the glob that sorts first (byte order) wins, so that the answer is deterministic.
func MoreSpecific(a, b string) bool {
	sa, sb := SpecificityOf(a), SpecificityOf(b)
	switch {
	case sa.Literal != sb.Literal:
		return sa.Literal
	case sa.Prefix != sb.Prefix:
		return sa.Prefix > sb.Prefix
	case sa.Wildcards != sb.Wildcards:
		return sa.Wildcards < sb.Wildcards
	case len(a) != len(b):
		return len(a) > len(b)
	}
	return a < b
}
