package executor

import (
	"strings"
)

// ExtractCode answers the file content in a model's answer: the content of its first fenced
// code block (``` or ~~~, CommonMark rules: up to three spaces of indentation, a closing fence
// of the same character at least as long, an unclosed block running to the end), or else the
// whole answer without leading blank lines and trailing white space. Line endings become "\n";
// a non-empty result ends with one.
func ExtractCode(content string) string {
	if code, ok := firstFencedBlock(content); ok {
		return code
	}
	return wholeAnswer(content)
}

// extractFile is ExtractCode for the content of file: a Markdown file's answer holds code
// blocks of its own, so only an answer that is one fenced block as a whole is unwrapped.
func extractFile(file, content string) string {
	lower := strings.ToLower(file)
	if !strings.HasSuffix(lower, ".md") && !strings.HasSuffix(lower, ".markdown") {
		return ExtractCode(content)
	}
	lines := strings.Split(normalizeNewlines(strings.TrimSpace(content)), "\n")
	if len(lines) >= 2 {
		if f, indent, ok := openingFence(lines[0]); ok && indent == 0 && closesFence(lines[len(lines)-1], f) {
			return joinLines(lines[1 : len(lines)-1])
		}
	}
	return wholeAnswer(content)
}

func normalizeNewlines(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

func wholeAnswer(content string) string {
	s := normalizeNewlines(content)
	// Leading blank lines go; the first line's indentation stays.
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 || strings.TrimSpace(s[:i]) != "" {
			break
		}
		s = s[i+1:]
	}
	s = strings.TrimRight(s, " \t\n")
	if strings.TrimSpace(s) == "" {
		return ""
	}
	return s + "\n"
}

func firstFencedBlock(content string) (string, bool) {
	lines := strings.Split(normalizeNewlines(content), "\n")
	for i, line := range lines {
		fence, indent, ok := openingFence(line)
		if !ok {
			continue
		}
		var body []string
		for _, l := range lines[i+1:] {
			if closesFence(l, fence) {
				break
			}
			body = append(body, dedent(l, indent))
		}
		return joinLines(body), true
	}
	return "", false
}

// openingFence answers the fence (e.g. "```" or "~~~~") that line opens and its indentation.
func openingFence(line string) (fence string, indent int, ok bool) {
	for indent < len(line) && indent < 4 && line[indent] == ' ' {
		indent++
	}
	if indent > 3 {
		return "", 0, false
	}
	rest := line[indent:]
	if len(rest) < 3 || (rest[0] != '`' && rest[0] != '~') {
		return "", 0, false
	}
	n := 0
	for n < len(rest) && rest[n] == rest[0] {
		n++
	}
	if n < 3 {
		return "", 0, false
	}
	// A backtick fence's info string has no backtick (else it is inline code).
	if rest[0] == '`' && strings.Contains(rest[n:], "`") {
		return "", 0, false
	}
	return rest[:n], indent, true
}

// closesFence reports whether line closes a block opened by fence.
func closesFence(line, fence string) bool {
	i := 0
	for i < len(line) && i < 4 && line[i] == ' ' {
		i++
	}
	if i > 3 {
		return false
	}
	rest := line[i:]
	n := 0
	for n < len(rest) && rest[n] == fence[0] {
		n++
	}
	return n >= len(fence) && strings.TrimRight(rest[n:], " \t") == ""
}

// dedent removes up to n leading spaces.
func dedent(line string, n int) string {
	for n > 0 && len(line) > 0 && line[0] == ' ' {
		line, n = line[1:], n-1
	}
	return line
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	s := strings.Join(lines, "\n")
	if strings.TrimSpace(s) == "" {
		return ""
	}
	return s + "\n"
}
