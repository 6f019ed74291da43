package tasklist

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The tasks.md grammar (docs/tasks.md has the full description with examples):
//
//	# Title                          the list's name; the text up to the next heading is its description
//	## Phase 1: Database             the phase of the tasks below it (another "## " heading clears it)
//	### Task 1.1: Create the schema  a task: id "1.1", title "Create the schema"
//	**Status:** 🔴 TODO              TODO, IN PROGRESS, DONE, SKIPPED, FAILED, BLOCKED or DCR (emoji ignored)
//	**Files:** `db/schema.sql`, `db/*.sql` (read)
//	**Depends on:** 1.0
//	**Validation:** `go test ./db/...`
//	**Context:** free text...        (also: **Steps:**, **Verification:**, **Requirements:**, ...)
//	- [ ] a step / - [x] a done step
//
// A task's block runs from its heading to the next heading of level 1 to 3. Lines inside fenced
// code blocks are never read as headings, fields or steps.

// taskHeading reads the text of a "### " heading that starts with "Task".
var taskHeading = regexp.MustCompile(`^Task\s+([^\s:]+)\s*:\s*(.*)$`)

// taskIDPattern is the proto's rule for task ids.
var taskIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// fieldLine reads a field line: "**Label:** value", "**Label**: value", optionally as a list
// item ("- **Label:** value").
var fieldLine = regexp.MustCompile(`^\s{0,3}(?:[-*+]\s+)?\*\*([A-Za-z][A-Za-z /_-]{0,39}?)\s*(?::\*\*|\*\*\s*:)\s?(.*)$`)

// checkbox reads a checkbox step: "- [ ] text", "- [x] text" (also "*" and "+" bullets,
// indented).
var checkbox = regexp.MustCompile(`^\s*[-*+]\s+\[([ xX])\]\s?(.*)$`)

// bullet reads a list item that is not a checkbox.
var bullet = regexp.MustCompile(`^\s*[-*+]\s+(.*)$`)

// statusMarker finds a status marker in a Status line.
var statusMarker = regexp.MustCompile(`(?i)\b(TODO|DONE|SKIPPED|DCR|IN[ _-]PROGRESS|FAILED|BLOCKED)\b`)

// headingMarker finds a status marker at the end of a task heading, after an emoji:
// "### Task 2.2: Parser ⏭️ SKIPPED".
var headingMarker = regexp.MustCompile(`\s+[^\x00-\x7f]+\s*(TODO|DONE|SKIPPED|DCR|IN[ _-]PROGRESS|FAILED|BLOCKED)\s*$`)

// markerStatus maps markers (markerKey) to statuses. pb-build's four markers, and those converge's
// write-back adds: IN PROGRESS imports as PENDING (a run that stopped mid-task: the task runs
// again, seed 004 "in-progress tasks resume"), FAILED as FAILED (run again), BLOCKED as
// BLOCKED_DCR (waits for a person, like DCR).
var markerStatus = map[string]commonv1.TaskStatus{
	"TODO":        commonv1.TaskStatus_TASK_STATUS_PENDING,
	"IN PROGRESS": commonv1.TaskStatus_TASK_STATUS_PENDING,
	"DONE":        commonv1.TaskStatus_TASK_STATUS_COMPLETED,
	"SKIPPED":     commonv1.TaskStatus_TASK_STATUS_SKIPPED,
	"FAILED":      commonv1.TaskStatus_TASK_STATUS_FAILED,
	"BLOCKED":     commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR,
	"DCR":         commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR,
}

// markerKey is the markerStatus key of a marker as written: upper case, "IN_PROGRESS" and
// "in-progress" as "IN PROGRESS".
func markerKey(m string) string {
	return strings.NewReplacer("_", " ", "-", " ").Replace(strings.ToUpper(m))
}

// Field labels, lower case, by what they set.
var fieldLabels = map[string]string{
	"status": "status", "state": "status",
	"files": "files", "file impacts": "files", "impacts": "files", "target files": "files",
	"file": "file", "main file": "file", "target file": "file",
	"depends on": "depends", "dependencies": "depends", "depends": "depends", "deps": "depends",
	"validation": "validation", "validation command": "validation", "validate": "validation",
	"expected": "expected", "expected result": "expected",
	"timeout": "timeout", "validation timeout": "timeout",
	"exit code": "exit code", "expected exit code": "exit code",
	"action": "action", "priority": "priority", "phase": "phase",
	"command": "command", "run": "command",
	"context": "context", "description": "context",
	"steps": "steps", "verification": "verification",
	"requirements":  "requirements",
	"code template": "template", "template": "template",
}

// mdBlock is where the lines that are not fields or steps go.
type mdBlock int

const (
	blockDescription mdBlock = iota
	blockFiles
	blockVerification
	blockRequirements
	blockTemplate
)

// mdTask is a task being read.
type mdTask struct {
	task         *commonv1.Task
	line         int
	description  []string
	verification []string
	template     []string
	inTemplate   bool // inside the code template's fence
	statusLine   int
	checked      int
	block        mdBlock
}

// ParseTasksMD reads a tasks.md in the pb-build shape with converge's field lines (see the
// grammar above and docs/tasks.md). Errors name the line.
func ParseTasksMD(content []byte) (*Document, error) {
	if err := checkUTF8(content); err != nil {
		return nil, err
	}
	p := &tasksMDParser{spec: &schedulerv1.TaskListSpec{}}
	for _, l := range splitLines(content) {
		if err := p.line(l); err != nil {
			return nil, err
		}
	}
	p.finish()
	if len(p.spec.GetTasks()) == 0 {
		return nil, errorf(1, `no task found: tasks are "### Task X.Y: name" headings`)
	}
	p.spec.Description = strings.TrimSpace(strings.Join(p.preamble, "\n"))
	sortWarnings(p.warnings)
	return &Document{Spec: p.spec, Warnings: p.warnings, TaskLines: p.lines}, nil
}

type tasksMDParser struct {
	spec     *schedulerv1.TaskListSpec
	warnings []Warning
	lines    []int
	phase    string
	cur      *mdTask
	preamble []string // description of the list: lines after the title, before any other heading
	inTitle  bool     // between the "# " title and the next heading
}

func (p *tasksMDParser) warn(line int, format string, args ...any) {
	p.warnings = append(p.warnings, Warning{Line: line, Message: fmt.Sprintf(format, args...)})
}

func (p *tasksMDParser) line(l mdLine) error {
	if level, text := heading(l); level > 0 && level <= 3 {
		p.finish()
		p.inTitle = false
		switch level {
		case 1:
			if p.spec.Name == "" {
				p.spec.Name = text
				p.inTitle = true
			}
		case 2:
			p.phase, _ = phaseName(text) // "" for a heading that is not a phase
		case 3:
			return p.startTask(l, text)
		}
		return nil
	}
	if p.cur == nil {
		if m := checkbox.FindStringSubmatch(l.text); m != nil && !l.fenced {
			return errorf(l.num, `checkbox step outside any "### Task X.Y: name" block`)
		}
		if p.inTitle {
			if headerField(p.spec, l) {
				return nil
			}
			p.preamble = append(p.preamble, l.text)
		}
		return nil
	}
	return p.taskLine(l)
}

// startTask begins the task of a "### " heading; a "### " heading that is not a task ends the
// tasks' blocks until the next one.
func (p *tasksMDParser) startTask(l mdLine, text string) error {
	if !strings.HasPrefix(strings.ToLower(text), "task") {
		return nil
	}
	m := taskHeading.FindStringSubmatch(text)
	if m == nil {
		if len(text) == 4 || text[4] == ' ' || text[4] == ':' {
			return errorf(l.num, `malformed task heading %q: want "### Task X.Y: name"`, text)
		}
		return nil // e.g. "### Tasks overview"
	}
	id, title := m[1], strings.TrimSpace(m[2])
	if !taskIDPattern.MatchString(id) {
		return errorf(l.num, `task id %q must start with a letter or digit and hold only letters, digits, ".", "_" and "-" (at most 64)`, id)
	}
	t := &mdTask{task: &commonv1.Task{Id: id, Phase: p.phase}, line: l.num}
	if mm := headingMarker.FindStringSubmatchIndex(title); mm != nil {
		t.task.Status = markerStatus[markerKey(title[mm[2]:mm[3]])]
		t.statusLine = l.num
		title = strings.TrimSpace(title[:mm[0]])
	}
	if title == "" {
		return errorf(l.num, "task %s has no name: want \"### Task %s: name\"", id, id)
	}
	t.task.Title = title
	p.cur = t
	return nil
}

func (p *tasksMDParser) taskLine(l mdLine) error {
	t := p.cur
	// The code template's fenced block.
	if t.block == blockTemplate {
		switch {
		case l.fence && !t.inTemplate:
			t.inTemplate = true
			return nil
		case l.fence && t.inTemplate:
			t.inTemplate = false
			t.block = blockDescription
			return nil
		case t.inTemplate:
			t.template = append(t.template, l.text)
			return nil
		case strings.TrimSpace(l.text) == "":
			return nil
		}
		t.block = blockDescription // no fence after the label: an empty template
	}
	if l.fenced {
		p.addText(l)
		return nil
	}
	if m := checkbox.FindStringSubmatch(l.text); m != nil {
		t.task.Steps = append(t.task.Steps, strings.TrimSpace(m[2]))
		if m[1] != " " {
			t.checked++
		}
		return nil
	}
	if level, text := heading(l); level >= 4 {
		if kind, ok := fieldLabels[strings.ToLower(strings.TrimSuffix(text, ":"))]; ok && isBlockField(kind) {
			return p.field(l, kind, "")
		}
		p.addText(l)
		return nil
	}
	if m := fieldLine.FindStringSubmatch(l.text); m != nil {
		label := strings.ToLower(strings.TrimSpace(m[1]))
		kind, ok := fieldLabels[label]
		if !ok {
			p.warn(l.num, "task %s: unknown field %q kept in the description", t.task.Id, m[1])
			p.addText(l)
			return nil
		}
		return p.field(l, kind, strings.TrimSpace(m[2]))
	}
	if t.block == blockFiles {
		if m := bullet.FindStringSubmatch(l.text); m != nil {
			return p.files(l, m[1])
		}
		if strings.TrimSpace(l.text) == "" {
			return nil
		}
		t.block = blockDescription
	}
	if t.block == blockRequirements {
		if m := bullet.FindStringSubmatch(l.text); m != nil {
			t.task.Requirements = append(t.task.Requirements, strings.TrimSpace(m[1]))
			return nil
		}
	}
	p.addText(l)
	return nil
}

func isBlockField(kind string) bool {
	switch kind {
	case "context", "steps", "verification", "requirements", "template", "files":
		return true
	}
	return false
}

// addText adds a line to the current text block.
func (p *tasksMDParser) addText(l mdLine) {
	t := p.cur
	if t.block == blockVerification {
		t.verification = append(t.verification, l.text)
		return
	}
	t.description = append(t.description, l.text)
}

// field applies one field line.
func (p *tasksMDParser) field(l mdLine, kind, value string) error {
	t := p.cur
	task := t.task
	t.block = blockDescription
	switch kind {
	case "status":
		if t.statusLine != 0 && t.statusLine != t.line {
			return errorf(l.num, "task %s: a second status line (first on line %d)", task.Id, t.statusLine)
		}
		t.statusLine = l.num
		m := statusMarker.FindStringSubmatch(value)
		if m == nil {
			p.warn(l.num, "task %s: status %q has no marker TODO, IN PROGRESS, DONE, SKIPPED, FAILED, BLOCKED or DCR; the steps decide", task.Id, value)
			task.Status = commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED
			return nil
		}
		task.Status = markerStatus[markerKey(m[1])]
	case "files":
		if value == "" {
			t.block = blockFiles
			return nil
		}
		for _, item := range splitList(value) {
			if err := p.files(l, item); err != nil {
				return err
			}
		}
	case "file":
		task.File = pathValue(value)
	case "depends":
		if isNone(value) {
			return nil
		}
		for _, item := range splitList(value) {
			task.DependsOn = append(task.DependsOn, depID(item))
		}
	case "validation":
		validation(task).Command = commandValue(value)
	case "expected":
		validation(task).Expected = value
	case "timeout":
		d, err := time.ParseDuration(stripMarkup(value))
		if err != nil || d <= 0 {
			return errorf(l.num, "task %s: timeout %q is not a duration like 90s or 2m", task.Id, value)
		}
		validation(task).Timeout = durationpb.New(d)
	case "exit code":
		n, err := strconv.Atoi(stripMarkup(value))
		if err != nil {
			return errorf(l.num, "task %s: exit code %q is not a number", task.Id, value)
		}
		validation(task).ExpectedExitCode = int32(max(min(n, 1<<20), -1))
	case "action":
		a, ok := commonv1.TaskAction_value["TASK_ACTION_"+strings.ToUpper(stripMarkup(value))]
		if !ok || a == 0 {
			return errorf(l.num, "task %s: action %q: want create, update, delete, test or run", task.Id, value)
		}
		task.Action = commonv1.TaskAction(a)
	case "priority":
		n, err := strconv.Atoi(stripMarkup(value))
		if err != nil {
			return errorf(l.num, "task %s: priority %q is not a number", task.Id, value)
		}
		task.Priority = int32(max(min(n, 1<<20), -1<<20))
	case "phase":
		task.Phase = stripMarkup(value)
	case "command":
		task.Command = commandValue(value)
	case "context":
		if value != "" {
			t.description = append(t.description, value)
		}
	case "steps":
		if value != "" {
			t.description = append(t.description, value)
		}
	case "verification":
		t.block = blockVerification
		if value != "" {
			t.verification = append(t.verification, value)
		}
	case "requirements":
		t.block = blockRequirements
		task.Requirements = append(task.Requirements, splitList(value)...)
	case "template":
		t.block = blockTemplate
	}
	return nil
}

// validation returns the task's validation, created if needed.
func validation(t *commonv1.Task) *commonv1.TaskValidation {
	if t.Validation == nil {
		t.Validation = &commonv1.TaskValidation{}
	}
	return t.Validation
}

// commandValue is a command field's value: its first code span, else the whole value.
func commandValue(v string) string {
	if spans := codeSpans(v); len(spans) > 0 {
		return spans[0]
	}
	return strings.TrimSpace(v)
}

// pathValue is a path written alone: its code span, else the value without markup.
func pathValue(v string) string {
	if spans := codeSpans(v); len(spans) > 0 {
		return spans[0]
	}
	return stripMarkup(v)
}

// fileAnnotation is the "(read)" / "(create, directory)" after a file.
var fileAnnotation = regexp.MustCompile(`\(([^()]*)\)\s*$`)

// files reads one file item of the task being read.
func (p *tasksMDParser) files(l mdLine, item string) error {
	im, msg := fileItem(item)
	if msg != "" {
		return errorf(l.num, "task %s: %s", p.cur.task.Id, msg)
	}
	p.cur.task.Files = append(p.cur.task.Files, im)
	return nil
}

// fileItem reads one file item: a path (in a code span or bare) and an optional annotation in
// parentheses naming its operation (create, update, delete, read) and kind (file, glob,
// directory). It returns what is wrong instead when the item cannot be read.
func fileItem(item string) (*commonv1.FileImpact, string) {
	im := &commonv1.FileImpact{}
	if m := fileAnnotation.FindStringSubmatchIndex(item); m != nil {
		for _, word := range strings.FieldsFunc(item[m[2]:m[3]], func(r rune) bool { return r == ',' || r == ' ' || r == ';' }) {
			switch strings.ToLower(word) {
			case "create", "new", "created":
				im.Operation = commonv1.FileOperation_FILE_OPERATION_CREATE
			case "update", "modify", "edit", "write", "change", "updated", "modified":
				im.Operation = commonv1.FileOperation_FILE_OPERATION_UPDATE
			case "delete", "remove", "deleted", "removed":
				im.Operation = commonv1.FileOperation_FILE_OPERATION_DELETE
			case "read", "read-only", "readonly":
				im.Operation = commonv1.FileOperation_FILE_OPERATION_READ
			case "file":
				im.Kind = commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE
			case "glob":
				im.Kind = commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB
			case "dir", "directory":
				im.Kind = commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY
			default:
				return nil, fmt.Sprintf("file annotation %q: want create, update, delete, read, file, glob or directory", word)
			}
		}
		item = item[:m[0]]
	}
	if im.Path = pathValue(item); im.Path == "" {
		return nil, "a file without a path"
	}
	return im, ""
}

// depID reads one dependency of a list: "1.1", "Task 1.1", "`T1.1`", "T1.1 (schema)".
func depID(item string) string {
	id := stripMarkup(item)
	if len(id) > 5 && strings.EqualFold(id[:5], "task ") {
		id = strings.TrimSpace(id[5:])
	}
	if i := strings.IndexAny(id, " \t("); i > 0 {
		id = id[:i]
	}
	return stripMarkup(id)
}

// finish completes the task being read, if any.
func (p *tasksMDParser) finish() {
	t := p.cur
	if t == nil {
		return
	}
	p.cur = nil
	task := t.task
	task.Description = trimBlock(t.description)
	if len(t.template) > 0 {
		task.CodeTemplate = strings.Join(t.template, "\n")
	}
	if v := trimBlock(t.verification); v != "" {
		val := validation(task)
		if val.Expected == "" {
			val.Expected = truncate(v, 2048)
			if len(v) > 2048 {
				p.warn(t.line, "task %s: verification text cut to 2048 bytes", task.Id)
			}
		}
		if val.Command == "" {
			if spans := codeSpans(v); len(spans) > 0 {
				val.Command = spans[0]
				p.warn(t.line, "task %s: validation command taken from Verification: %s", task.Id, spans[0])
			}
		}
	}
	// The marker decides; without one, the checkboxes do.
	unchecked := len(task.Steps) - t.checked
	switch {
	case task.Status == commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED && len(task.Steps) > 0 && unchecked == 0:
		task.Status = commonv1.TaskStatus_TASK_STATUS_COMPLETED
	case task.Status == commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED:
		task.Status = commonv1.TaskStatus_TASK_STATUS_PENDING
	case task.Status == commonv1.TaskStatus_TASK_STATUS_COMPLETED && unchecked > 0:
		p.warn(t.statusLine, "task %s: marked DONE with %d unchecked steps", task.Id, unchecked)
	}
	// The main file: the first exact file written, as listed.
	if task.File == "" {
		for _, f := range task.Files {
			if ResolveKind(f.Path, f.Kind) == commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE && f.Operation != commonv1.FileOperation_FILE_OPERATION_READ {
				task.File = f.Path
				break
			}
		}
	}
	if task.File == "" && len(task.Files) == 0 && task.Action != commonv1.TaskAction_TASK_ACTION_RUN {
		p.warn(t.line, "task %s declares no files: it may share a wave with any task", task.Id)
	}
	p.spec.Tasks = append(p.spec.Tasks, task)
	p.lines = append(p.lines, t.line)
}

// trimBlock joins lines, dropping leading and trailing blank lines and trailing "---" rules.
func trimBlock(lines []string) string {
	for len(lines) > 0 {
		last := strings.TrimSpace(lines[len(lines)-1])
		if last == "" || strings.Trim(last, "-") == "" || strings.Trim(last, "*") == "" {
			lines = lines[:len(lines)-1]
			continue
		}
		break
	}
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	return strings.Join(lines, "\n")
}

// truncate cuts s to at most n bytes at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
