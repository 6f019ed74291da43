package tasklist

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// The write-back's new markers (issue 15 part 8): IN PROGRESS, FAILED and BLOCKED are written by
// precise edits and read back as PENDING (runs again), FAILED (runs again) and BLOCKED_DCR (waits).
func TestWriteBackMarkersRoundTrip(t *testing.T) {
	t.Parallel()
	doc := readExample(t, "habit-tracker.tasks.md")
	for _, tc := range []struct {
		marker string
		want   commonv1.TaskStatus
	}{
		{Markers[commonv1.TaskStatus_TASK_STATUS_IN_PROGRESS], commonv1.TaskStatus_TASK_STATUS_PENDING},
		{Markers[commonv1.TaskStatus_TASK_STATUS_FAILED], commonv1.TaskStatus_TASK_STATUS_FAILED},
		{MarkerBlocked, commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR},
	} {
		got, err := SetMarker(doc, "1.3", tc.marker, false)
		require.NoError(t, err)
		start, end := block(t, doc, "1.3")
		want := strings.Replace(string(doc[start:end]), "**Status:** 🔴 TODO", "**Status:** "+tc.marker, 1)
		requireOnlyBlockChanged(t, doc, got, "1.3", want)
		parsed, err := ParseTasksMD(got)
		require.NoError(t, err)
		for _, task := range parsed.Spec.GetTasks() {
			if task.GetId() == "1.3" {
				require.Equal(t, tc.want, task.GetStatus(), tc.marker)
			}
		}
		// From one new marker to another, and back: only the marker moves.
		again, err := SetStatus(got, "1.3", commonv1.TaskStatus_TASK_STATUS_PENDING)
		require.NoError(t, err)
		require.Equal(t, string(doc), string(again))
	}
	for _, written := range []string{"**Status:** in_progress", "**Status:** 🟡 In-Progress"} {
		got := strings.Replace(string(doc), "**Status:** 🔴 TODO", written, 1)
		parsed, err := ParseTasksMD([]byte(got))
		require.NoError(t, err)
		require.Empty(t, parsed.Warnings)
	}
}

// The tracking table is appended once, then replaced in place; the tasks read the same, and every
// byte before the section is the document's.
func TestTrackingTableAppendedThenReplaced(t *testing.T) {
	t.Parallel()
	doc := readExample(t, "habit-tracker.tasks.md")
	before, err := ParseTasksMD(doc)
	require.NoError(t, err)
	rows := []TrackingRow{
		{TaskID: "1.1", Title: "Create the schema", Marker: Markers[commonv1.TaskStatus_TASK_STATUS_COMPLETED], Tries: 1, Commit: strings.Repeat("a", 40)},
		{TaskID: "1.2", Title: "Store | habits", Marker: Markers[commonv1.TaskStatus_TASK_STATUS_FAILED], Tries: 4, Note: "tests fail\nbadly"},
	}
	once := SetTracking(doc, "Run ex_1 (run 1): FAILED", rows)
	require.Equal(t, string(doc), string(once[:len(doc)]), "the document is untouched up to the section")
	require.True(t, strings.HasSuffix(string(doc), "\n") && !strings.HasSuffix(string(doc), "\n\n"))
	require.Equal(t, "\n"+`## Execution Tracking

Run ex_1 (run 1): FAILED

| Task | Title | Status | Tries | Commit | Note |
|------|-------|--------|-------|--------|------|
| 1.1 | Create the schema | 🟢 DONE | 1 | `+"`aaaaaaaaaaaa`"+` |  |
| 1.2 | Store \| habits | ❌ FAILED | 4 |  | tests fail badly |
`, string(once[len(doc):]), "one blank line, then the section")
	after, err := ParseTasksMD(once)
	require.NoError(t, err)
	require.Len(t, after.Spec.GetTasks(), len(before.Spec.GetTasks()))
	for i, task := range after.Spec.GetTasks() {
		require.True(t, proto.Equal(before.Spec.GetTasks()[i], task), task.GetId())
	}

	twice := SetTracking(once, "Run ex_2 (run 2): CONVERGED", rows[:1])
	require.Equal(t, string(doc), string(twice[:len(doc)]))
	require.Equal(t, 1, strings.Count(string(twice), TrackingHeading))
	require.Contains(t, string(twice), "Run ex_2 (run 2): CONVERGED")
	require.NotContains(t, string(twice), "1.2 |")
	require.Equal(t, string(twice), string(SetTracking(twice, "Run ex_2 (run 2): CONVERGED", rows[:1])), "idempotent")

	// A section in the middle keeps what follows it.
	mid := SetTracking([]byte("# Tasks: x\n\n## Execution Tracking\n\nold\n\n## Notes\n\nkeep me\n"), "new", nil)
	require.Equal(t, "# Tasks: x\n\n## Execution Tracking\n\nnew\n\n| Task | Title | Status | Tries | Commit | Note |\n|------|-------|--------|-------|--------|------|\n\n## Notes\n\nkeep me\n", string(mid))
}
