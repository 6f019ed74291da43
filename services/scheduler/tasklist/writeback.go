package tasklist

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// Markers are the status markers SetStatus writes, with the emoji before them. The parser reads
// the marker word only; any emoji (or none) may precede it.
var Markers = map[commonv1.TaskStatus]string{
	commonv1.TaskStatus_TASK_STATUS_PENDING:     "🔴 TODO",
	commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS: "🟡 IN PROGRESS",
	commonv1.TaskStatus_TASK_STATUS_COMPLETED:   "🟢 DONE",
	commonv1.TaskStatus_TASK_STATUS_SKIPPED:     "⏭️ SKIPPED",
	commonv1.TaskStatus_TASK_STATUS_FAILED:      "❌ FAILED",
	commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR: "🛑 DCR",
}

// MarkerBlocked is the marker of a task blocked by something other than a design change request
// (a merge conflict during integration); it imports as BLOCKED_DCR, like DCR.
const MarkerBlocked = "🔵 BLOCKED"

// ErrTaskNotFound is returned by SetStatus when the document has no block for the task.
var ErrTaskNotFound = errors.New("tasklist: no such task in the document")

// edit replaces content[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// SetStatus returns a copy of a tasks.md document with the status of one task changed by
// precise edits of that task's block, as pb-build does it: nothing outside the block changes,
// and inside it only
//
//   - the marker of the Status line (the marker word and the emoji right before it; the whole
//     value when it has no marker) or, without a Status line, a marker at the end of the heading;
//     without either, a "**Status:** <marker>" line is inserted after the heading;
//   - for COMPLETED, every unchecked checkbox "- [ ]" of the block, which becomes "- [x]".
//
// status must have a marker (PENDING: TODO, COMPLETED: DONE, SKIPPED, BLOCKED_DCR: DCR). A
// marker that already says the status is left as it is, so setting the status a task already
// has (with its steps checked for DONE) returns the document unchanged. ErrTaskNotFound when no
// "### Task <id>:" heading names the task.
func SetStatus(content []byte, taskID string, status commonv1.TaskStatus) ([]byte, error) {
	marker, ok := Markers[status]
	if !ok {
		return nil, fmt.Errorf("tasklist: tasks.md has no marker for status %v", status)
	}
	return SetMarker(content, taskID, marker, status == commonv1.TaskStatus_TASK_STATUS_COMPLETED)
}

// SetMarker is SetStatus with the marker given (one of Markers' values, or MarkerBlocked);
// checkSteps checks the block's unchecked steps as for COMPLETED.
func SetMarker(content []byte, taskID, marker string, checkSteps bool) ([]byte, error) {
	if !strings.Contains(marker, " ") {
		return nil, fmt.Errorf("tasklist: marker %q is not an emoji and a word", marker)
	}
	lines := splitLines(content)
	head, end := -1, len(lines)
	title := "" // the heading's title, as the parser reads it
	for i, l := range lines {
		level, text := heading(l)
		if level == 0 || level > 3 {
			continue
		}
		if head >= 0 {
			end = i
			break
		}
		if m := taskHeading.FindStringSubmatch(text); level == 3 && m != nil && m[1] == taskID {
			head, title = i, strings.TrimSpace(m[2])
		}
	}
	if head < 0 {
		return nil, fmt.Errorf("%w: %q", ErrTaskNotFound, taskID)
	}

	var edits []edit
	statusDone := false
	for _, l := range lines[head+1 : end] {
		if l.fenced {
			continue
		}
		if m := checkbox.FindStringSubmatchIndex(l.text); m != nil && checkSteps && l.text[m[2]] == ' ' {
			edits = append(edits, edit{l.start + m[2], l.start + m[3], "x"})
			continue
		}
		if m := fieldLine.FindStringSubmatchIndex(l.text); m != nil && !statusDone &&
			fieldLabels[strings.ToLower(strings.TrimSpace(l.text[m[2]:m[3]]))] == "status" {
			statusDone = true
			value := l.text[m[4]:m[5]]
			if e, ok := markerEdit(value, marker); ok {
				if e.start != e.end {
					edits = append(edits, edit{l.start + m[4] + e.start, l.start + m[4] + e.end, e.text})
				}
			} else {
				edits = append(edits, edit{l.start + m[4], l.end, marker})
			}
		}
	}
	if !statusDone {
		h := lines[head]
		// The heading's marker counts only where the parser reads one: after a title.
		var m []int
		if headingMarker.MatchString(title) {
			m = headingMarker.FindStringSubmatchIndex(h.text)
		}
		switch {
		case m != nil && markerKey(h.text[m[2]:m[3]]) == markerWord(marker):
			// The heading's marker already says so.
		case m != nil:
			// " ⏭️ SKIPPED" at the end of the heading: replace from the emoji on.
			from := m[0] + len(h.text[m[0]:]) - len(strings.TrimLeft(h.text[m[0]:], " \t"))
			edits = append(edits, edit{h.start + from, h.start + m[3], marker})
		default:
			nl := bytes.IndexByte(content[h.end:], '\n')
			if nl < 0 { // the heading is the last line, without a line ending
				edits = append(edits, edit{len(content), len(content), "\n**Status:** " + marker})
				break
			}
			ending := "\n"
			if nl > 0 && content[h.end+nl-1] == '\r' {
				ending = "\r\n"
			}
			next := h.end + nl + 1
			edits = append(edits, edit{next, next, "**Status:** " + marker + ending})
		}
	}

	var b strings.Builder
	b.Grow(len(content) + 64)
	at := 0
	slices.SortFunc(edits, func(a, b edit) int { return a.start - b.start })
	for _, e := range edits {
		b.Write(content[at:e.start])
		b.WriteString(e.text)
		at = e.end
	}
	b.Write(content[at:])
	return []byte(b.String()), nil
}

// markerWord is the word(s) of a marker: "DONE" of "🟢 DONE", "IN PROGRESS" of "🟡 IN PROGRESS".
func markerWord(marker string) string { return marker[strings.IndexByte(marker, ' ')+1:] }

// markerEdit finds the marker in a Status value and returns the edit (offsets within value)
// that replaces it, with the emoji right before it when there is one, by marker; an empty edit
// when the marker already says the same.
func markerEdit(value, marker string) (edit, bool) {
	m := statusMarker.FindStringIndex(value)
	if m == nil {
		return edit{}, false
	}
	if markerKey(value[m[0]:m[1]]) == markerWord(marker) {
		return edit{}, true
	}
	start := m[0]
	// An emoji (a run of non-ASCII runes, e.g. "⏭️" with its variation selector) right before
	// the word, with or without one space between.
	i := start
	if i > 0 && value[i-1] == ' ' {
		i--
	}
	j := i
	for j > 0 {
		r, size := utf8.DecodeLastRuneInString(value[:j])
		if r < 0x80 {
			break
		}
		j -= size
	}
	if j < i {
		return edit{j, m[1], marker}, true
	}
	// No emoji: keep the style and write the word alone.
	return edit{start, m[1], markerWord(marker)}, true
}
