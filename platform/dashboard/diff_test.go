package dashboard

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The task view's diff (issue 19 part 3): each line of git's unified diff gets its kind, and the
// page renders the file list and the lines escaped, additions and deletions coloured by class.
// The browser and greeter tests (cmd/converge/dashboard) show it with a real commit.

const sampleDiff = `diff --git a/greet.go b/greet.go
index 1111111..2222222 100644
--- a/greet.go
+++ b/greet.go
@@ -1,2 +1,2 @@
 package greet
-func A() {}
+func B() string { return "<script>alert(1)</script>" }
--- a/x
diff --git a/logo.png b/logo.png
new file mode 100644
index 0000000..3333333
Binary files /dev/null and b/logo.png differ
`

func TestDiffLinesKinds(t *testing.T) {
	t.Parallel()
	var kinds []string
	for _, l := range diffLines(sampleDiff) {
		kinds = append(kinds, l.Kind)
	}
	require.Equal(t, []string{"file", "head", "head", "head", "hunk", "", "del", "add", "del", "file", "head", "head", "head"}, kinds)
	lines := diffLines(sampleDiff)
	require.Equal(t, 0, lines[0].File)
	require.Equal(t, 1, lines[9].File)
	require.Equal(t, "--- a/x", lines[8].Text, "a deleted line that looks like a header is a deletion inside a hunk")
	require.Nil(t, diffLines(""))
}

func TestTaskViewRendersTheDiffEscaped(t *testing.T) {
	t.Parallel()
	conn, err := grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	d, err := New(Conns{Scheduler: conn}, Options{})
	require.NoError(t, err)
	a := &schedulerv1.Assignment{TaskId: "1.1", WaveNumber: 1, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED}
	diff := &schedulerv1.GetTaskDiffResponse{CommitSha: strings.Repeat("a", 40), ParentSha: strings.Repeat("b", 40), WaveNumber: 1,
		Subject: "Task 1.1: <b>bold</b>", Additions: 1, Deletions: 1, UnifiedDiff: sampleDiff, Truncated: true,
		Files: []*schedulerv1.FileChange{
			{Path: "greet.go", Status: schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_MODIFIED, Additions: 1, Deletions: 1},
			{Path: "logo<img>.png", Status: schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_ADDED, Binary: true},
		}}
	render := func(data map[string]any) string {
		w := httptest.NewRecorder()
		base := map[string]any{"Title": "Task 1.1", "Run": &schedulerv1.Execution{Id: "ex_1"}, "Task": "1.1",
			"Assignments": []*schedulerv1.Assignment{a}, "Current": a, "DiffLimit": taskDiffBytes}
		for k, v := range data {
			base[k] = v
		}
		d.render(w, httptest.NewRequest("GET", "/runs/ex_1/tasks/1.1", nil), "task", base)
		require.Equal(t, 200, w.Code)
		return w.Body.String()
	}
	body := render(map[string]any{"Diff": diff})
	for _, want := range []string{
		`<h2 id="diff-h">Diff of its commit</h2>`,
		`Task 1.1: &lt;b&gt;bold&lt;/b&gt;`,
		`<tr data-file="greet.go"><td><a href="#file-0"><code>greet.go</code></a></td><td>modified</td>`,
		`<code>logo&lt;img&gt;.png</code></a></td><td>added</td>`,
		`<span class="d-file" id="file-0">diff --git a/greet.go b/greet.go`,
		`<span class="d-file" id="file-1">diff --git a/logo.png b/logo.png`,
		`<span class="d-hunk">@@ -1,2 &#43;1,2 @@`,
		`<span class="d-del">-func A() {}`,
		`<span class="d-add">&#43;func B() string { return &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34; }`,
		`<span> package greet`,
		`id="diff-truncated"`, "512 KiB",
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "<script>alert(1)")
	require.NotContains(t, body, "<b>bold</b>")

	body = render(map[string]any{"DiffNote": "task 1.1 of execution ex_1 has no commit yet"})
	require.Contains(t, body, `<p class="empty" id="diff-note">task 1.1 of execution ex_1 has no commit yet</p>`)
	require.NotContains(t, body, `class="diff"`)
}
