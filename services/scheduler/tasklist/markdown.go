package tasklist

import (
	"regexp"
	"strings"
)

// mdLine is one line of a markdown document, as the tasks.md and execution-plan readers see it.
type mdLine struct {
	// num is the 1-based line number.
	num int
	// start and end are the byte offsets of the line's text in the document, without its line
	// ending ("\n" or "\r\n").
	start, end int
	// text is the line without its line ending.
	text string
	// fenced is set for lines inside a fenced code block and for the fences themselves: they are
	// never read as headings, fields or checkboxes.
	fenced bool
	// fence is set for the opening and closing fence lines.
	fence bool
}

// splitLines splits content into lines and marks fenced code blocks (``` or ~~~, closed by a
// fence of the same character at least as long; an unclosed fence runs to the end).
func splitLines(content []byte) []mdLine {
	var lines []mdLine
	var fenceChar byte
	fenceLen := 0
	for start, num := 0, 1; ; num++ {
		end := start
		for end < len(content) && content[end] != '\n' {
			end++
		}
		textEnd := end
		if textEnd > start && content[textEnd-1] == '\r' {
			textEnd--
		}
		l := mdLine{num: num, start: start, end: textEnd, text: string(content[start:textEnd])}
		if c, n := fenceOf(l.text); fenceChar == 0 && n > 0 {
			fenceChar, fenceLen = c, n
			l.fenced, l.fence = true, true
		} else if fenceChar != 0 {
			l.fenced = true
			if c == fenceChar && n >= fenceLen && strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l.text), string(c))) == "" {
				l.fence = true
				fenceChar = 0
			}
		}
		lines = append(lines, l)
		if end >= len(content) {
			break
		}
		start = end + 1
	}
	return lines
}

// fenceOf returns the fence character and length of a fence line (up to three spaces of
// indentation, then three or more ` or ~), or 0, 0.
func fenceOf(text string) (byte, int) {
	t := strings.TrimLeft(text, " ")
	if len(text)-len(t) > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return 0, 0
	}
	n := 0
	for n < len(t) && t[n] == t[0] {
		n++
	}
	if n < 3 || (t[0] == '`' && strings.Contains(t[n:], "`")) {
		return 0, 0
	}
	return t[0], n
}

// heading returns the level (1-6) and text of an ATX heading, or 0, "".
func heading(l mdLine) (int, string) {
	if l.fenced {
		return 0, ""
	}
	t := strings.TrimLeft(l.text, " ")
	if len(l.text)-len(t) > 3 {
		return 0, ""
	}
	level := 0
	for level < len(t) && t[level] == '#' {
		level++
	}
	if level == 0 || level > 6 || (level < len(t) && t[level] != ' ' && t[level] != '\t') {
		return 0, ""
	}
	text := strings.TrimSpace(t[level:])
	// An optional closing sequence of #s.
	if trimmed := strings.TrimRight(text, "#"); trimmed != text && (trimmed == "" || strings.HasSuffix(trimmed, " ")) {
		text = strings.TrimSpace(trimmed)
	}
	return level, text
}

// phaseHeading reads "Phase 1: Database", "Phase 1 — Database", "Phase 1 - Database" or
// "Phase 1" headings.
var phaseHeading = regexp.MustCompile(`^(?i:phase)\s+([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:[:—–-]\s*(.*))?$`)

// phaseName is the phase a "## " heading names: the name after "Phase N:", or "Phase N" when it
// has none; ok is false for other headings.
func phaseName(text string) (name string, ok bool) {
	m := phaseHeading.FindStringSubmatch(text)
	if m == nil {
		return "", false
	}
	if name = strings.TrimSpace(m[2]); name == "" {
		name = "Phase " + m[1]
	}
	return name, true
}

// stripMarkup removes emphasis and code markers around a short value ("**T1.1**", "`a.go`").
func stripMarkup(s string) string {
	s = strings.TrimSpace(s)
	for {
		t := s
		for _, m := range []string{"**", "__", "`", "*", "_", "~~"} {
			if len(t) >= 2*len(m) && strings.HasPrefix(t, m) && strings.HasSuffix(t, m) {
				t = strings.TrimSpace(t[len(m) : len(t)-len(m)])
			}
		}
		if t == s {
			return s
		}
		s = t
	}
}

// codeSpans returns the contents of the inline code spans of s, in order.
func codeSpans(s string) []string {
	var spans []string
	for {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			return spans
		}
		n := i
		for n < len(s) && s[n] == '`' {
			n++
		}
		ticks := s[i:n]
		j := strings.Index(s[n:], ticks)
		if j < 0 {
			return spans
		}
		spans = append(spans, strings.TrimSpace(s[n:n+j]))
		s = s[n+j+len(ticks):]
	}
}

// splitList splits a comma-separated list, keeping commas inside code spans, braces (globs like
// `src/{a,b}.go`) and parentheses ("a.go (read, file)") together. Empty items are dropped.
func splitList(s string) []string {
	var items []string
	depth, inCode := 0, false
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '`':
			inCode = !inCode
		case inCode:
		case c == '{' || c == '(':
			depth++
		case (c == '}' || c == ')') && depth > 0:
			depth--
		case c == ',' && depth == 0:
			items = append(items, s[start:i])
			start = i + 1
		}
	}
	items = append(items, s[start:])
	out := items[:0]
	for _, it := range items {
		if it = strings.TrimSpace(it); it != "" {
			out = append(out, it)
		}
	}
	return out
}

// isNone reports whether a list value means "nothing" ("none", "-", "—", "n/a").
func isNone(s string) bool {
	switch strings.ToLower(stripMarkup(s)) {
	case "", "none", "-", "—", "–", "n/a", "na", "nothing":
		return true
	}
	return false
}
