package store

import (
	"fmt"
	"strings"

	"github.com/converge-dev/converge/platform/repopath"
)

// The Knowledge's reading of a pattern, on top of platform/repopath (which checks paths and
// patterns and matches globs for every service). Two rules are the Knowledge's own:
//
//   - A pattern without '/' matches the base name of a path at any depth, as a .gitignore line
//     does and as the seed's _get_pattern intends: "*.sql" matches
//     "database/migrations/001_habits.sql". A pattern with '/' matches the whole path from the
//     repository root: "server/routes/*" matches "server/routes/habits.ts" but not
//     "server/routes/v1/habits.ts".
//   - Items are ranked by [PatternSpecificity], a number kept in the pattern_specificity column
//     and answered to clients, so its formula is the stores' and the API's, not repopath's
//     (repopath.MoreSpecific ranks the Registry's ownership globs, which match whole paths only).
//
// # Index keys
//
// Every pattern has one [Bucket]: where it is anchored (a literal directory prefix, or a name
// that must appear at some depth) and the file extension it requires. [PathBuckets] lists the few
// buckets that can hold a pattern matching a given path, so a store looks up those buckets by
// index and confirms each candidate with [MatchPattern]. FuzzMatchPattern checks that a pattern
// matching a path is always in one of the path's buckets.

// MatchPattern reports whether the valid pattern matches the valid path: a pattern without '/'
// against the path's base name, any other against the whole path.
func MatchPattern(pattern, path string) bool {
	name := path
	if !strings.Contains(pattern, "/") {
		name = path[strings.LastIndexByte(path, '/')+1:]
	}
	return repopath.Match(pattern, name)
}

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

// PatternBucket returns the bucket of a valid pattern.
func PatternBucket(pattern string) Bucket {
	return Bucket{Prefix: bucketPrefix(pattern), Extension: extension(pattern)}
}

// PatternRest is what the Postgres match index holds of a valid pattern instead of the whole of
// it (the column pattern_rest of migration 0007 computes the same in SQL): the text after its
// bucket's Prefix when that Prefix is a directory or the literal path the pattern begins with,
// which is most of the pattern; the whole pattern in a bucket "**/<name>/" (whose patterns do not
// all begin with it: "Makefile", "**/Makefile") or "". [JoinPattern] undoes it.
func PatternRest(pattern string) string {
	prefix := bucketPrefix(pattern)
	if strings.HasPrefix(prefix, "**/") {
		return pattern
	}
	return strings.TrimPrefix(pattern, prefix)
}

// JoinPattern returns the pattern of bucket prefix prefix whose [PatternRest] is rest; rest is
// nil where the column found the prefix not to begin the pattern, which a pattern stored by this
// package never has.
func JoinPattern(prefix string, rest *string) (string, error) {
	switch {
	case rest == nil:
		return "", fmt.Errorf("knowledge store: a pattern of bucket %q does not begin with it", prefix)
	case strings.HasPrefix(prefix, "**/"):
		return *rest, nil
	default:
		return prefix + *rest, nil
	}
}

// bucketPrefix is the Prefix of a pattern's bucket.
func bucketPrefix(pattern string) string {
	if !strings.Contains(pattern, "/") {
		// Matches a base name at any depth: a literal one is a name to look for.
		if repopath.IsLiteral(pattern) {
			return "**/" + pattern + "/"
		}
		return ""
	}
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		// "**/name/...": some segment of every match is name.
		name, _, _ := strings.Cut(rest, "/")
		if repopath.IsLiteral(name) {
			return "**/" + name + "/"
		}
		return ""
	}
	lit := repopath.LiteralPrefix(pattern)
	if lit == pattern {
		return pattern
	}
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
	if repopath.IsGlob(ext) || strings.ContainsAny(ext, "]}") {
		return ""
	}
	return ext
}

// PathBuckets returns every bucket that can hold a pattern matching the valid path, each once:
// with the path's extension or none, the prefixes "", each of its ancestor directories,
// "**/<segment>/" for each of its segments, the path itself (a literal pattern) and the path as a
// directory ("src/**" matches "src").
func PathBuckets(path string) []Bucket {
	exts := []string{""}
	if ext := extension(path); ext != "" {
		exts = append(exts, ext)
	}
	prefixes := []string{""}
	for seg := range strings.SplitSeq(path, "/") {
		prefixes = append(prefixes, "**/"+seg+"/")
	}
	for _, dir := range repopath.Ancestors(path)[1:] {
		if dir != path {
			prefixes = append(prefixes, dir+"/")
		}
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

// PatternSpecificity ranks how narrowly a valid pattern selects files, higher first: a literal
// path above every glob; among globs, a longer literal prefix first, then fewer wildcards, then
// more literal characters. As a number:
//
//	literal path:  1_000_000_000 + length
//	glob:          prefix length × 100_000 + (99 − wildcards) × 1_000 + literal characters
//
// where a pattern without '/' has prefix length 0 (it floats to any depth), "**" counts as two
// wildcards and '*', '?', "[...]" and "{...}" as one each. So "database/migrations/001.sql"
// (1_000_000_027) > "database/migrations/*.sql" (2_098_024) > "Makefile" (99_008) >
// "*.sql" (98_004) > "**" (97_000).
func PatternSpecificity(pattern string) int32 {
	anchored := strings.Contains(pattern, "/")
	if anchored && repopath.IsLiteral(pattern) {
		return 1_000_000_000 + int32(min(len(pattern), repopath.MaxBytes))
	}
	prefix := 0
	if anchored {
		prefix = len(repopath.LiteralPrefix(pattern))
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
			i = closing(pattern, i, ']')
		case '{':
			wildcards++
			i = closing(pattern, i, '}')
		default:
			literals++
		}
	}
	return int32(min(prefix, repopath.MaxBytes)*100_000 + (99-min(wildcards, 99))*1_000 + min(literals, 999))
}

// closing returns the index of the first c after i (valid patterns nest neither classes nor
// alternatives), or the last index if there is none.
func closing(s string, i int, c byte) int {
	if j := strings.IndexByte(s[i+1:], c); j >= 0 {
		return i + 1 + j
	}
	return len(s) - 1
}
