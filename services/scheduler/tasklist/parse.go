// Package tasklist reads converge task lists and checks them as a whole.
//
// A task list document comes in one of four formats (docs/tasks.md):
//
//   - JSON: a converge.scheduler.v1.TaskListSpec in protobuf JSON ([ParseJSON]);
//   - YAML: the same shape in YAML ([ParseYAML]);
//   - tasks.md in the pb-build shape: "### Task X.Y: name" blocks with status markers, checkbox
//     steps, Context and Verification, plus converge's field lines for files, dependencies and
//     validation ([ParseTasksMD]); task status is written back by precise edits of one task's
//     block ([SetStatus]);
//   - an execution plan: phases → milestones → task tables with "Depends On"
//     ([ParseExecutionPlan]).
//
// Every parser returns a [Document] or a [*ParseError] naming the line. [Validate] then checks
// the list as a whole (ids, dependencies, cycles, paths); [Impacts] resolves a task's file
// impacts for the wave planner and the store.
package tasklist

import (
	"fmt"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Document is a parsed task list document.
type Document struct {
	// Spec is the task list the document describes. Name is the document's own (JSON/YAML name,
	// or the markdown "# " title); empty when it has none.
	Spec *schedulerv1.TaskListSpec
	// Warnings are non-fatal remarks, in line order.
	Warnings []Warning
	// TaskLines holds, per task of Spec, the 1-based line the task starts on (0 when unknown).
	TaskLines []int
}

// Warning is a non-fatal remark about a document.
type Warning struct {
	// Line is 1-based; 0 means the document as a whole.
	Line int
	// Message says what was noticed.
	Message string
}

// ParseError is a document that cannot be read as a task list. Its message names the line.
type ParseError struct {
	// Line is the 1-based line of the problem.
	Line int
	// Msg says what is wrong there.
	Msg string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func errorf(line int, format string, args ...any) *ParseError {
	return &ParseError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Parse reads content in format. An UNSPECIFIED or unknown format is an error.
func Parse(format schedulerv1.ImportFormat, content []byte) (*Document, error) {
	switch format {
	case schedulerv1.ImportFormat_IMPORT_FORMAT_JSON:
		return ParseJSON(content)
	case schedulerv1.ImportFormat_IMPORT_FORMAT_YAML:
		return ParseYAML(content)
	case schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD:
		return ParseTasksMD(content)
	case schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN:
		return ParseExecutionPlan(content)
	default:
		return nil, fmt.Errorf("tasklist: no parser for format %v", format)
	}
}
