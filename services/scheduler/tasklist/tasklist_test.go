package tasklist

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// examplesDir holds the documented examples (docs/tasks.md); the tests read them.
const examplesDir = "../../../examples/tasks"

func readExample(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examplesDir, name))
	require.NoError(t, err)
	return b
}

func ids(spec *schedulerv1.TaskListSpec) []string {
	var out []string
	for _, t := range spec.GetTasks() {
		out = append(out, t.GetId())
	}
	return out
}

func TestTasksMDExample(t *testing.T) {
	t.Parallel()
	doc, err := ParseTasksMD(readExample(t, "habit-tracker.tasks.md"))
	require.NoError(t, err)
	spec := doc.Spec
	require.Equal(t, "Tasks: habit-tracker", spec.GetName())
	require.Contains(t, spec.GetDescription(), "A small habit tracker")
	require.Equal(t, []string{"1.1", "1.2", "1.3", "2.1", "2.2", "2.3"}, ids(spec))
	require.Equal(t, []int{9, 26, 45, 58, 74, 85}, doc.TaskLines)
	require.Empty(t, doc.Warnings)
	require.Empty(t, Validate(spec))

	t11 := spec.GetTasks()[0]
	require.Equal(t, "Create the schema", t11.GetTitle())
	require.Equal(t, "Database", t11.GetPhase())
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_COMPLETED, t11.GetStatus())
	require.Equal(t, "db/schema.sql", t11.GetFile())
	require.Equal(t, "sqlite3 :memory: < db/schema.sql", t11.GetValidation().GetCommand())
	require.Equal(t, "the schema applies to an empty database without errors.", t11.GetValidation().GetExpected())
	require.Equal(t, []string{"Write a failing test that applies the schema", "Write `db/schema.sql`", "Refactor"}, t11.GetSteps())
	require.Equal(t, "Habits and their check-ins. One table per entity; check-ins reference habits.", t11.GetDescription())

	t12 := spec.GetTasks()[1]
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_PENDING, t12.GetStatus())
	require.Equal(t, []string{"1.1"}, t12.GetDependsOn())
	require.True(t, proto.Equal(durationpb.New(120e9), t12.GetValidation().GetTimeout()))
	require.Len(t, t12.GetFiles(), 2)
	require.Equal(t, commonv1.FileOperation_FILE_OPERATION_READ, t12.GetFiles()[1].GetOperation())

	t21 := spec.GetTasks()[3]
	require.Equal(t, "API", t21.GetPhase())
	require.EqualValues(t, 10, t21.GetPriority())
	require.Equal(t, []string{"`GET /habits` lists habits, newest first", "`POST /habits` creates one and answers 201"}, t21.GetRequirements())

	t23 := spec.GetTasks()[5]
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_SKIPPED, t23.GetStatus())
	require.Equal(t, commonv1.TaskAction_TASK_ACTION_CREATE, t23.GetAction())
	require.Equal(t, []string{"2.1", "2.2"}, t23.GetDependsOn())
	require.Equal(t, "docs/api/", t23.GetFiles()[0].GetPath())
	require.Equal(t, commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY, t23.GetFiles()[0].GetKind())
	require.Empty(t, t23.GetFile(), "no exact file written")
}

func TestStructuredExamplesAgree(t *testing.T) {
	t.Parallel()
	fromJSON, err := ParseJSON(readExample(t, "habit-tracker.json"))
	require.NoError(t, err)
	fromYAML, err := ParseYAML(readExample(t, "habit-tracker.yaml"))
	require.NoError(t, err)
	require.True(t, proto.Equal(fromJSON.Spec, fromYAML.Spec), "JSON:\n%v\nYAML:\n%v", fromJSON.Spec, fromYAML.Spec)
	require.Empty(t, Validate(fromJSON.Spec))
	require.Equal(t, "1.1", fromYAML.Spec.GetTasks()[0].GetId(), "a plain 1.1 is the id \"1.1\"")
	require.NotZero(t, fromJSON.TaskLines[0])
	require.NotZero(t, fromYAML.TaskLines[0])
	require.Less(t, fromYAML.TaskLines[0], fromYAML.TaskLines[1])
}

func TestExecutionPlanExample(t *testing.T) {
	t.Parallel()
	doc, err := ParseExecutionPlan(readExample(t, "execution-plan.md"))
	require.NoError(t, err)
	spec := doc.Spec
	require.Equal(t, "Execution Plan: habit-tracker", spec.GetName())
	require.Equal(t, []string{"T1.1", "T1.2", "T1.3", "T1.4", "T2.1", "T2.2"}, ids(spec))
	require.Empty(t, Validate(spec))

	t11, t13, t21 := spec.GetTasks()[0], spec.GetTasks()[2], spec.GetTasks()[4]
	require.Equal(t, "Foundation", t11.GetPhase())
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_COMPLETED, t11.GetStatus(), "from the tracking table")
	require.Equal(t, "Milestone M1: Schema\nSpec Source: data-model §1", t11.GetDescription())
	require.Equal(t, []string{"T1.2"}, t13.GetDependsOn())
	require.Equal(t, "go test ./store/...", t13.GetValidation().GetCommand())
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_PENDING, t13.GetStatus())
	require.Equal(t, "API", t21.GetPhase())
	require.Equal(t, "api/routes.go", t21.GetFile())
	require.Equal(t, []Warning{{Line: 37, Message: `task T1.3: status "in_progress" imported as PENDING: it runs again`}}, doc.Warnings)
}

// Every parser's errors name the line, and say what is wrong there.
func TestParseErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		format schedulerv1.ImportFormat
		doc    string
		line   int
		msg    string
	}{
		{"json syntax", schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, "{\n  \"name\": \"x\",\n  \"tasks\": [}\n", 3, "syntax error"},
		{"json unknown field", schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, "{\n  \"name\": \"x\",\n  \"taks\": []\n}", 3, `unknown field "taks"`},
		{"json bad enum", schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, "{\"tasks\": [\n{\"id\": \"a\",\n\"action\": \"MOVE\"}]}", 3, "enum"},
		{"json cut short", schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, "{\n\"name\": \"x\"", 2, "unexpected EOF"},
		{"yaml syntax", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "name: x\ndescription: y\n tasks: []\n", 3, "mapping values are not allowed"},
		{"yaml unknown field", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "name: x\ntasks:\n  - id: a\n    titel: y\n", 4, `unknown field "titel" in Task`},
		{"yaml twice", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "name: x\nname: y\n", 2, `given twice (first on line 1)`},
		{"yaml bad enum", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "tasks:\n  - id: a\n    title: b\n    action: MOVE\n", 4, "enum"},
		{"yaml bad duration", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "tasks:\n  - id: a\n    validation:\n      timeout: soon\n", 4, "Duration"},
		{"yaml list expected", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "tasks:\n  id: a\n", 2, `"tasks" must be a list`},
		{"yaml bool", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "tasks: []\nname: x\ndone_criteria: [a]\n", 3, "must be a single value"},
		{"yaml two documents", schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "name: x\n---\nname: y\n", 2, "one YAML document"},
		{"tasks.md no task", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "# Title\n\nnothing\n", 1, "no task found"},
		{"tasks.md malformed heading", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "# T\n\n### Task 1.1 Create\n", 3, "malformed task heading"},
		{"tasks.md no name", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task 1.1:\n", 1, "has no name"},
		{"tasks.md stray checkbox", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "# T\n- [ ] orphan\n### Task 1: a\n", 2, "checkbox step outside"},
		{"tasks.md bad timeout", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task 1: a\n**Timeout:** soon\n", 2, "not a duration"},
		{"tasks.md bad action", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task 1: a\n\n**Action:** move\n", 3, `action "move"`},
		{"tasks.md bad annotation", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task 1: a\n**Files:** `a.go` (rename)\n", 2, `file annotation "rename"`},
		{"tasks.md two status lines", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task 1: a\n**Status:** TODO\n**Status:** DONE\n", 3, "a second status line (first on line 2)"},
		{"tasks.md bad id", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task ../x: a\n", 1, `task id "../x"`},
		{"tasks.md not utf-8", schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "### Task 1: a\n\xff\n", 2, "not valid UTF-8"},
		{"plan no task", schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, "# Plan\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", 1, "no task found"},
		{"plan row without description", schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, "| Task | Description |\n|---|---|\n| T1 | |\n", 3, "has no description"},
		{"plan unknown tracking row", schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, "| Task | Description |\n|---|---|\n| T1 | a |\n\n| Task | Status |\n|---|---|\n| T9 | done |\n", 7, `task "T9", which no task table defines`},
		{"plan bad priority", schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, "| Task | Description | Priority |\n|---|---|---|\n| T1 | a | high |\n", 3, `priority "high"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(c.format, []byte(c.doc))
			var perr *ParseError
			require.ErrorAs(t, err, &perr)
			require.Equal(t, c.line, perr.Line, "%v", err)
			require.Contains(t, perr.Msg, c.msg)
			require.True(t, strings.HasPrefix(err.Error(), "line "), err.Error())
		})
	}
}

func TestTasksMDDetails(t *testing.T) {
	t.Parallel()
	doc, err := ParseTasksMD([]byte(strings.Join([]string{
		"# Title",
		"## Phase 2",
		"### Task A-1: With a heading marker ⏭️ SKIPPED",
		"- **Depends on:** none",
		"**Files:**",
		"- `src/{a,b}.go` (create)",
		"- docs/ (read, directory)",
		"",
		"**Owner:** someone",
		"#### Code template",
		"```go",
		"### Task not-a-heading: inside a fence",
		"package main",
		"```",
		"",
		"### Task A-2: All steps checked, no marker",
		"**Verification:**",
		"Run `make check`; it prints OK.",
		"- [x] one",
		"- [X] two",
		"### Task A-3: Marker wins over boxes",
		"**Status:** DONE",
		"- [ ] left",
		"**Command:** `echo hi`",
		"**Action:** run",
		"### Notes",
		"Free text after a non-task heading.",
	}, "\n")))
	require.NoError(t, err)
	require.Equal(t, []string{"A-1", "A-2", "A-3"}, ids(doc.Spec))
	a1, a2, a3 := doc.Spec.GetTasks()[0], doc.Spec.GetTasks()[1], doc.Spec.GetTasks()[2]

	require.Equal(t, "With a heading marker", a1.GetTitle())
	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_SKIPPED, a1.GetStatus())
	require.Equal(t, "Phase 2", a1.GetPhase())
	require.Empty(t, a1.GetDependsOn())
	require.Len(t, a1.GetFiles(), 2)
	require.Equal(t, "src/{a,b}.go", a1.GetFiles()[0].GetPath())
	require.Equal(t, commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY, a1.GetFiles()[1].GetKind())
	require.Equal(t, commonv1.FileOperation_FILE_OPERATION_READ, a1.GetFiles()[1].GetOperation())
	require.Equal(t, "### Task not-a-heading: inside a fence\npackage main", a1.GetCodeTemplate())
	require.Equal(t, "**Owner:** someone", a1.GetDescription())

	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_COMPLETED, a2.GetStatus())
	require.Equal(t, "make check", a2.GetValidation().GetCommand())
	require.Equal(t, "Run `make check`; it prints OK.", a2.GetValidation().GetExpected())

	require.Equal(t, commonv1.TaskStatus_TASK_STATUS_COMPLETED, a3.GetStatus())
	require.Equal(t, "echo hi", a3.GetCommand())
	require.Equal(t, commonv1.TaskAction_TASK_ACTION_RUN, a3.GetAction())

	var msgs []string
	for _, w := range doc.Warnings {
		msgs = append(msgs, w.Message)
	}
	require.Equal(t, []string{
		`task A-1: unknown field "Owner" kept in the description`,
		"task A-2: validation command taken from Verification: make check",
		"task A-2 declares no files: it may share a wave with any task",
		"task A-3: marked DONE with 1 unchecked steps",
	}, msgs)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	task := func(id string, deps ...string) *commonv1.Task {
		return &commonv1.Task{Id: id, Title: "t " + id, DependsOn: deps}
	}
	cases := []struct {
		name  string
		spec  *schedulerv1.TaskListSpec
		field string
		desc  string
	}{
		{"duplicate id", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("1.1"), task("1.2"), task("1.1")}},
			"tasks[2].id", `duplicate task id "1.1" (first used by tasks[0])`},
		{"unknown dependency", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("1.1"), task("1.2", "1.1", "9.9")}},
			"tasks[1].depends_on[1]", `task "1.2" depends on unknown task "9.9"`},
		{"self dependency", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("1.1", "1.1")}},
			"tasks[0].depends_on[0]", `task "1.1" depends on itself`},
		{"cycle", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("1.1", "1.3"), task("1.2"), task("1.3", "1.2", "1.1")}},
			"tasks[0].depends_on[0]", "dependency cycle: 1.1 → 1.3 → 1.1"},
		{"longer cycle", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("a", "b"), task("b", "c"), task("c", "a"), task("d", "a")}},
			"tasks[0].depends_on[0]", "dependency cycle: a → b → c → a"},
		{"absolute file", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", File: "/etc/passwd"}}},
			"tasks[0].file", `"/etc/passwd" must be repository-relative: no leading "/"`},
		{"dot-dot file impact", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", Files: []*commonv1.FileImpact{{Path: "a.go"}, {Path: "src/../../x"}}}}},
			"tasks[0].files[1].path", `"src/../../x" must stay inside the repository: no ".." segment`},
		{"backslash", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", Files: []*commonv1.FileImpact{{Path: `src\a.go`}}}}},
			"tasks[0].files[0].path", `"src\\a.go" must use "/" separators, not "\"`},
		{"drive letter", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", File: "C:x"}}},
			"tasks[0].file", `"C:x" must be repository-relative: no drive letter ("C:")`},
		{"inside .git", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", File: ".git/config"}}},
			"tasks[0].file", `".git/config" must not be inside .git`},
		{"not clean", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", File: "a//b.go"}}},
			"tasks[0].file", `"a//b.go" must be clean: no empty segment ("a//b", a trailing "/")`},
		{"nested .git in any case", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", File: "sub/.GIT/hooks/pre-commit"}}},
			"tasks[0].file", `"sub/.GIT/hooks/pre-commit" must not be inside .git`},
		{"dot segment", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", File: "./a.go"}}},
			"tasks[0].file", `"./a.go" must be clean: no "." segment`},
		{"glob alternative leaves the repository", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", Files: []*commonv1.FileImpact{{Path: "{..,src}/*.go"}}}}},
			"tasks[0].files[0].path", `"{..,src}/*.go" must stay inside the repository: no ".." segment`},
		{"nested alternation", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", Files: []*commonv1.FileImpact{{Path: "src/{a,{b,c}}.go"}}}}},
			"tasks[0].files[0].path", `"src/{a,{b,c}}.go" must be a valid doublestar glob: classes closed and not empty, braces balanced and not nested`},
		{"bad glob", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{{Id: "1", Title: "x", Files: []*commonv1.FileImpact{{Path: "src/[a.go"}}}}},
			"tasks[0].files[0].path", `"src/[a.go" must be a valid doublestar glob: classes closed and not empty, braces balanced and not nested`},
		{"context file", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("1")}, Context: &schedulerv1.ProjectContext{SpecFile: "../spec.md"}},
			"context.spec_file", `"../spec.md" must stay inside the repository: no ".." segment`},
		{"trigger glob", &schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{task("1")}, Validation: &schedulerv1.ValidationLevels{UiTriggerGlobs: []string{"ui/{"}}},
			"validation.ui_trigger_globs[0]", `"ui/{" must be a valid doublestar glob: classes closed and not empty, braces balanced and not nested`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := Validate(c.spec)
			require.NotEmpty(t, v)
			require.Equal(t, c.field, v[0].Field)
			require.Equal(t, c.desc, v[0].Description)
		})
	}

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, Validate(&schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{
			task("1"), task("2", "1"),
			{Id: "3", Title: "x", DependsOn: []string{"1", "2"}, Files: []*commonv1.FileImpact{{Path: "docs/"}, {Path: "src/**/*.go"}, {Path: ".github/ci.yml"}}},
		}}))
	})

	t.Run("many violations are capped", func(t *testing.T) {
		t.Parallel()
		spec := &schedulerv1.TaskListSpec{}
		for range 150 {
			spec.Tasks = append(spec.Tasks, task("x"))
		}
		v := Validate(spec)
		require.Len(t, v, MaxViolations+1)
		require.Equal(t, "and 49 more violations", v[MaxViolations].Description)
	})

	t.Run("a cycle per component", func(t *testing.T) {
		t.Parallel()
		v := Validate(&schedulerv1.TaskListSpec{Tasks: []*commonv1.Task{
			task("a", "b"), task("b", "a"), task("c", "d"), task("d", "e"), task("e", "c"), task("f", "a"),
		}})
		require.Len(t, v, 2)
		require.Equal(t, "dependency cycle: a → b → a", v[0].Description)
		require.Equal(t, "tasks[2].depends_on[0]", v[1].Field)
		require.Equal(t, "dependency cycle: c → d → e → c", v[1].Description)
	})
}

func TestImpacts(t *testing.T) {
	t.Parallel()
	got := Impacts(&commonv1.Task{
		Action: commonv1.TaskAction_TASK_ACTION_DELETE,
		File:   "old.go",
		Files: []*commonv1.FileImpact{
			{Path: "a.go", Operation: commonv1.FileOperation_FILE_OPERATION_READ},
			{Path: "src/**/*.go"},
			{Path: "docs/"},
			{Path: "a.go", Operation: commonv1.FileOperation_FILE_OPERATION_CREATE}, // a write wins over a read
		},
	})
	require.Equal(t, []Impact{
		{Path: "a.go", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE, Operation: commonv1.FileOperation_FILE_OPERATION_CREATE},
		{Path: "src/**/*.go", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB, Operation: commonv1.FileOperation_FILE_OPERATION_UPDATE},
		{Path: "docs/", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY, Operation: commonv1.FileOperation_FILE_OPERATION_UPDATE},
		{Path: "old.go", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE, Operation: commonv1.FileOperation_FILE_OPERATION_DELETE, Inferred: true},
	}, got)
	require.Empty(t, Impacts(&commonv1.Task{Action: commonv1.TaskAction_TASK_ACTION_RUN}))
	// A main file listed in files is not added twice.
	require.Len(t, Impacts(&commonv1.Task{File: "a.go", Files: []*commonv1.FileImpact{{Path: "a.go"}}}), 1)
}
