package tasklist

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The execution-plan grammar (seed 07-build; docs/tasks.md has examples):
//
//	# Execution Plan: Title           the list's name
//	## Phase 1: Foundation            the phase of the tasks below it
//	### M1: Schema and models         the milestone of the tasks below it ("### Milestone 1: ..." too)
//	| Task | Description | Depends On | Files | Status |
//	|------|-------------|------------|-------|--------|
//	| T1.1 | Create the schema | — | `db/schema.sql` | completed |
//
// A table is a task table when its header names an id column (Task, ID) and a title column
// (Description, Title, Name): each row defines a task. A table with an id column but no title
// column is a tracking table: each row updates a task defined elsewhere in the document (its
// status, dependencies, files, ...). Other tables are ignored. Columns are found by their header,
// in any order and case; columns converge does not know go into the task's description as
// "Header: value" lines.

// milestoneHeading reads "M1: Name", "M1 — Name", "Milestone 1: Name".
var milestoneHeading = regexp.MustCompile(`^((?i:M)\d+[A-Za-z0-9.]*|(?i:milestone)\s+[A-Za-z0-9.]+)\s*(?:[:—–-]\s*(.*))?$`)

// delimiterCell is a cell of a table's delimiter row.
var delimiterCell = regexp.MustCompile(`^\s*:?-+:?\s*$`)

// planColumns maps normalized headers to what they set.
var planColumns = map[string]string{
	"task": "id", "id": "id", "task id": "id", "#": "id", "key": "id",
	"title": "title", "name": "title", "task name": "title", "description": "title", "summary": "title",
	"depends on": "depends", "dependencies": "depends", "depends": "depends", "deps": "depends", "blocked by": "depends",
	"files": "files", "file": "files", "target files": "files", "paths": "files",
	"status": "status", "state": "status",
	"validation": "validation", "verification": "validation", "test": "validation", "check": "validation",
	"command": "command", "cmd": "command",
	"phase": "phase", "milestone": "milestone", "priority": "priority", "action": "action",
}

// planRow is one row of a task or tracking table.
type planRow struct {
	line        int
	cells       map[string]string // by column kind; "" kinds are in extra
	extra       []string          // "Header: value" for unknown columns
	phase       string
	phaseNumber int // the count of "## " headings before it
	milestone   string
}

// ParseExecutionPlan reads an execution plan: phases → milestones → task tables with
// "Depends On" (see the grammar above and docs/tasks.md). Errors name the line.
func ParseExecutionPlan(content []byte) (*Document, error) {
	if err := checkUTF8(content); err != nil {
		return nil, err
	}
	lines := splitLines(content)
	spec := &schedulerv1.TaskListSpec{}
	var (
		warnings         []Warning
		defs, updates    []planRow
		phase, milestone string
		phaseNumber      int
		gates            []planGate
		signoffs         []planSignoff
	)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if level, text := heading(l); level > 0 {
			switch {
			case level == 1 && spec.Name == "":
				spec.Name = text
			case level == 2:
				phase, _ = phaseName(text)
				milestone = ""
				phaseNumber++
			case level >= 3:
				if m := milestoneHeading.FindStringSubmatch(text); m != nil {
					milestone = strings.TrimSpace(m[1])
					if name := strings.TrimSpace(m[2]); name != "" {
						milestone += ": " + name
					}
				} else if level == 3 {
					milestone = ""
				}
			}
			continue
		}
		if phaseNumber == 0 && headerField(spec, l) {
			continue
		}
		if cmd, ok := gateOf(l.text); ok && !l.fenced {
			gates = append(gates, planGate{line: l.num, phase: phase, milestone: milestone, phaseNumber: phaseNumber, command: cmd})
			continue
		}
		if isLine, required, msg := signoffOf(l.text); isLine && !l.fenced {
			if msg != "" {
				return nil, errorf(l.num, "%s", msg)
			}
			signoffs = append(signoffs, planSignoff{line: l.num, milestone: milestone, phaseNumber: phaseNumber, required: required})
			continue
		}
		if l.fenced || !isTableLine(l.text) || i+1 >= len(lines) || !isDelimiterRow(lines[i+1]) {
			continue
		}
		// A table: header, delimiter, rows.
		header := splitRow(l.text)
		kinds := make([]string, len(header))
		hasID, hasTitle := false, false
		for c, h := range header {
			kinds[c] = planColumns[normalizeHeader(h)]
			hasID = hasID || kinds[c] == "id"
			hasTitle = hasTitle || kinds[c] == "title"
		}
		i += 2
		for ; i < len(lines) && !lines[i].fenced && isTableLine(lines[i].text); i++ {
			if !hasID {
				continue
			}
			cells := splitRow(lines[i].text)
			if len(cells) != len(header) {
				warnings = append(warnings, Warning{Line: lines[i].num, Message: fmt.Sprintf("row has %d cells, the header %d", len(cells), len(header))})
			}
			row := planRow{line: lines[i].num, cells: map[string]string{}, phase: phase, phaseNumber: phaseNumber, milestone: milestone}
			for c, v := range cells {
				if c >= len(header) {
					break
				}
				v = strings.TrimSpace(v)
				switch {
				case kinds[c] == "":
					if v != "" && !isNone(v) {
						row.extra = append(row.extra, strings.TrimSpace(stripMarkup(header[c]))+": "+v)
					}
				case row.cells[kinds[c]] == "":
					row.cells[kinds[c]] = v
				}
			}
			if hasTitle {
				defs = append(defs, row)
			} else {
				updates = append(updates, row)
			}
		}
		i-- // the loop's i++ moves to the line after the table
	}

	byID := map[string]*commonv1.Task{}
	var taskLines []int
	for _, row := range defs {
		id := stripMarkup(row.cells["id"])
		title := stripMarkup(row.cells["title"])
		if id == "" {
			return nil, errorf(row.line, "task row without an id")
		}
		if !taskIDPattern.MatchString(id) {
			return nil, errorf(row.line, `task id %q must start with a letter or digit and hold only letters, digits, ".", "_" and "-" (at most 64)`, id)
		}
		if title == "" {
			return nil, errorf(row.line, "task %s has no description", id)
		}
		t := &commonv1.Task{Id: id, Title: title, Phase: row.phase, Status: commonv1.TaskStatus_TASK_STATUS_PENDING}
		var desc []string
		if row.milestone != "" {
			desc = append(desc, "Milestone "+row.milestone)
		}
		if p := stripMarkup(row.cells["phase"]); p != "" {
			t.Phase = p
		}
		if m := stripMarkup(row.cells["milestone"]); m != "" {
			desc = append(desc[:0], "Milestone "+m)
		}
		t.Description = strings.Join(append(desc, row.extra...), "\n")
		if err := applyPlanCells(t, row, &warnings); err != nil {
			return nil, err
		}
		spec.Tasks = append(spec.Tasks, t)
		taskLines = append(taskLines, row.line)
		if _, dup := byID[id]; !dup {
			byID[id] = t
		}
	}
	for _, row := range updates {
		id := stripMarkup(row.cells["id"])
		if id == "" {
			continue
		}
		t, ok := byID[id]
		if !ok {
			return nil, errorf(row.line, "tracking row for task %q, which no task table defines", id)
		}
		if err := applyPlanCells(t, row, &warnings); err != nil {
			return nil, err
		}
	}
	if len(spec.Tasks) == 0 {
		return nil, errorf(1, `no task found: tasks are rows of tables with a "Task" and a "Description" column`)
	}
	if err := applySignoffs(gates, signoffs); err != nil {
		return nil, err
	}
	if len(gates) > 0 {
		var err error
		if spec.Tasks, taskLines, err = addGates(spec.Tasks, taskLines, slices.Clone(defs), gates, &warnings); err != nil {
			return nil, err
		}
	}
	for i, t := range spec.Tasks {
		if IsGate(t) {
			continue // a gate checks: it declares no files on purpose
		}
		if t.GetFile() == "" && len(t.GetFiles()) == 0 {
			warnings = append(warnings, Warning{Line: taskLines[i], Message: fmt.Sprintf("task %s declares no files: it may share a wave with any task", t.GetId())})
		}
	}
	sortWarnings(warnings)
	return &Document{Spec: spec, Warnings: warnings, TaskLines: taskLines}, nil
}

// applyPlanCells sets what a row's known cells say on t (the id and title are set already).
func applyPlanCells(t *commonv1.Task, row planRow, warnings *[]Warning) error {
	if v, ok := row.cells["depends"]; ok && !isNone(v) {
		t.DependsOn = t.DependsOn[:0]
		for _, item := range splitList(v) {
			t.DependsOn = append(t.DependsOn, depID(item))
		}
	}
	if v, ok := row.cells["files"]; ok && !isNone(v) {
		t.Files = t.Files[:0]
		for _, item := range splitList(v) {
			im, msg := fileItem(item)
			if msg != "" {
				return errorf(row.line, "task %s: %s", t.Id, msg)
			}
			t.Files = append(t.Files, im)
		}
		for _, f := range t.Files {
			if ResolveKind(f.Path, f.Kind) == commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE && f.Operation != commonv1.FileOperation_FILE_OPERATION_READ {
				t.File = f.Path
				break
			}
		}
	}
	if v, ok := row.cells["status"]; ok {
		s, note := planStatus(v)
		t.Status = s
		if note != "" {
			*warnings = append(*warnings, Warning{Line: row.line, Message: fmt.Sprintf("task %s: %s", t.Id, note)})
		}
	}
	if v := row.cells["validation"]; v != "" && !isNone(v) {
		val := validation(t)
		if spans := codeSpans(v); len(spans) > 0 {
			val.Command = spans[0]
		} else {
			val.Expected = truncate(v, 2048)
		}
	}
	if v := row.cells["command"]; v != "" && !isNone(v) {
		t.Command = commandValue(v)
	}
	if v := stripMarkup(row.cells["priority"]); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errorf(row.line, "task %s: priority %q is not a number", t.Id, v)
		}
		t.Priority = int32(max(min(n, 1<<20), -1<<20))
	}
	if v := stripMarkup(row.cells["action"]); v != "" {
		a, ok := commonv1.TaskAction_value["TASK_ACTION_"+strings.ToUpper(v)]
		if !ok || a == 0 {
			return errorf(row.line, "task %s: action %q: want create, update, delete, test or run", t.Id, v)
		}
		t.Action = commonv1.TaskAction(a)
	}
	return nil
}

// planStatus maps a Status cell (seed: pending, in_progress, completed, blocked) to a task status,
// with a note when the mapping is not one to one.
func planStatus(cell string) (commonv1.TaskStatus, string) {
	v := strings.ToLower(stripMarkup(cell))
	switch {
	case v == "" || isNone(v) || strings.Contains(v, "pending") || strings.Contains(v, "todo") || strings.Contains(v, "not started"):
		return commonv1.TaskStatus_TASK_STATUS_PENDING, ""
	case strings.Contains(v, "complete") || strings.Contains(v, "done") || strings.Contains(v, "✅"):
		return commonv1.TaskStatus_TASK_STATUS_COMPLETED, ""
	case strings.Contains(v, "skip"):
		return commonv1.TaskStatus_TASK_STATUS_SKIPPED, ""
	case strings.Contains(v, "block") || strings.Contains(v, "dcr"):
		return commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR, ""
	case strings.Contains(v, "progress"):
		return commonv1.TaskStatus_TASK_STATUS_PENDING, fmt.Sprintf("status %q imported as PENDING: it runs again", cell)
	default:
		return commonv1.TaskStatus_TASK_STATUS_PENDING, fmt.Sprintf("status %q is not pending, in_progress, completed, skipped or blocked; imported as PENDING", cell)
	}
}

// isTableLine reports whether a line is a table row (starts with "|").
func isTableLine(text string) bool { return strings.HasPrefix(strings.TrimSpace(text), "|") }

// isDelimiterRow reports whether a line is a table's delimiter row: | --- | :---: |.
func isDelimiterRow(l mdLine) bool {
	if l.fenced || !isTableLine(l.text) {
		return false
	}
	cells := splitRow(l.text)
	if len(cells) == 0 {
		return false
	}
	for _, c := range cells {
		if !delimiterCell.MatchString(c) {
			return false
		}
	}
	return true
}

// splitRow splits a table row into its cells: pipes separate cells except when escaped ("\|")
// or inside a code span.
func splitRow(text string) []string {
	t := strings.TrimSpace(text)
	t = strings.TrimPrefix(t, "|")
	if strings.HasSuffix(t, "|") && !strings.HasSuffix(t, `\|`) {
		t = t[:len(t)-1]
	}
	var cells []string
	var cur strings.Builder
	inCode := false
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c == '\\' && i+1 < len(t) && t[i+1] == '|':
			cur.WriteByte('|')
			i++
		case c == '`':
			inCode = !inCode
			cur.WriteByte(c)
		case c == '|' && !inCode:
			cells = append(cells, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(cells, cur.String())
}

// normalizeHeader lower-cases a header and folds its spaces and underscores.
func normalizeHeader(h string) string {
	h = strings.ToLower(stripMarkup(h))
	h = strings.ReplaceAll(h, "_", " ")
	return strings.Join(strings.Fields(h), " ")
}

// sortWarnings orders warnings by line, keeping the order of warnings on one line.
func sortWarnings(w []Warning) {
	slices.SortStableFunc(w, func(a, b Warning) int { return a.Line - b.Line })
}
