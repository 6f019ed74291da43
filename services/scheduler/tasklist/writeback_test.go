package tasklist

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// block returns the byte range of task id's block in doc: from its heading line to the next
// heading of level 1-3.
func block(t *testing.T, doc []byte, id string) (int, int) {
	t.Helper()
	start := bytes.Index(doc, []byte("### Task "+id+":"))
	require.GreaterOrEqual(t, start, 0)
	end := len(doc)
	for _, h := range []string{"\n### ", "\n## ", "\n# "} {
		if i := bytes.Index(doc[start+1:], []byte(h)); i >= 0 && start+1+i+1 < end {
			end = start + 1 + i + 1
		}
	}
	return start, end
}

// requireOnlyBlockChanged checks, byte for byte, that got equals doc outside task id's block and
// that the block became want.
func requireOnlyBlockChanged(t *testing.T, doc, got []byte, id, want string) {
	t.Helper()
	start, end := block(t, doc, id)
	tail := len(doc) - end
	require.Equal(t, string(doc[:start]), string(got[:start]), "bytes before the block")
	require.Equal(t, string(doc[end:]), string(got[len(got)-tail:]), "bytes after the block")
	require.Equal(t, want, string(got[start:len(got)-tail]))
}

func TestSetStatusEditsOneBlock(t *testing.T) {
	t.Parallel()
	doc := readExample(t, "habit-tracker.tasks.md")
	before, err := ParseTasksMD(doc)
	require.NoError(t, err)

	got, err := SetStatus(doc, "1.2", commonv1.TaskStatus_TASK_STATUS_COMPLETED)
	require.NoError(t, err)
	requireOnlyBlockChanged(t, doc, got, "1.2", `### Task 1.2: Store habits

**Status:** 🟢 DONE
**Files:** `+"`store/habits.go` (create), `db/schema.sql` (read)"+`
**Depends on:** 1.1
**Validation:** `+"`go test ./store/...`"+`
**Timeout:** 2m

**Context:** CRUD for habits on database/sql.

**Steps:**
- [x] RED: a failing test for create and list
- [x] GREEN: implement `+"`store/habits.go`"+`
- [x] REFACTOR

**Verification:** `+"`go test ./store/...`"+` passes.

---

`)
	// Read back: that task is done, every other task is exactly as before.
	after, err := ParseTasksMD(got)
	require.NoError(t, err)
	for i, task := range after.Spec.GetTasks() {
		if task.GetId() == "1.2" {
			require.Equal(t, commonv1.TaskStatus_TASK_STATUS_COMPLETED, task.GetStatus())
			continue
		}
		require.True(t, proto.Equal(before.Spec.GetTasks()[i], task), task.GetId())
	}
}

func TestSetStatusMarkers(t *testing.T) {
	t.Parallel()
	doc := readExample(t, "habit-tracker.tasks.md")

	t.Run("skipped back to pending leaves the boxes", func(t *testing.T) {
		t.Parallel()
		got, err := SetStatus(doc, "2.3", commonv1.TaskStatus_TASK_STATUS_PENDING)
		require.NoError(t, err)
		start, end := block(t, doc, "2.3")
		want := strings.Replace(string(doc[start:end]), "**Status:** ⏭️ SKIPPED", "**Status:** 🔴 TODO", 1)
		requireOnlyBlockChanged(t, doc, got, "2.3", want)
	})

	t.Run("same status, same bytes", func(t *testing.T) {
		t.Parallel()
		got, err := SetStatus(doc, "1.1", commonv1.TaskStatus_TASK_STATUS_COMPLETED)
		require.NoError(t, err)
		require.Equal(t, string(doc), string(got))
	})

	t.Run("design change request", func(t *testing.T) {
		t.Parallel()
		got, err := SetStatus(doc, "1.3", commonv1.TaskStatus_TASK_STATUS_BLOCKED_DCR)
		require.NoError(t, err)
		start, end := block(t, doc, "1.3")
		want := strings.Replace(string(doc[start:end]), "**Status:** 🔴 TODO", "**Status:** 🛑 DCR", 1)
		requireOnlyBlockChanged(t, doc, got, "1.3", want)
	})

	t.Run("no status marker to set", func(t *testing.T) {
		t.Parallel()
		_, err := SetStatus(doc, "1.3", commonv1.TaskStatus_TASK_STATUS_UNSPECIFIED)
		require.ErrorContains(t, err, "no marker")
	})

	t.Run("unknown task", func(t *testing.T) {
		t.Parallel()
		_, err := SetStatus(doc, "9.9", commonv1.TaskStatus_TASK_STATUS_COMPLETED)
		require.ErrorIs(t, err, ErrTaskNotFound)
	})
}

func TestSetStatusShapes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, doc, id string
		status        commonv1.TaskStatus
		want          string
	}{
		{
			name:   "a marker without emoji keeps its style",
			doc:    "### Task 1: a\n**Status:** TODO (blocked on review)\n- [ ] x\n",
			id:     "1",
			status: commonv1.TaskStatus_TASK_STATUS_COMPLETED,
			want:   "### Task 1: a\n**Status:** DONE (blocked on review)\n- [x] x\n",
		},
		{
			name:   "a status without a marker is replaced",
			doc:    "### Task 1: a\n- **Status**: not started\n",
			id:     "1",
			status: commonv1.TaskStatus_TASK_STATUS_SKIPPED,
			want:   "### Task 1: a\n- **Status**: ⏭️ SKIPPED\n",
		},
		{
			name:   "no status line: one is inserted after the heading, CRLF kept",
			doc:    "# T\r\n### Task 1: a\r\n- [ ] x\r\n### Task 2: b\r\n- [ ] y\r\n",
			id:     "1",
			status: commonv1.TaskStatus_TASK_STATUS_COMPLETED,
			want:   "# T\r\n### Task 1: a\r\n**Status:** 🟢 DONE\r\n- [x] x\r\n### Task 2: b\r\n- [ ] y\r\n",
		},
		{
			name:   "a heading that is the last line",
			doc:    "### Task 1: a",
			id:     "1",
			status: commonv1.TaskStatus_TASK_STATUS_COMPLETED,
			want:   "### Task 1: a\n**Status:** 🟢 DONE",
		},
		{
			name:   "a marker at the end of the heading",
			doc:    "### Task 2.2: Parser ⏭️ SKIPPED\n- [ ] x\n",
			id:     "2.2",
			status: commonv1.TaskStatus_TASK_STATUS_PENDING,
			want:   "### Task 2.2: Parser 🔴 TODO\n- [ ] x\n",
		},
		{
			name:   "fenced checkboxes and headings are left alone",
			doc:    "### Task 1: a\n**Status:** 🔴 TODO\n```md\n- [ ] example\n### Task 2: not a task\n```\n- [ ] real\n### Task 2: b\n- [ ] other\n",
			id:     "1",
			status: commonv1.TaskStatus_TASK_STATUS_COMPLETED,
			want:   "### Task 1: a\n**Status:** 🟢 DONE\n```md\n- [ ] example\n### Task 2: not a task\n```\n- [x] real\n### Task 2: b\n- [ ] other\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := SetStatus([]byte(c.doc), c.id, c.status)
			require.NoError(t, err)
			require.Equal(t, c.want, string(got))
			doc, err := ParseTasksMD(got)
			require.NoError(t, err)
			for _, task := range doc.Spec.GetTasks() {
				if task.GetId() == c.id {
					require.Equal(t, c.status, task.GetStatus())
				}
			}
		})
	}
}
