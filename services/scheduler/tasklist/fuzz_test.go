package tasklist

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The fuzz targets hold every parser to: never panic; an error is a *ParseError whose line is
// in the document; a document that parses gives a spec that marshals (valid UTF-8), one line
// per task, and that Validate and Impacts accept without panicking.
//
//	go test -run '^$' -fuzz FuzzParseTasksMD -fuzztime 30s -fuzzminimizetime 5s ./tasklist

func checkParse(t *testing.T, content []byte, doc *Document, err error) {
	t.Helper()
	if err != nil {
		var perr *ParseError
		require.True(t, errors.As(err, &perr), "not a ParseError: %v", err)
		require.GreaterOrEqual(t, perr.Line, 1, "%v", err)
		require.LessOrEqual(t, perr.Line, lineCount(content)+1, "%v", err)
		return
	}
	_, merr := proto.Marshal(doc.Spec)
	require.NoError(t, merr)
	require.Len(t, doc.TaskLines, len(doc.Spec.GetTasks()))
	for _, w := range doc.Warnings {
		require.GreaterOrEqual(t, w.Line, 0)
		require.LessOrEqual(t, w.Line, lineCount(content)+1)
	}
	Validate(doc.Spec)
	for _, task := range doc.Spec.GetTasks() {
		Impacts(task)
	}
}

// seeds adds the examples and the test documents of a format.
func seeds(f *testing.F, format schedulerv1.ImportFormat, examples ...string) {
	for _, name := range examples {
		b, err := os.ReadFile(filepath.Join(examplesDir, name))
		require.NoError(f, err)
		f.Add(b)
	}
	for _, s := range []string{"", "\n", "\xff", "# T\n### Task 1: a\n", "{}", "tasks: []", "| Task | Description |\n|---|---|\n| T1 | a |\n"} {
		f.Add([]byte(s))
	}
	_ = format
}

func FuzzParseTasksMD(f *testing.F) {
	seeds(f, schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, "habit-tracker.tasks.md")
	f.Add([]byte("### Task A-1: x ⏭️ SKIPPED\n**Files:**\n- `a/{b,c}.go` (read, glob)\n#### Code template\n```\n### Task 2: y\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		doc, err := ParseTasksMD(content)
		checkParse(t, content, doc, err)
	})
}

func FuzzParseExecutionPlan(f *testing.F) {
	seeds(f, schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, "execution-plan.md")
	f.Add([]byte("| Task | Description | Depends On |\n|:--|--:|---|\n| `T1` | a \\| b | T0 |\n| T2 | c |\n"))
	// Gates and their sign-off (issue 15 part 9).
	f.Add([]byte(twoPhasePlan))
	f.Add([]byte(signoffPlan))
	f.Add([]byte("## Phase 1: A\n**Sign-off:** required\n| Task | Description |\n|---|---|\n| T1 | a |\n"))
	f.Add([]byte("## P\n**Gate:** `x`\n**Sign off**: maybe\n### M1\n**Sign-off:** no\n| Task | Description |\n|---|---|\n| T1 | a |\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		doc, err := ParseExecutionPlan(content)
		checkParse(t, content, doc, err)
	})
}

func FuzzParseJSON(f *testing.F) {
	seeds(f, schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, "habit-tracker.json")
	f.Fuzz(func(t *testing.T, content []byte) {
		doc, err := ParseJSON(content)
		checkParse(t, content, doc, err)
	})
}

func FuzzParseYAML(f *testing.F) {
	seeds(f, schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, "habit-tracker.yaml")
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("tasks:\n  - &t {id: a, title: b}\n  - *t\nname: !!binary aGk=\n"))
	f.Fuzz(func(t *testing.T, content []byte) {
		doc, err := ParseYAML(content)
		checkParse(t, content, doc, err)
	})
}

// FuzzSetStatus: on any document that parses, setting the status of its first task (TODO, DONE,
// SKIPPED or DCR, by the document's length) succeeds, leaves the bytes before the task's heading
// alone, and reads back as that status with the same task ids.
func FuzzSetStatus(f *testing.F) {
	f.Add(readExampleF(f, "habit-tracker.tasks.md"))
	f.Add([]byte("### Task 1: a\r\n**Status:** x TODO\r\n- [ ] s\r\n"))
	f.Add([]byte("### Task 1: a ✅ DONE"))
	f.Fuzz(func(t *testing.T, content []byte) {
		doc, err := ParseTasksMD(content)
		if err != nil {
			return
		}
		id := doc.Spec.GetTasks()[0].GetId()
		status := []commonv1.TaskStatus{
			commonv1.TaskStatus_TASK_STATUS_COMPLETED, commonv1.TaskStatus_TASK_STATUS_PENDING,
			commonv1.TaskStatus_TASK_STATUS_SKIPPED, commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR,
		}[len(content)%4]
		got, err := SetStatus(content, id, status)
		require.NoError(t, err)
		head := -1
		for _, l := range splitLines(content) {
			if level, text := heading(l); level == 3 {
				if m := taskHeading.FindStringSubmatch(text); m != nil && m[1] == id {
					head = l.start
					break
				}
			}
		}
		require.GreaterOrEqual(t, head, 0)
		require.Equal(t, content[:head], got[:head], "bytes before the task's heading")
		again, err := ParseTasksMD(got)
		require.NoError(t, err)
		require.Equal(t, ids(doc.Spec), ids(again.Spec))
		for _, task := range again.Spec.GetTasks() {
			if task.GetId() == id {
				require.Equal(t, status, task.GetStatus())
				break
			}
		}
	})
}

func readExampleF(f *testing.F, name string) []byte {
	b, err := os.ReadFile(filepath.Join(examplesDir, name))
	require.NoError(f, err)
	return b
}
