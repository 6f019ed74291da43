package plan

import (
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// overlaps reports whether two impacts, at least one of them a glob, can name a common file. It
// errs on the side of a conflict: "maybe" is "yes".
//
//   - glob and file: the file matches the glob (doublestar).
//   - glob and directory: some path at or under the directory can match the glob, compared
//     segment by segment ("**" matches any number of segments).
//   - glob and glob: equal patterns overlap; otherwise segment by segment, where two segments
//     with wildcards overlap unless their literal prefixes or suffixes disagree ("*.go" and
//     "*.ts" do not overlap).
//
// Patterns whose brace alternatives hold a "/" are not compared by segments: they overlap
// whatever shares a literal prefix with them.
func overlaps(a, b *impact) bool {
	if a.kind != commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB {
		a, b = b, a
	}
	switch b.kind {
	case commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB:
		return globsOverlap(a.path, b.path)
	case commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY:
		return globUnder(a.path, strings.TrimSuffix(b.path, "/"))
	default:
		// A glob and a file of Prepare's: the literal prefix's first bytes first (in the impacts,
		// no memory to read), then the rest of it.
		if n := min(a.lit, 8); n > 0 && (a.head^b.head)>>(64-8*n) != 0 {
			return false
		}
		if !strings.HasPrefix(b.path, a.path[:a.lit]) {
			return false // the file is not under the glob's literal prefix: no match, no matcher
		}
		return doublestar.MatchUnvalidated(a.path, b.path)
	}
}

// segments splits a pattern into its "/" segments; ok is false when a brace alternative holds a
// "/" (then segments do not line up with path segments).
func segments(pattern string) (segs []string, ok bool) {
	depth := 0
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth = max(depth-1, 0)
		case '/':
			if depth > 0 {
				return nil, false
			}
		}
	}
	return strings.Split(pattern, "/"), true
}

// staticPrefix is the part of a pattern before its first metacharacter.
func staticPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, "*?[{\\"); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// prefixCompatible reports whether one string is a prefix of the other.
func prefixCompatible(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }

// globUnder reports whether some path at or under dir can match pattern.
func globUnder(pattern, dir string) bool {
	pg, ok := segments(pattern)
	if !ok {
		return prefixCompatible(staticPrefix(pattern), dir+"/") || staticPrefix(pattern) == dir
	}
	pd := strings.Split(dir, "/")
	// reach[i][j]: pattern segments from i can match a path whose segments from j start with
	// pd[j:]. Computed backwards.
	reach := make([][]bool, len(pg)+1)
	for i := range reach {
		reach[i] = make([]bool, len(pd)+1)
		reach[i][len(pd)] = true // the directory itself or anything below it
	}
	for i := len(pg) - 1; i >= 0; i-- {
		for j := len(pd) - 1; j >= 0; j-- {
			if pg[i] == "**" {
				reach[i][j] = reach[i+1][j] || reach[i][j+1]
			} else {
				reach[i][j] = segMatch(pg[i], pd[j]) && reach[i+1][j+1]
			}
		}
	}
	return reach[0][0]
}

// globsOverlap reports whether two patterns can match a common path.
func globsOverlap(a, b string) bool {
	if a == b {
		return true
	}
	if !prefixCompatible(staticPrefix(a), staticPrefix(b)) {
		return false // "src/a/**" and "src/b/**": the literal prefixes already part (no allocation)
	}
	sa, okA := segments(a)
	sb, okB := segments(b)
	if !okA || !okB {
		return prefixCompatible(staticPrefix(a), staticPrefix(b))
	}
	// ov[i][j]: sa[i:] and sb[j:] can match a common path. Computed backwards.
	ov := make([][]bool, len(sa)+1)
	for i := range ov {
		ov[i] = make([]bool, len(sb)+1)
	}
	ov[len(sa)][len(sb)] = true
	for i := len(sa); i >= 0; i-- {
		for j := len(sb); j >= 0; j-- {
			if i == len(sa) && j == len(sb) {
				continue
			}
			v := false
			if i < len(sa) && sa[i] == "**" {
				v = ov[i+1][j] || (j < len(sb) && ov[i][j+1])
			}
			if !v && j < len(sb) && sb[j] == "**" {
				v = ov[i][j+1] || (i < len(sa) && ov[i+1][j])
			}
			if !v && i < len(sa) && j < len(sb) && sa[i] != "**" && sb[j] != "**" {
				v = segsOverlap(sa[i], sb[j]) && ov[i+1][j+1]
			}
			ov[i][j] = v
		}
	}
	return ov[0][0]
}

// segMatch reports whether a pattern segment matches a literal segment.
func segMatch(pattern, literal string) bool {
	return doublestar.MatchUnvalidated(pattern, literal)
}

// segsOverlap reports whether two segments can match a common name.
func segsOverlap(a, b string) bool {
	am, bm := strings.ContainsAny(a, "*?[{\\"), strings.ContainsAny(b, "*?[{\\")
	switch {
	case !am && !bm:
		return a == b
	case am && !bm:
		return segMatch(a, b)
	case !am && bm:
		return segMatch(b, a)
	case strings.ContainsAny(a, "[{\\") || strings.ContainsAny(b, "[{\\"):
		return true // classes and alternatives: assume they can
	}
	// Only * and ?: the literal prefixes must agree, and so must the literal suffixes.
	pa, pb := staticPrefix(a), staticPrefix(b)
	xa, xb := a[strings.LastIndexAny(a, "*?")+1:], b[strings.LastIndexAny(b, "*?")+1:]
	return prefixCompatible(pa, pb) && (strings.HasSuffix(xa, xb) || strings.HasSuffix(xb, xa))
}
