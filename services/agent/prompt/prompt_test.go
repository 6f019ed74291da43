package prompt_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/agent/prompt"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// fullIn sets every part of the template.
func fullIn() prompt.In {
	return prompt.In{
		Task: &commonv1.Task{
			Id:          "2.1",
			Title:       "Add the users table",
			Action:      commonv1.TaskAction_TASK_ACTION_CREATE,
			File:        "db/migrations/002_users.sql",
			Phase:       "database",
			Description: "Users sign in with an email address.\nThe table is read by the API layer.",
			Files: []*commonv1.FileImpact{
				{Path: "db/migrations/002_users.sql", Operation: commonv1.FileOperation_FILE_OPERATION_CREATE},
				{Path: "db/schema.md"},
			},
			Requirements: []string{"id is a uuid primary key", "email is unique and not null", "  "},
			Steps:        []string{"Write the migration", "Run it against a scratch database\nand check the schema"},
			CodeTemplate: "CREATE TABLE users (\n  id uuid PRIMARY KEY\n);\n",
			Validation: &commonv1.TaskValidation{
				Command:  "sqlite3 :memory: < db/migrations/002_users.sql",
				Expected: "exit code 0, no output",
				Timeout:  durationpb.New(30 * time.Second),
			},
		},
		// Out of order on purpose: the prompt orders them by confidence.
		Gotchas: []prompt.Gotcha{
			{Pattern: "**/*.sql", Title: "Timestamps", Description: "Use timestamptz, never timestamp.", Confidence: 0.7},
			{Pattern: "db/migrations/*.sql", Title: "Idempotent migrations", Description: "Use CREATE TABLE IF NOT EXISTS.", Confidence: 0.9},
			{Pattern: "**/*.sql", Description: "Name constraints explicitly.", Confidence: 0.7},
		},
		Conventions: "## Database Conventions\n- snake_case table names\n- every table has created_at\n```sh\n# a comment, not a heading\n```",
		Spec:        "Accounts: a user has an email and a display name.",
		IdeaContext: "A small to-do app for teams.",
		Hints: []string{
			"validation exited 1: near \"PRIMARY\": syntax error",
			"validation exited 1:\nError: near line 3: no such table: accounts\n```sql\nSELECT 1;\n```",
		},
	}
}

func TestBuildGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   prompt.In
	}{
		{"full", fullIn()},
		{"minimal", prompt.In{Task: &commonv1.Task{Id: "T-1", Title: "Write the README", File: "README.md"}}},
		{"run", prompt.In{Task: &commonv1.Task{
			Id: "build", Title: "Build the binary", Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "make build",
			Validation: &commonv1.TaskValidation{Command: "test -x bin/app", ExpectedExitCode: 0},
		}}},
		{"trimmed", func() prompt.In {
			in := fullIn()
			in.IdeaContext = strings.Repeat("The idea is long. ", 200)
			in.Spec = strings.Repeat("The spec is longer. ", 300)
			in.MaxBytes = 3000
			return in
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := prompt.Build(tc.in)
			require.Equal(t, got, prompt.Build(tc.in), "deterministic")
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), got)
		})
	}
}

func TestBuildSections(t *testing.T) {
	t.Parallel()
	got := prompt.Build(fullIn())
	for _, want := range []string{
		"# BUILD TASK: 2.1",
		"CREATE file: db/migrations/002_users.sql",
		"- db/schema.md (UPDATE)",
		"## Requirements\n- id is a uuid primary key\n- email is unique and not null\n\n",
		"2. Run it against a scratch database\n  and check the schema",
		"## Gotchas (AVOID THESE MISTAKES)\n" + prompt.UntrustedPreamble + "\n\n- \"Idempotent migrations\": \"Use CREATE TABLE IF NOT EXISTS.\" (confidence 0.90, files db/migrations/*.sql)\n",
		"#### Database Conventions\n- snake_case table names",
		"```sh\n# a comment, not a heading\n```",
		"CREATE TABLE users (",
		"A small to-do app for teams.",
		"Accounts: a user has an email",
		"sqlite3 :memory: < db/migrations/002_users.sql",
		"Expected result: exit code 0, no output",
		"- Previous attempt failed: validation exited 1",
		"````\nvalidation exited 1:\nError: near line 3", // a longer fence than the hint's own
		"1. Generate ONLY the complete content of db/migrations/002_users.sql - no explanations",
	} {
		require.Contains(t, got, want)
	}
	// Sections come in the template's order.
	order := []string{"## Action", "## Task", "## Requirements", "## Steps", "## Gotchas", "## Project Conventions",
		"## Code Template", "## Context", "## Specification", "## Validation", "## Previous Attempts", "## Instructions"}
	last := -1
	for _, h := range order {
		i := strings.Index(got, h)
		require.Greater(t, i, last, h)
		last = i
	}
}

func TestBuildGotchaOrderDoesNotDependOnInput(t *testing.T) {
	t.Parallel()
	in := fullIn()
	a := prompt.Build(in)
	in.Gotchas[0], in.Gotchas[2] = in.Gotchas[2], in.Gotchas[0]
	in.Gotchas[1], in.Gotchas[2] = in.Gotchas[2], in.Gotchas[1]
	require.Equal(t, a, prompt.Build(in))
}

func TestBuildMaxBytes(t *testing.T) {
	t.Parallel()
	in := fullIn()
	in.IdeaContext = strings.Repeat("idea ", 2000)
	in.Spec = strings.Repeat("spec ", 2000)
	in.Conventions = strings.Repeat("conventions ", 1000)
	full := prompt.Build(prompt.In{Task: in.Task, Gotchas: in.Gotchas, Hints: in.Hints, Spec: in.Spec, IdeaContext: in.IdeaContext, Conventions: in.Conventions})

	for _, limit := range []int{20000, 8000, 3000, 2000, 1500, 200, 1} {
		in.MaxBytes = limit
		got := prompt.Build(in)
		require.LessOrEqual(t, len(got), limit)
		require.True(t, utf8.ValidString(got))
		require.Less(t, len(got), len(full))
	}

	// Context goes first: with room for everything else, the gotchas, hints and validation stay.
	in.MaxBytes = 3500
	got := prompt.Build(in)
	require.LessOrEqual(t, len(got), 3500)
	require.Contains(t, got, "bytes omitted to fit the prompt budget")
	require.Contains(t, got, "Use CREATE TABLE IF NOT EXISTS.")
	require.Contains(t, got, "Previous attempt failed: validation exited 1")
	require.Contains(t, got, "## Instructions\n1. Generate ONLY")
	require.Contains(t, got, "Expected result: exit code 0, no output")
	require.NotContains(t, got, strings.Repeat("idea ", 20))

	// A cap the prompt already fits changes nothing.
	small := fullIn()
	small.MaxBytes = 1 << 20
	require.Equal(t, prompt.Build(fullIn()), prompt.Build(small))
}

func TestBuildMultibyteTrim(t *testing.T) {
	t.Parallel()
	in := fullIn()
	in.IdeaContext = strings.Repeat("é日本", 3000)
	for limit := 2500; limit < 2600; limit++ {
		in.MaxBytes = limit
		got := prompt.Build(in)
		require.LessOrEqual(t, len(got), limit)
		require.True(t, utf8.ValidString(got), "limit %d", limit)
	}
}

func TestBuildNilTask(t *testing.T) {
	t.Parallel()
	got := prompt.Build(prompt.In{})
	require.Contains(t, got, "# BUILD TASK: unknown")
	require.Contains(t, got, "- No known gotchas for this file type")
}
