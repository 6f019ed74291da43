// Package repopath is the one place converge checks repository-relative paths and parses and
// matches the doublestar globs over them. Every service uses it: the Registry for lock resources
// and ownership patterns, the Knowledge service for item patterns and queried paths, the Scheduler
// for task files and impacts, the agent before it writes into a worktree.
//
// # Paths
//
// A valid path is written one way only and cannot leave the repository or reach git's own files:
//
//   - not empty, at most [MaxBytes] bytes, valid UTF-8;
//   - no control character (Unicode Cc: U+0000–U+001F, U+007F–U+009F) and no '\';
//   - '/' separators; no leading '/' and no drive letter ("C:");
//   - no empty segment ("a//b", "a/"), no "." and no ".." segment;
//   - no segment ".git", in any letter case (".GIT" is the same directory on a case-insensitive
//     file system), at any depth.
//
// Paths are refused, never rewritten: "./a" and "a//b" are errors, not "a" and "a/b", so that a
// file has one name in every service and every store. [Clean] answers the path itself when it is
// valid.
//
// # Globs
//
// A glob is a doublestar pattern (github.com/bmatcuk/doublestar/v4) over valid paths: '*' within
// a segment, "**" across segments, '?', "[...]" classes and "{a,b}" alternatives. It follows the
// path rules, with '/' segments, and besides:
//
//   - the tokens between '/', '{', ',' and '}' are never ".", ".." or ".git";
//   - it is a valid doublestar pattern: classes closed and not empty, braces balanced; and
//     alternatives are not nested ("{a,{b,c}}" is written "{a,b,c}"), so that the rule is a
//     regular language the protovalidate rules of the protos can state too;
//   - '\' is refused here too, so a glob has no escapes: a literal path is a glob that matches
//     itself unless it holds one of * ? [ {.
//
// [CleanGlob] answers the canonical form of a valid glob: repeated "**" segments are one.
//
// # Lengths
//
// Lengths are counted in bytes, never in characters: a path of at most [MaxBytes] bytes has at
// most [MaxBytes] characters, so the byte limit is the stricter of the two (the copies this
// package replaced disagreed). The protos' path fields are to state the same rules, the limit with
// max_bytes: TestProtoRules feeds them the table of package repopathtest.
package repopath

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
)

// MaxBytes is the longest path or glob accepted, in bytes (UTF-8), not characters.
const MaxBytes = 1024

// ErrInvalid is what every error of this package is: test with errors.Is(err, ErrInvalid).
var ErrInvalid = errors.New("invalid repository path")

// rule is one refused property; its message completes "<field> ..." for the operator.
type rule string

func (r rule) Error() string        { return string(r) }
func (r rule) Is(target error) bool { return target == ErrInvalid }

// The rules a path or glob can break. The first broken one, in this order, is answered.
var (
	ErrEmpty        error = rule("must not be empty")
	ErrTooLong      error = rule("must be at most 1024 bytes")
	ErrInvalidUTF8  error = rule("must be valid UTF-8")
	ErrControl      error = rule("must not contain control characters")
	ErrBackslash    error = rule(`must use "/" separators, not "\"`)
	ErrAbsolute     error = rule(`must be repository-relative: no leading "/"`)
	ErrDrive        error = rule(`must be repository-relative: no drive letter ("C:")`)
	ErrEmptySegment error = rule(`must be clean: no empty segment ("a//b", a trailing "/")`)
	ErrDotSegment   error = rule(`must be clean: no "." segment`)
	ErrDotDot       error = rule(`must stay inside the repository: no ".." segment`)
	ErrGit          error = rule(`must not be inside .git`)
	ErrBadGlob      error = rule(`must be a valid doublestar glob: classes closed and not empty, braces balanced and not nested`)
)

// Validate answers nil when p is a valid repository-relative path (see the package comment), or
// the rule it breaks.
func Validate(p string) error {
	if err := checkText(p); err != nil {
		return err
	}
	return checkSegments(p, false)
}

// Clean answers p when it is a valid path, or the rule it breaks. It never rewrites a path (a
// path written two ways is refused), so Clean(Clean(p)) == Clean(p).
func Clean(p string) (string, error) {
	if err := Validate(p); err != nil {
		return "", err
	}
	return p, nil
}

// ValidateDir is [Validate] for a directory, which may end in one "/" ("docs/").
func ValidateDir(p string) error {
	if t, ok := strings.CutSuffix(p, "/"); ok && t != "" {
		p = t
	}
	return Validate(p)
}

// ValidateGlob answers nil when p is a valid glob (see the package comment), or the rule it breaks.
func ValidateGlob(p string) error {
	if err := checkText(p); err != nil {
		return err
	}
	if err := checkSegments(p, true); err != nil {
		return err
	}
	if !globSyntax(p) || !doublestar.ValidatePattern(p) {
		return ErrBadGlob
	}
	return nil
}

// CleanGlob answers the canonical form of a valid glob, repeated "**" segments collapsed into
// one ("a/**/**/b" is "a/**/b", which matches the same paths), or the rule p breaks. CleanGlob is
// idempotent.
func CleanGlob(p string) (string, error) {
	if err := ValidateGlob(p); err != nil {
		return "", err
	}
	if !strings.Contains(p, "**/**") {
		return p, nil
	}
	segs := strings.Split(p, "/")
	out := segs[:0]
	for _, s := range segs {
		if s == "**" && len(out) > 0 && out[len(out)-1] == "**" {
			continue
		}
		out = append(out, s)
	}
	return strings.Join(out, "/"), nil
}

// checkText checks what paths and globs share before their segments: length, encoding, characters,
// and what makes a path absolute.
func checkText(p string) error {
	switch {
	case p == "":
		return ErrEmpty
	case len(p) > MaxBytes:
		return ErrTooLong
	case !utf8.ValidString(p):
		return ErrInvalidUTF8
	case strings.ContainsFunc(p, unicode.IsControl):
		return ErrControl
	case strings.ContainsRune(p, '\\'):
		return ErrBackslash
	case p[0] == '/':
		return ErrAbsolute
	case len(p) >= 2 && p[1] == ':' && isASCIILetter(p[0]):
		return ErrDrive
	}
	return nil
}

// checkSegments checks p's '/' segments; for a glob, also the alternatives inside them: every
// token between '/', '{', ',' and '}'.
func checkSegments(p string, glob bool) error {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" {
			return ErrEmptySegment
		}
		if !glob {
			if err := checkName(seg); err != nil {
				return err
			}
			continue
		}
		for tok := range strings.FieldsFuncSeq(seg, isAltSep) {
			if err := checkName(tok); err != nil {
				return err
			}
		}
	}
	return nil
}

func isAltSep(r rune) bool { return r == '{' || r == ',' || r == '}' }

// checkName refuses the names a segment (or a glob's alternative) must not have.
func checkName(s string) error {
	switch {
	case s == ".":
		return ErrDotSegment
	case s == "..":
		return ErrDotDot
	case strings.EqualFold(s, ".git"):
		return ErrGit
	}
	return nil
}

func isASCIILetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// globSyntax reports whether p (without '\') is a doublestar glob whose alternatives are not
// nested: classes "[!^]?x...]" closed and not empty, every '{' closed by a '}' before the next
// '{', no '}' without its '{'. This is the language of GlobSyntaxRegexp.
func globSyntax(p string) bool {
	inAlt := false
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '[':
			i++
			if i < len(p) && (p[i] == '!' || p[i] == '^') {
				i++
			}
			if i >= len(p) || p[i] == ']' {
				return false
			}
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return false
			}
			i += j
		case '{':
			if inAlt {
				return false
			}
			inAlt = true
		case '}':
			if !inAlt {
				return false
			}
			inAlt = false
		}
	}
	return !inAlt
}

// GlobSyntaxRegexp is the RE2 expression of the glob syntax [ValidateGlob] accepts (for a string
// without '\'): the protos' CEL rules use it, and a test checks it against the Go scanner.
const GlobSyntaxRegexp = `^(?:[^\[{}]|\[(?:[!^][^\]]+|[^!^\]][^\]]*)\]|\{(?:[^\[{}]|\[(?:[!^][^\]]+|[^!^\]][^\]]*)\])*\})*$`

// meta are the characters that make a pattern a glob rather than a literal path.
const meta = "*?[{"

// IsGlob reports whether p holds a glob meta character (* ? [ {): as a pattern it may match
// other paths than itself.
func IsGlob(p string) bool { return strings.ContainsAny(p, meta) }

// IsLiteral reports whether the glob has no meta character, so that it matches exactly one path:
// itself.
func IsLiteral(pattern string) bool { return !IsGlob(pattern) }

// LiteralPrefix answers the text of pattern before its first meta character: all of it for a
// literal pattern.
func LiteralPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, meta); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// Match reports whether the glob matches the path p, both valid; an invalid glob matches nothing.
func Match(pattern, p string) bool {
	ok, err := doublestar.Match(pattern, p)
	return err == nil && ok
}
