// Package paths normalises the names the Registry works with: lock resources and concrete paths
// (repository-relative file paths) and ownership patterns (doublestar globs over such paths), and
// ranks patterns by how specifically they match a path.
//
// A normalised path uses "/" separators, has no empty, "." or ".." segment, no leading or
// trailing "/", and is not empty: "a//b/./c/" becomes "a/b/c". Absolute paths and ".." segments
// are refused rather than resolved, so that a name can never point outside the repository.
package paths

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// MaxLen is the longest path or pattern accepted, in bytes, before normalisation.
const MaxLen = 1024

// Errors of [Clean] and [CleanPattern]. Each is wrapped with the offending detail; test for them
// with errors.Is.
var (
	// ErrEmpty: the name is empty or normalises to nothing ("", ".", "./", "//").
	ErrEmpty = errors.New("must name a path: it is empty or normalises to nothing")
	// ErrAbsolute: the name starts with "/".
	ErrAbsolute = errors.New("must be a repository-relative path: no leading '/'")
	// ErrDotDot: the name has a ".." segment.
	ErrDotDot = errors.New("must be a repository-relative path: no '..' segment")
	// ErrTooLong: the name is longer than MaxLen bytes.
	ErrTooLong = fmt.Errorf("must be at most %d bytes", MaxLen)
	// ErrInvalidChar: the name is not UTF-8 or holds a NUL, another control character or a
	// backslash (a Windows separator; in a pattern a backslash escapes the next character and
	// is allowed).
	ErrInvalidChar = errors.New("must be UTF-8 without control characters or backslashes")
	// ErrBadPattern: the pattern is not a valid doublestar glob (an unclosed '[' or '{', an
	// empty class, a trailing '\').
	ErrBadPattern = errors.New("must be a valid doublestar glob: brackets and braces closed, classes not empty")
)

// Clean normalises a repository-relative path or resource name. It returns an error wrapping one
// of the package's errors when the name is empty, absolute, has a ".." segment, is too long or
// holds a character that has no place in a path.
//
// Clean is idempotent: for every p it accepts, Clean(Clean(p)) == Clean(p).
func Clean(p string) (string, error) {
	return clean(p, false)
}

// CleanPattern normalises an ownership pattern like [Clean] normalises a path ("a//b/./**" is
// "a/b/**") and checks that it is a valid doublestar glob. In a pattern a backslash escapes the
// character after it.
func CleanPattern(p string) (string, error) {
	c, err := clean(p, true)
	if err != nil {
		return "", err
	}
	if !doublestar.ValidatePattern(c) {
		return "", fmt.Errorf("%q: %w", p, ErrBadPattern)
	}
	return c, nil
}

func clean(p string, pattern bool) (string, error) {
	if len(p) > MaxLen {
		return "", fmt.Errorf("%d bytes: %w", len(p), ErrTooLong)
	}
	if !utf8.ValidString(p) {
		return "", ErrInvalidChar
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || (r == '\\' && !pattern) {
			return "", fmt.Errorf("%q: %w", p, ErrInvalidChar)
		}
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%q: %w", p, ErrAbsolute)
	}
	segments := strings.Split(p, "/")
	kept := segments[:0]
	for _, s := range segments {
		switch s {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%q: %w", p, ErrDotDot)
		}
		kept = append(kept, s)
	}
	if len(kept) == 0 {
		return "", fmt.Errorf("%q: %w", p, ErrEmpty)
	}
	return strings.Join(kept, "/"), nil
}

// IsLiteral reports whether pattern has no unescaped glob meta character (* ? [ {), so that it
// matches exactly one path: itself, with escapes removed.
func IsLiteral(pattern string) bool {
	return metaIndex(pattern) < 0
}

// Base answers the literal leading directories of a normalised pattern: everything before the
// last "/" that comes before the first meta character, unescaped; "" when there is none.
// Every path the pattern matches is Base itself or lies under it, which is what lets a store find
// the patterns that may match a path by looking up the path's ancestors ([Ancestors]).
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

// Ancestors answers the bases under which a pattern matching the normalised path p must sit:
// "", every proper ancestor directory of p, and p itself ("a/**" matches "a").
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

// Match reports whether the normalised pattern matches the normalised path p. An invalid
// pattern matches nothing.
func Match(pattern, p string) bool {
	ok, err := doublestar.Match(pattern, p)
	return err == nil && ok
}

// Specificity ranks how specifically a pattern names the paths it matches; see [MoreSpecific].
type Specificity struct {
	// Literal is true for a pattern without wildcards: it names exactly one path.
	Literal bool
	// Prefix is the length in bytes of the literal text before the first wildcard.
	Prefix int
	// Wildcards counts the pattern's wildcards, the parts that match text not written in the
	// pattern: each '?' and character class counts one, each '*' two and each '**' three, so
	// that "a/*" is more specific than "a/**". An alternation's braces are no wildcard (its
	// alternatives are written out); wildcards inside it count.
	Wildcards int
}

// SpecificityOf answers the specificity of a normalised pattern.
func SpecificityOf(pattern string) Specificity {
	m := metaIndex(pattern)
	if m < 0 {
		return Specificity{Literal: true, Prefix: len(pattern)}
	}
	s := Specificity{Prefix: m}
	for i := m; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++ // escaped: a literal character
		case '?':
			s.Wildcards++
		case '[':
			s.Wildcards++
			// Skip the class: its content is not a wildcard of its own.
			for i++; i < len(pattern) && pattern[i] != ']'; i++ {
				if pattern[i] == '\\' {
					i++
				}
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

// MoreSpecific reports whether pattern a is more specific than pattern b, both normalised and
// both matching the same path. The rule, in order:
//
//  1. a literal pattern (no wildcards) beats any glob;
//  2. the longer literal prefix (text before the first wildcard) wins;
//  3. fewer wildcards win, counting '*' as two, '**' as three, '?' and a character class as one
//     (an alternation's braces are not counted, the wildcards inside it are);
//  4. the longer pattern wins;
//  5. the pattern that sorts first (byte order) wins, so that the answer is deterministic.
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

// metaIndex answers the index of the first unescaped glob meta character of pattern, or -1.
func metaIndex(pattern string) int {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '*', '?', '[', '{':
			return i
		}
	}
	return -1
}
