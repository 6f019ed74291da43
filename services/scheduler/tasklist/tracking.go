package tasklist

import (
	"bytes"
	"fmt"
	"strings"
)

// The execution tracking table (seed 004's "Task Tracking", seed 003's "state lives on disk"):
// `converge run` appends it to the tasks.md it runs, under a "## Execution Tracking" heading, and
// replaces it on later runs. Only that section changes: from its heading to the next heading of
// level 1 or 2 (or the end of the document). Its heading ends the last task's block, so the
// parser reads the tasks exactly as before.

// TrackingHeading is the heading of the execution tracking section.
const TrackingHeading = "## Execution Tracking"

// TrackingRow is one task's row of the table.
type TrackingRow struct {
	// TaskID and Title name the task.
	TaskID, Title string
	// Marker is its status marker (Markers, MarkerBlocked).
	Marker string
	// Tries is how many times its executor ran in the run (0: not run).
	Tries int32
	// Commit is its commit ("" when none).
	Commit string
	// Note says why a task failed, was skipped or is blocked ("" otherwise).
	Note string
}

// SetTracking returns content with its execution tracking section replaced by (or, without one,
// appended as) a section with summary (one line, e.g. the run and its outcome) and rows. Every
// byte outside the section stays as it was; the section uses the document's line endings.
func SetTracking(content []byte, summary string, rows []TrackingRow) []byte {
	nl := "\n"
	if bytes.Contains(content, []byte("\r\n")) {
		nl = "\r\n"
	}
	var b strings.Builder
	b.WriteString(TrackingHeading + nl + nl + strings.Join(strings.Fields(summary), " ") + nl + nl)
	b.WriteString("| Task | Title | Status | Tries | Commit | Note |" + nl)
	b.WriteString("|------|-------|--------|-------|--------|------|" + nl)
	for _, r := range rows {
		commit := ""
		if r.Commit != "" {
			commit = "`" + short(r.Commit) + "`"
		}
		tries := ""
		if r.Tries > 0 {
			tries = fmt.Sprint(r.Tries)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |%s", cell(r.TaskID), cell(r.Title), r.Marker, tries, commit, cell(r.Note), nl)
	}
	section := b.String()

	lines := splitLines(content)
	start, end := -1, len(content)
	for _, l := range lines {
		level, text := heading(l)
		if level == 0 || level > 2 {
			continue
		}
		if start >= 0 {
			end = l.start
			break
		}
		if level == 2 && strings.EqualFold(strings.TrimSpace(text), strings.TrimPrefix(TrackingHeading, "## ")) {
			start = l.start
		}
	}
	if start < 0 {
		out := append([]byte{}, content...)
		switch {
		case len(out) == 0:
		case !bytes.HasSuffix(out, []byte("\n")):
			out = append(out, []byte(nl+nl)...)
		case !bytes.HasSuffix(out, []byte("\n\n")) && !bytes.HasSuffix(out, []byte("\r\n\r\n")):
			out = append(out, []byte(nl)...)
		}
		return append(out, section...)
	}
	if end < len(content) {
		section += nl // a blank line before the next heading
	}
	out := append([]byte{}, content[:start]...)
	out = append(out, section...)
	return append(out, content[end:]...)
}

// cell makes s fit one table cell: one line, pipes escaped, at most 120 characters.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	if r := []rune(s); len(r) > 120 {
		s = string(r[:119]) + "…"
	}
	return s
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
