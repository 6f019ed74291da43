package tasklist

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// twoPhasePlan is an execution plan with a gate on milestone M1 and one on phase 1.
const twoPhasePlan = "# Execution Plan: gated\n\n## Phase 1: Foundation\n\n**Gate:** `go vet ./...`\n\n### M1: Schema\n\n**Gate:** `test -f db/schema.sql`\n\n" +
	"| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T1.1 | Write the schema | — | `db/schema.sql` |\n| T1.2 | Seed data | T1.1 | `db/seed.sql` |\n\n" +
	"### M2: Store\n\n| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T1.3 | Store habits | T1.1 | `store/habits.go` |\n\n" +
	"## Phase 2: API\n\n| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T2.1 | Routes | T1.3 | `api/routes.go` |\n"

// Issue 15 part 9: a plan's milestone and phase gates become GATE- tasks between their scope and
// what follows it.
func TestExecutionPlanGates(t *testing.T) {
	t.Parallel()
	doc, err := ParseExecutionPlan([]byte(twoPhasePlan))
	require.NoError(t, err)
	var ids []string
	byID := map[string]*commonv1.Task{}
	for _, task := range doc.Spec.GetTasks() {
		ids = append(ids, task.GetId())
		byID[task.GetId()] = task
	}
	require.Equal(t, []string{"T1.1", "T1.2", "GATE-M1", "T1.3", "GATE-P1", "T2.1"}, ids)
	require.Len(t, doc.TaskLines, len(ids))

	m1 := byID["GATE-M1"]
	require.True(t, IsGate(m1))
	require.Equal(t, "Gate of milestone M1: Schema", m1.GetTitle())
	require.Equal(t, "test -f db/schema.sql", m1.GetCommand())
	require.Equal(t, []string{"T1.1", "T1.2"}, m1.GetDependsOn())
	require.Equal(t, 9, doc.TaskLines[2], "the gate's line")

	p1 := byID["GATE-P1"]
	require.Equal(t, "Gate of Phase 1: Foundation", p1.GetTitle())
	require.Equal(t, "go vet ./...", p1.GetCommand())
	require.Equal(t, []string{"GATE-M1", "T1.1", "T1.2", "T1.3"}, p1.GetDependsOn(), "the milestone gate comes first")
	require.Equal(t, "Foundation", p1.GetPhase())

	require.Equal(t, []string{"GATE-M1", "T1.1"}, byID["T1.3"].GetDependsOn(), "M2 waits for M1's gate")
	require.Equal(t, []string{"GATE-M1", "GATE-P1", "T1.3"}, byID["T2.1"].GetDependsOn(), "phase 2 waits for phase 1's gate")
	for _, w := range doc.Warnings {
		require.NotContains(t, w.Message, "GATE-", "a gate declares no files on purpose")
	}
	require.Empty(t, Validate(doc.Spec))

	_, err = ParseExecutionPlan([]byte("# Execution Plan: x\n\n## Phase 1: A\n\n**Gate:**\n\n| Task | Description |\n|---|---|\n| T1 | one |\n"))
	require.ErrorContains(t, err, "line 5: gate without a command")
}

// signoffPlan is twoPhasePlan with a sign-off on phase 1's gate (the line after the gate's) and
// none on milestone M1's.
const signoffPlan = "# Execution Plan: gated\n\n## Phase 1: Foundation\n\n**Gate:** `go vet ./...`\n**Sign-off:** required\n\n### M1: Schema\n\n**Gate:** `test -f db/schema.sql`\n**Sign-off:** no\n\n" +
	"| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T1.1 | Write the schema | — | `db/schema.sql` |\n\n" +
	"## Phase 2: API\n\n| Task | Description | Depends On | Files |\n|------|-------------|------------|-------|\n" +
	"| T2.1 | Routes | T1.1 | `api/routes.go` |\n"

// Issue 15 part 9: a "**Sign-off:** required" line makes its phase's (or milestone's) gate
// require a person's sign-off; a line without a gate, or with another value, is an error naming
// its line; requires_signoff on a task that is not a gate is refused.
func TestExecutionPlanGateSignoff(t *testing.T) {
	t.Parallel()
	doc, err := ParseExecutionPlan([]byte(signoffPlan))
	require.NoError(t, err)
	byID := map[string]*commonv1.Task{}
	var ids []string
	for _, task := range doc.Spec.GetTasks() {
		ids = append(ids, task.GetId())
		byID[task.GetId()] = task
	}
	require.Equal(t, []string{"T1.1", "GATE-M1", "GATE-P1", "T2.1"}, ids)
	require.True(t, byID["GATE-P1"].GetRequiresSignoff())
	require.Contains(t, byID["GATE-P1"].GetDescription(), "converge signoff EXECUTION GATE-P1 --pass|--fail")
	require.False(t, byID["GATE-M1"].GetRequiresSignoff())
	require.False(t, byID["T1.1"].GetRequiresSignoff())
	require.Empty(t, Validate(doc.Spec))

	// The sign-off line may come before the gate's, in other spellings.
	for _, line := range []string{"**Signoff:** yes", "- **Sign off**: **required**", "**Gate sign-off:** true"} {
		doc, err := ParseExecutionPlan([]byte("# Execution Plan: x\n\n## Phase 1: A\n\n" + line + "\n**Gate:** `true`\n\n| Task | Description |\n|---|---|\n| T1 | one |\n\n## Phase 2: B\n\n| Task | Description |\n|---|---|\n| T2 | two |\n"))
		require.NoError(t, err, line)
		require.Equal(t, "GATE-P1", doc.Spec.GetTasks()[1].GetId(), line)
		require.True(t, doc.Spec.GetTasks()[1].GetRequiresSignoff(), line)
	}

	for _, c := range []struct{ doc, err string }{
		{"# Execution Plan: x\n\n## Phase 1: A\n\n**Sign-off:** required\n\n| Task | Description |\n|---|---|\n| T1 | one |\n",
			"line 5: sign-off without a gate"},
		{"# Execution Plan: x\n\n## Phase 1: A\n\n**Gate:** `true`\n\n### M1: a\n\n**Sign-off:** required\n\n| Task | Description |\n|---|---|\n| T1 | one |\n",
			"line 9: sign-off without a gate"}, // the phase's gate is not the milestone's
		{"# Execution Plan: x\n\n## Phase 1: A\n\n**Gate:** `true`\n**Sign-off:** maybe\n\n| Task | Description |\n|---|---|\n| T1 | one |\n",
			`line 6: sign-off "maybe": want required`},
	} {
		_, err := ParseExecutionPlan([]byte(c.doc))
		require.ErrorContains(t, err, c.err)
	}

	doc.Spec.Tasks[0].RequiresSignoff = true
	vs := Validate(doc.Spec)
	require.Len(t, vs, 1)
	require.Equal(t, "tasks[0].requires_signoff", vs[0].Field)
	require.Contains(t, vs[0].Description, `task "T1.1" is not a gate`)
}
