package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Issue 15 part 1: a tasks.md's header sections reach the agent: imported, started and claimed,
// the assignment carries the spec file, conventions and idea-context files the header names (and
// the tasks file), which the agent's Prime step loads.
func TestImportedHeaderReachesClaim(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		md := "# Tasks: habits\n\n**Spec:** `specs/habits/design.md`\n" +
			"**Conventions:** `AGENTS.md` (API Conventions), `CLAUDE.md`\n**Context files:** `README.md`\n\n" +
			"## Phase 1: Database\n\n### Task 1.1: Schema\n\n**Status:** 🔴 TODO\n**Files:** `db/schema.sql`\n"
		res, err := b.client.ImportTaskList(t.Context(), &schedulerv1.ImportTaskListRequest{
			Format: schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, Content: []byte(md), SourcePath: "specs/habits/tasks.md"})
		require.NoError(t, err)
		b.start(t, res.GetTaskList().GetId(), nil)
		c := b.claim(t, "agent-ctx", 10*time.Second)
		require.NotNil(t, c)
		pc := c.GetContext()
		require.Equal(t, "specs/habits/design.md", pc.GetSpecFile())
		require.Equal(t, "specs/habits/tasks.md", pc.GetTasksFile())
		require.Len(t, pc.GetConventions(), 2)
		require.Equal(t, "AGENTS.md", pc.GetConventions()[0].GetPath())
		require.Equal(t, []string{"API Conventions"}, pc.GetConventions()[0].GetSections())
		require.Equal(t, []string{"README.md"}, pc.GetContextFiles())
	})
}
