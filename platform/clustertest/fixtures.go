package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// GitRepo makes a git repository (in a temporary directory) with one commit on main to build in.
func GitRepo(tb TB) string {
	tb.Helper()
	dir := tb.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			tb.Fatalf("clustertest: git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("# built by converge\n"), 0o644); err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
	git("add", "README.md")
	git("commit", "-q", "-m", "initial")
	return dir
}

// Git runs git in dir and answers its output, trimmed.
func Git(tb TB, dir string, args ...string) string {
	tb.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		tb.Fatalf("clustertest: git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// LayeredTaskID is the id of task i of Layered.
func LayeredTaskID(i int) string { return fmt.Sprintf("t%03d", i) }

// LayeredTaskTitle is the title of task i of Layered.
func LayeredTaskTitle(i int) string { return fmt.Sprintf("write out/%03d.txt", i) }

// LayeredCommit is the subject of the commit task i of Layered makes on the run branch.
func LayeredCommit(i int) string {
	return fmt.Sprintf("Task %s: %s", LayeredTaskID(i), LayeredTaskTitle(i))
}

// Layered is a list of n tasks on repo in layers of ten: task i sleeps, writes out/i.txt and
// depends on task i-10; Done is every file there (AUTO_VERIFY).
func Layered(name, repo string, n int, sleep string) *schedulerv1.TaskListSpec {
	return LayeredWidth(name, repo, n, 10, sleep)
}

// LayeredWidth is Layered in layers of width: task i depends on task i-width.
func LayeredWidth(name, repo string, n, width int, sleep string) *schedulerv1.TaskListSpec {
	spec := &schedulerv1.TaskListSpec{Name: name, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"},
		DoneCriteria: fmt.Sprintf("## F1: every file is there\nTag: AUTO_VERIFY\n```check\ncommand:\n  shell: test \"$(ls out | wc -l)\" -eq %d\n```\n", n)}
	for i := range n {
		t := &commonv1.Task{Id: LayeredTaskID(i), Title: LayeredTaskTitle(i), File: fmt.Sprintf("out/%03d.txt", i),
			Action:     commonv1.TaskAction_TASK_ACTION_CREATE,
			Command:    fmt.Sprintf("mkdir -p out && sleep %s && echo %d > out/%03d.txt", sleep, i, i),
			Validation: &commonv1.TaskValidation{Command: fmt.Sprintf("test -s out/%03d.txt", i)}}
		if i >= width {
			t.DependsOn = []string{LayeredTaskID(i - width)}
		}
		spec.Tasks = append(spec.Tasks, t)
	}
	return spec
}

// Ended reports whether the execution has ended (completed, failed or cancelled).
func Ended(e *schedulerv1.Execution) bool {
	switch e.GetStatus() {
	case schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
		schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED:
		return true
	}
	return false
}

// ExecutionLog reads the execution's whole log (of the given event types; none: all) by
// GetExecutionLog pages, the cursor being a page's last seq.
func ExecutionLog(ctx context.Context, c schedulerv1.SchedulerServiceClient, id string, types ...commonv1.EventType) ([]*commonv1.LogEntry, error) {
	var out []*commonv1.LogEntry
	after := int64(0)
	for {
		res, err := c.GetExecutionLog(ctx, &schedulerv1.GetExecutionLogRequest{ExecutionId: id, AfterSeq: after, Limit: 500, EventTypes: types})
		if err != nil {
			return out, err
		}
		out = append(out, res.GetEntries()...)
		if !res.GetHasMore() || len(res.GetEntries()) == 0 {
			return out, nil
		}
		after = res.GetEntries()[len(res.GetEntries())-1].GetSeq()
	}
}
