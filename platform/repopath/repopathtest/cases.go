// Package repopathtest holds the one table of path cases that drives the repopath unit tests,
// its fuzz targets' seeds, and the test that the protos' protovalidate rules agree with repopath.
package repopathtest

import "strings"

// Case is one input and whether each reading of it is valid. Every valid glob is a valid path
// and every valid path a valid directory: Glob implies Path implies Dir.
type Case struct {
	// In is the path or glob as a client writes it.
	In string
	// Path: repopath.Validate accepts In as a concrete path.
	Path bool
	// Dir: repopath.ValidateDir accepts In as a directory (a path that may end in one "/").
	Dir bool
	// Glob: repopath.ValidateGlob accepts In as a glob.
	Glob bool
	// Why says what the row checks.
	Why string
}

// Cases is the table. Rows are grouped by rule; each rule has rows at its edges.
var Cases = []Case{
	// Plain paths: valid everywhere.
	{In: "a", Path: true, Dir: true, Glob: true, Why: "one segment"},
	{In: "a/b/c.go", Path: true, Dir: true, Glob: true, Why: "nested file"},
	{In: "server/routes/habits.ts", Path: true, Dir: true, Glob: true, Why: "typical file"},
	{In: ".gitignore", Path: true, Dir: true, Glob: true, Why: ".gitignore is not .git"},
	{In: "a/.github/workflows/ci.yml", Path: true, Dir: true, Glob: true, Why: ".github is not .git"},
	{In: ".git-blame-ignore-revs", Path: true, Dir: true, Glob: true, Why: "a name starting with .git"},
	{In: "x.git", Path: true, Dir: true, Glob: true, Why: "a name ending with .git"},
	{In: "a/.../b", Path: true, Dir: true, Glob: true, Why: "three dots is a name"},
	{In: "a/..b/c", Path: true, Dir: true, Glob: true, Why: "..b is a name"},
	{In: "a/b../c", Path: true, Dir: true, Glob: true, Why: "b.. is a name"},
	{In: ".env", Path: true, Dir: true, Glob: true, Why: "dot file"},
	{In: "a b/c d.txt", Path: true, Dir: true, Glob: true, Why: "spaces"},
	{In: "ab:c", Path: true, Dir: true, Glob: true, Why: "a colon after the second byte"},
	{In: "a:b", Why: "a letter and a colon: drive-relative on Windows"},
	{In: "1:x", Path: true, Dir: true, Glob: true, Why: "a digit before a colon is no drive"},
	{In: "docs/héllo/日本.md", Path: true, Dir: true, Glob: true, Why: "non-ASCII UTF-8"},
	{In: "a,b/c", Path: true, Dir: true, Glob: true, Why: "a comma outside braces"},
	{In: "a]b", Path: true, Dir: true, Glob: true, Why: "a lone ']' is literal"},
	{In: "emoji/😀.txt", Path: true, Dir: true, Glob: true, Why: "4-byte rune"},

	// Lengths: bytes, not characters.
	{In: strings.Repeat("a", 1024), Path: true, Dir: true, Glob: true, Why: "1024 bytes"},
	{In: strings.Repeat("a", 1025), Why: "1025 bytes"},
	{In: strings.Repeat("é", 512), Path: true, Dir: true, Glob: true, Why: "512 two-byte runes: 1024 bytes"},
	{In: strings.Repeat("é", 513), Why: "513 runes but 1026 bytes: bytes are the limit"},
	{In: strings.Repeat("a/", 511) + "ab", Path: true, Dir: true, Glob: true, Why: "1024 bytes, 512 segments"},
	{In: strings.Repeat("a", 1023) + "/", Dir: true, Why: "1024 bytes with the directory's slash"},

	// Empty and encoding.
	{In: "", Why: "empty"},
	{In: "a\xffb", Why: "invalid UTF-8"},
	{In: "\xc3", Why: "truncated UTF-8"},

	// Control characters.
	{In: "a\x00b", Why: "NUL"},
	{In: "a\nb", Why: "newline"},
	{In: "a\tb", Why: "tab"},
	{In: "a\x1fb", Why: "unit separator"},
	{In: "a\x7fb", Why: "DEL"},
	{In: "a\u0085b", Why: "C1 next line"},
	{In: "a\u009fb", Why: "last C1 control"},
	{In: "a\u00a0b", Path: true, Dir: true, Glob: true, Why: "no-break space is no control"},

	// Separators, absolute, drive letters.
	{In: `a\b`, Why: "backslash"},
	{In: `\a`, Why: "leading backslash"},
	{In: `a\*`, Why: "a glob escape is a backslash too"},
	{In: "/a", Why: "absolute"},
	{In: "/", Why: "root"},
	{In: "//a", Why: "double leading slash"},
	{In: "C:", Why: "drive"},
	{In: "c:/a", Why: "drive with slash"},
	{In: "Z:a", Why: "drive-relative"},

	// Segments.
	{In: "a//b", Why: "empty segment"},
	{In: "a/", Dir: true, Why: "trailing slash: a directory only"},
	{In: "a/b/", Dir: true, Why: "nested directory"},
	{In: "a//", Why: "two trailing slashes"},
	{In: ".", Why: "dot"},
	{In: "./a", Why: "leading dot segment"},
	{In: "a/./b", Why: "inner dot segment"},
	{In: "a/.", Why: "trailing dot segment"},
	{In: "./", Why: "dot directory"},
	{In: "..", Why: "dot-dot"},
	{In: "../a", Why: "leading dot-dot"},
	{In: "a/../b", Why: "inner dot-dot"},
	{In: "a/..", Why: "trailing dot-dot"},
	{In: "a/../", Why: "dot-dot directory"},

	// .git at any depth, any case.
	{In: ".git", Why: ".git itself"},
	{In: ".git/", Why: ".git as a directory"},
	{In: ".git/config", Why: "inside .git"},
	{In: "sub/.git/hooks/pre-commit", Why: "nested .git"},
	{In: "sub/.GIT/config", Why: ".GIT on a case-insensitive file system"},
	{In: ".GIT/config", Why: ".GIT at the root (the Scheduler once accepted it)"},
	{In: "sub/.git/config", Why: "nested .git (the Scheduler once accepted it)"},
	{In: "a/.Git", Why: "trailing .Git"},

	// Globs.
	{In: "*.go", Path: true, Dir: true, Glob: true, Why: "star"},
	{In: "**", Path: true, Dir: true, Glob: true, Why: "double star"},
	{In: "**/*.go", Path: true, Dir: true, Glob: true, Why: "any depth"},
	{In: "src/**/*.test.ts", Path: true, Dir: true, Glob: true, Why: "double star inside"},
	{In: "a/**/**/b", Path: true, Dir: true, Glob: true, Why: "repeated double star (CleanGlob collapses it)"},
	{In: "a?c", Path: true, Dir: true, Glob: true, Why: "question mark"},
	{In: "[abc].go", Path: true, Dir: true, Glob: true, Why: "class"},
	{In: "[!a]x", Path: true, Dir: true, Glob: true, Why: "negated class"},
	{In: "[^a]x", Path: true, Dir: true, Glob: true, Why: "caret-negated class"},
	{In: "a[/]b", Path: true, Dir: true, Glob: true, Why: "a slash in a class"},
	{In: "[{]", Path: true, Dir: true, Glob: true, Why: "a brace in a class is a member"},
	{In: "x{a,b}y", Path: true, Dir: true, Glob: true, Why: "alternation"},
	{In: "x{,.bak}", Path: true, Dir: true, Glob: true, Why: "empty alternative"},
	{In: "{}", Path: true, Dir: true, Glob: true, Why: "empty braces"},
	{In: "src/{a,b}/**/*.{ts,tsx}", Path: true, Dir: true, Glob: true, Why: "two alternations"},
	{In: "app/[slug]/page.tsx", Path: true, Dir: true, Glob: true, Why: "a class is a name in a path"},
	{In: "a*b", Path: true, Dir: true, Glob: true, Why: "a star is a name in a path"},
	{In: "a{b", Path: true, Dir: true, Why: "an unclosed brace is a name but no glob"},
	{In: "a}b", Path: true, Dir: true, Why: "a lone '}' is a name but no glob"},
	{In: "a[b", Path: true, Dir: true, Why: "an unclosed class is a name but no glob"},
	{In: "a[]b", Path: true, Dir: true, Why: "empty class"},
	{In: "a[!]b", Path: true, Dir: true, Why: "empty negated class"},
	{In: "a[]]b", Path: true, Dir: true, Why: "']' right after '[' leaves the class empty"},
	{In: "{a,{b,c}}", Path: true, Dir: true, Why: "nested alternation: write {a,b,c}"},
	{In: "{a}}", Path: true, Dir: true, Why: "unbalanced closing brace"},
	{In: "*/", Dir: true, Why: "a glob does not end in '/'"},
	{In: "docs/", Dir: true, Why: "a directory, not a glob: write docs/**"},
	{In: "/**", Why: "absolute glob"},
	{In: "**/../x", Why: "dot-dot under a glob"},
	{In: "{..,a}/x", Path: true, Dir: true, Why: "dot-dot as an alternative"},
	{In: "a/{.,b}", Path: true, Dir: true, Why: "dot as an alternative"},
	{In: "{.git,src}/**", Path: true, Dir: true, Why: ".git as an alternative"},
	{In: "x/{a,.GIT}", Path: true, Dir: true, Why: ".GIT as an alternative"},
	{In: "a,./b", Path: true, Dir: true, Why: "a comma separates glob tokens, even outside braces"},
	{In: "[.,]x", Path: true, Dir: true, Glob: true, Why: "dots in a class are members, not tokens"},
	{In: ".g*", Path: true, Dir: true, Glob: true, Why: "a glob may match names .git has, never a valid path in .git"},
}
