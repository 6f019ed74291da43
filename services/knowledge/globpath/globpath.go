// Package globpath normalises the repository-relative file paths and glob patterns the Knowledge
// service stores and matches, matches a pattern against a path, and derives the keys its stores
// index patterns by so that matching a path never tests every stored pattern.
//
// # Paths and patterns
//
// Both are repository-relative, '/'-separated and normalised the same way: empty and "."
// segments are dropped ("./a//b" is "a/b"); absolute paths, ".." segments, backslashes and
// control characters are refused. A pattern that ends in '/' names everything under that
// directory ("docs/" is "docs/**"), and repeated "**" segments collapse into one. Patterns are
// doublestar globs (github.com/bmatcuk/doublestar/v4): '*' within a segment, "**" across
// segments, '?', "[...]" and "{a,b}".
//
// # Matching
//
// A pattern without '/' matches the base name of a path at any depth, as a .gitignore line does
// and as the seed's _get_pattern intends: "*.sql" matches "database/migrations/001_habits.sql".
// A pattern with '/' matches the whole path from the repository root: "server/routes/*" matches
// "server/routes/habits.ts" but not "server/routes/v1/habits.ts".
//
// # Index keys
//
// Every pattern has one [Bucket]: where it is anchored (a literal directory prefix, or a name
// that must appear at some depth) and the file extension it requires. [PathBuckets] lists the few buckets that can hold a pattern matching a
// given path, so a store looks up those buckets by index and confirms each candidate with
// [Match]. FuzzMatch checks that a pattern matching a path is always in one of the path's
// buckets.
package globpath

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// MaxLen is the longest path or pattern accepted, in characters, before and after normalisation.
const MaxLen = 1024

// meta are the characters that make a pattern a glob rather than a literal path. A lone ']' or
// '}' is literal to doublestar; an unbalanced '}' is refused by [NormalizePattern].
const meta = "*?[{"

// Errors say why a path or pattern was refused; the messages are written for the operator.
var (
	ErrEmpty     = errors.New("must name a file: empty after dropping '.' and empty segments")
	ErrTooLong   = errors.New("must be at most 1024 characters")
	ErrAbsolute  = errors.New("must be repository-relative: no leading '/'")
	ErrDotDot    = errors.New("must stay inside the repository: no '..' segment")
	ErrBackslash = errors.New("must use '/' between directories: no backslash")
	ErrControl   = errors.New("must be printable UTF-8: no control characters")
	ErrBadGlob   = errors.New("must be a valid doublestar glob: unbalanced '[' or '{', or an empty character class")
)

// NormalizePath returns the canonical form of a concrete repository-relative file path, or an
// error saying why it cannot be one. It is idempotent: NormalizePath(NormalizePath(p)) is
// NormalizePath(p).
func NormalizePath(p string) (string, error) {
	segs, _, err := segments(p)
	if err != nil {
		return "", err
	}
	out := strings.Join(segs, "/")
	if utf8.RuneCountInString(out) > MaxLen {
		return "", ErrTooLong
	}
	return out, nil
}

// NormalizePattern returns the canonical form of a glob pattern, or an error saying why it
// cannot be one (including an invalid glob). It is idempotent.
func NormalizePattern(p string) (string, error) {
	segs, trailingSlash, err := segments(p)
	if err != nil {
		return "", err
	}
	if trailingSlash {
		segs = append(segs, "**") // "docs/" is everything under docs
	}
	// "a/**/**/b" is "a/**/b".
	collapsed := segs[:0]
	for _, s := range segs {
		if s == "**" && len(collapsed) > 0 && collapsed[len(collapsed)-1] == "**" {
			continue
		}
		collapsed = append(collapsed, s)
	}
	out := strings.Join(collapsed, "/")
	if utf8.RuneCountInString(out) > MaxLen {
		return "", ErrTooLong
	}
	if !doublestar.ValidatePattern(out) {
		return "", ErrBadGlob
	}
	return out, nil
}

// segments splits p into its non-empty, non-"." segments after the checks shared by paths and
// patterns, and reports whether p ended in '/'.
func segments(p string) (segs []string, trailingSlash bool, err error) {
	switch {
	case p == "":
		return nil, false, ErrEmpty
	case utf8.RuneCountInString(p) > MaxLen:
		return nil, false, ErrTooLong
	case !utf8.ValidString(p):
		return nil, false, ErrControl
	case strings.HasPrefix(p, "/"):
		return nil, false, ErrAbsolute
	case strings.ContainsRune(p, '\\'):
		return nil, false, ErrBackslash
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return nil, false, ErrControl
		}
	}
	for s := range strings.SplitSeq(p, "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return nil, false, ErrDotDot
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return nil, false, ErrEmpty
	}
	return segs, strings.HasSuffix(p, "/"), nil
}

// Match reports whether the normalised pattern matches the normalised path: a pattern without
// '/' against the path's base name, any other against the whole path.
func Match(pattern, path string) bool {
	name := path
	if !strings.Contains(pattern, "/") {
		name = path[strings.LastIndexByte(path, '/')+1:]
	}
	ok, err := doublestar.Match(pattern, name)
	return err == nil && ok
}

// IsLiteral reports whether the pattern has no wildcard, i.e. names exactly one path (or, without
// '/', one base name at any depth).
func IsLiteral(pattern string) bool { return !strings.ContainsAny(pattern, meta) }

// Bucket is the index key of a pattern: stores keep patterns by bucket and a path looks up the
// buckets of [PathBuckets].
type Bucket struct {
	// Prefix is where the pattern is anchored:
	//   - the literal directory it is under, with its trailing '/' ("server/routes/" for
	//     "server/routes/*"), or the whole pattern for a literal path;
	//   - "**/<name>/" for a pattern that needs a directory or file called <name> at any depth
	//     ("**/migrations/" for "**/migrations/*.sql", "**/Makefile/" for "Makefile");
	//   - "" for any other pattern that may match at any depth ("*.sql", "**/*_test.go").
	Prefix string
	// Extension is the file extension every match has, without the dot ("sql" for "*.sql",
	// "ts" for "src/**/*.test.ts"), or "" when the pattern does not fix one.
	Extension string
}

// PatternBucket returns the bucket of a normalised pattern.
func PatternBucket(pattern string) Bucket {
	return Bucket{Prefix: literalPrefix(pattern), Extension: extension(pattern)}
}

// literalPrefix is the Prefix of a pattern's bucket.
func literalPrefix(pattern string) string {
	if !strings.Contains(pattern, "/") {
		// Matches a base name at any depth: a literal one is a name to look for.
		if IsLiteral(pattern) {
			return "**/" + pattern + "/"
		}
		return ""
	}
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		// "**/name/...": some segment of every match is name.
		name, _, _ := strings.Cut(rest, "/")
		if IsLiteral(name) {
			return "**/" + name + "/"
		}
		return ""
	}
	if IsLiteral(pattern) {
		return pattern
	}
	lit := pattern[:strings.IndexAny(pattern, meta)]
	return lit[:strings.LastIndexByte(lit, '/')+1]
}

// extension is the text after the last '.' of the last segment of a path or pattern, when it is
// non-empty and literal; otherwise "". For a pattern, every path it matches has this extension:
// its last segment ends in the literal ".ext", and ext has no '.'.
func extension(s string) string {
	base := s[strings.LastIndexByte(s, '/')+1:]
	dot := strings.LastIndexByte(base, '.')
	if dot < 0 {
		return ""
	}
	ext := base[dot+1:]
	if strings.ContainsAny(ext, meta+"]}") {
		return ""
	}
	return ext
}

// PathBuckets returns every bucket that can hold a pattern matching the normalised path, each
// once: with the path's extension or none, the prefixes "", each of its ancestor directories,
// "**/<segment>/" for each of its segments, the path itself (a literal pattern) and the path as
// a directory ("src/**" matches "src").
func PathBuckets(path string) []Bucket {
	exts := []string{""}
	if ext := extension(path); ext != "" {
		exts = append(exts, ext)
	}
	prefixes := []string{""}
	for seg := range strings.SplitSeq(path, "/") {
		prefixes = append(prefixes, "**/"+seg+"/")
	}
	for i := 0; ; {
		next := strings.IndexByte(path[i:], '/')
		if next < 0 {
			break
		}
		i += next + 1
		prefixes = append(prefixes, path[:i])
	}
	seen := make(map[Bucket]bool, 2*len(prefixes)+2)
	buckets := make([]Bucket, 0, 2*len(prefixes)+2)
	add := func(b Bucket) {
		if !seen[b] {
			seen[b] = true
			buckets = append(buckets, b)
		}
	}
	for _, prefix := range prefixes {
		for _, ext := range exts {
			add(Bucket{Prefix: prefix, Extension: ext})
		}
	}
	add(Bucket{Prefix: path, Extension: extension(path)})
	add(Bucket{Prefix: path + "/", Extension: ""})
	return buckets
}

// Specificity ranks how narrowly a normalised pattern selects files, higher first: a literal path
// above every glob; among globs, a longer literal directory prefix first, then fewer wildcards,
// then more literal characters. As a number:
//
//	literal path:  1_000_000_000 + length
//	glob:          prefix length × 100_000 + (99 − wildcards) × 1_000 + literal characters
//
// where a pattern without '/' has prefix length 0 (it floats to any depth), "**" counts as two
// wildcards and '*', '?', "[...]" and "{...}" as one each. So "database/migrations/001.sql"
// (1_000_000_027) > "database/migrations/*.sql" (2_098_024) > "Makefile" (99_008) >
// "*.sql" (98_004) > "**" (97_000).
func Specificity(pattern string) int32 {
	anchored := strings.Contains(pattern, "/")
	if anchored && IsLiteral(pattern) {
		return 1_000_000_000 + int32(min(len(pattern), MaxLen*4))
	}
	prefix := 0
	if anchored {
		prefix = strings.IndexAny(pattern, meta)
	}
	wildcards, literals := 0, 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '*':
			wildcards++
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				wildcards++
				i++
			}
		case '?':
			wildcards++
		case '[':
			wildcards++
			i = closing(pattern, i, '[', ']')
		case '{':
			wildcards++
			i = closing(pattern, i, '{', '}')
		default:
			literals++
		}
	}
	return int32(min(prefix, MaxLen*4)*100_000 + (99-min(wildcards, 99))*1_000 + min(literals, 999))
}

// closing returns the index of the bracket closing the one opened at i (nesting counted), or the
// last index if there is none.
func closing(s string, i int, open, close byte) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(s) - 1
}
