package dashboard

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// taskDiffBytes is the unified diff a task view shows at most (the API answers up to 3 MiB).
const taskDiffBytes = 512 << 10

// taskDiff reads the diff of the task's commit (GetTaskDiff). A task without a commit, a run
// without a repository or a repository that cannot be read is said on the page (note), not an
// error of the page.
func (d *Dashboard) taskDiff(ctx context.Context, execution, task string) (res *schedulerv1.GetTaskDiffResponse, note string) {
	res, err := d.sched.GetTaskDiff(ctx, &schedulerv1.GetTaskDiffRequest{ExecutionId: execution, TaskId: task, MaxBytes: taskDiffBytes})
	if err != nil {
		if status.Code(err) == codes.FailedPrecondition {
			return nil, status.Convert(err).Message()
		}
		return nil, errText(err)
	}
	return res, ""
}

// diffLine is one line of a unified diff with its kind: "add", "del", "hunk" (@@), "file" (the
// "diff --git" line that starts a file, with the file's index for its anchor), "head" (the
// file's header lines) or "" (context).
type diffLine struct {
	Kind, Text string
	File       int
}

// diffLines splits a unified diff (git diff-tree -p) into lines with their kinds; the template
// escapes their text.
func diffLines(diff string) []diffLine {
	diff = strings.TrimSuffix(diff, "\n")
	if diff == "" {
		return nil
	}
	lines := strings.Split(diff, "\n")
	out := make([]diffLine, 0, len(lines))
	file, inHeader := -1, false
	for _, l := range lines {
		kind := ""
		switch {
		case strings.HasPrefix(l, "diff --git "):
			file++
			kind, inHeader = "file", true
		case strings.HasPrefix(l, "@@"):
			kind, inHeader = "hunk", false
		case inHeader:
			kind = "head" // index, mode, ---/+++ and "Binary files … differ" lines
		case strings.HasPrefix(l, "+"):
			kind = "add"
		case strings.HasPrefix(l, "-"):
			kind = "del"
		}
		out = append(out, diffLine{Kind: kind, Text: l, File: file})
	}
	return out
}

// fileStatus is a file change's status as git's letter and a word: A added, M modified, …
func fileStatus(s schedulerv1.FileChangeStatus) string {
	switch s {
	case schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_ADDED:
		return "added"
	case schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_MODIFIED:
		return "modified"
	case schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_DELETED:
		return "deleted"
	case schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_TYPE_CHANGED:
		return "type changed"
	}
	return "changed"
}

// kib is a byte count in KiB, for the truncation note.
func kib(n int) string { return strconv.Itoa(n>>10) + " KiB" }
