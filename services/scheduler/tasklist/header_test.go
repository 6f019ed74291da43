package tasklist

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The header field lines of a tasks.md and of an execution plan fill the project context
// (issue 15 part 1): spec file, conventions with their sections, idea-context files.
func TestHeaderFillsProjectContext(t *testing.T) {
	t.Parallel()
	want := &schedulerv1.ProjectContext{
		SpecFile: "specs/habits/design.md",
		Conventions: []*schedulerv1.ConventionsSource{
			{Path: "AGENTS.md", Sections: []string{"Database Conventions", "API Conventions"}},
			{Path: "CLAUDE.md"},
		},
		ContextFiles: []string{"README.md", "docs/problem-solution.md"},
	}
	header := "**Spec:** `specs/habits/design.md`\n" +
		"**Conventions:** `AGENTS.md` (Database Conventions, API Conventions), `CLAUDE.md`\n" +
		"**Context files:** `README.md`, `docs/problem-solution.md`\n"

	doc, err := ParseTasksMD([]byte("# Tasks: habits\n\nA habit tracker.\n\n" + header +
		"\n## Phase 1: Database\n\n### Task 1.1: Schema\n\n**Status:** 🔴 TODO\n**Files:** `db/schema.sql`\n"))
	require.NoError(t, err)
	require.True(t, proto.Equal(want, doc.Spec.GetContext()), "%v", doc.Spec.GetContext())
	require.Equal(t, "A habit tracker.", doc.Spec.GetDescription(), "header lines are not description")
	require.Empty(t, Validate(doc.Spec))

	plan, err := ParseExecutionPlan([]byte("# Execution Plan: habits\n\n" + header +
		"\n## Phase 1: Foundation\n\n| Task | Description | Files |\n|---|---|---|\n| T1.1 | Schema | `db/schema.sql` |\n"))
	require.NoError(t, err)
	require.True(t, proto.Equal(want, plan.Spec.GetContext()), "%v", plan.Spec.GetContext())

	// No header: no context; "none" is no item; a task's own **Context:** stays the task's.
	doc, err = ParseTasksMD([]byte("# T\n\n**Conventions:** none\n\n### Task 1: A\n\n**Context:** `README.md`\n"))
	require.NoError(t, err)
	require.Empty(t, doc.Spec.GetContext().GetConventions())
	require.Empty(t, doc.Spec.GetContext().GetContextFiles())
	require.Contains(t, doc.Spec.GetTasks()[0].GetDescription(), "README.md")

	// A path that leaves the repository is refused by Validate, naming the field.
	doc, err = ParseTasksMD([]byte("# T\n\n**Spec:** `../secret.md`\n\n### Task 1: A\n"))
	require.NoError(t, err)
	v := Validate(doc.Spec)
	require.NotEmpty(t, v)
	require.Equal(t, "context.spec_file", v[0].Field)
}
