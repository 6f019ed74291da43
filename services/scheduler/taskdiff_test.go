package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Issue 19 part 3 (the diff of a task's commit), the Scheduler's side: GetTaskDiff reads the
// commit the task completed with from the run's repository with git.

// diffRun starts a one-task list on repo (a repository served by servedRepo) and claims its task
// as agent-1.
func diffRun(t *testing.T, b *testBundle, repo *schedulerv1.Repository) (*schedulerv1.Execution, *schedulerv1.ClaimedAssignment) {
	t.Helper()
	spec := oneTask("diff")
	spec.Repository = repo
	e := b.start(t, b.createList(t, spec), nil)
	c := b.claimWithin(t, "agent-1", "", 10*time.Second)
	require.NotNil(t, c)
	require.Equal(t, "A", c.GetTask().GetId())
	return e, c
}

// commitTask commits what write makes in dir as the task's agent would (on its base commit,
// pushed to its task ref), completes the assignment with it and answers the commit.
func commitTask(t *testing.T, b *testBundle, dir string, c *schedulerv1.ClaimedAssignment, write func()) string {
	t.Helper()
	gitIn(t, dir, "checkout", "-q", "--detach", c.GetBaseCommit())
	write()
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "commit", "-q", "-m", "Task A: a\n\nbody")
	sha := gitIn(t, dir, "rev-parse", "HEAD")
	gitIn(t, dir, "update-ref", c.GetTaskRef(), sha)
	gitIn(t, dir, "checkout", "-q", "main")
	_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-1",
		FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1,
		CommitSha: sha, TaskRef: c.GetTaskRef()})
	require.NoError(t, err)
	return sha
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// A task that committed: its files with status and counts, and the unified diff against the
// wave's base commit, from a local repository read in place and from an http repository fetched
// into a scratch directory (removed after). Before the commit the task has none:
// FailedPrecondition.
func TestGetTaskDiffOfACommittedTask(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"path", "url"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, st store.Store) {
				dir, url := servedRepo(t)
				writeFile(t, filepath.Join(dir, "old.txt"), "gone\n")
				writeFile(t, filepath.Join(dir, "lib", "util.go"), "package lib\n\nfunc A() {}\n")
				gitIn(t, dir, "add", "-A")
				gitIn(t, dir, "commit", "-q", "-m", "two")
				base := gitIn(t, dir, "rev-parse", "HEAD")
				repo := &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}}
				if kind == "url" {
					repo = &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: url}}
				}
				work := t.TempDir()
				b := bundleWith(t, st, WithWorkDir(work))
				e, c := diffRun(t, b, repo)
				require.Equal(t, base, c.GetBaseCommit())

				_, err := b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A"})
				requireCode(t, err, codes.FailedPrecondition)
				require.Contains(t, err.Error(), "has no commit yet")

				sha := commitTask(t, b, dir, c, func() {
					writeFile(t, filepath.Join(dir, "README"), "app\nmore\n")
					require.NoError(t, os.Remove(filepath.Join(dir, "old.txt")))
					writeFile(t, filepath.Join(dir, "lib", "util.go"), "package lib\n\nfunc B() {}\n")
					writeFile(t, filepath.Join(dir, "new <b>.txt"), "<script>x</script>\n")
					writeFile(t, filepath.Join(dir, "logo.png"), "\x89PNG\x00\x01\x02")
				})
				res, err := b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A"})
				require.NoError(t, err)
				require.Equal(t, sha, res.GetCommitSha())
				require.Equal(t, base, res.GetParentSha())
				require.Equal(t, c.GetAssignment().GetId(), res.GetAssignmentId())
				require.Equal(t, int32(1), res.GetWaveNumber())
				require.Equal(t, c.GetTaskRef(), res.GetTaskRef())
				require.Equal(t, "Task A: a", res.GetSubject())
				require.False(t, res.GetTruncated())
				type file struct {
					status     schedulerv1.FileChangeStatus
					add, del   int32
					binaryFile bool
				}
				got := map[string]file{}
				for _, f := range res.GetFiles() {
					got[f.GetPath()] = file{f.GetStatus(), f.GetAdditions(), f.GetDeletions(), f.GetBinary()}
				}
				require.Equal(t, map[string]file{
					"README":      {schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_MODIFIED, 1, 0, false},
					"old.txt":     {schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_DELETED, 0, 1, false},
					"lib/util.go": {schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_MODIFIED, 1, 1, false},
					"new <b>.txt": {schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_ADDED, 1, 0, false},
					"logo.png":    {schedulerv1.FileChangeStatus_FILE_CHANGE_STATUS_ADDED, 0, 0, true},
				}, got)
				require.Equal(t, int32(3), res.GetAdditions())
				require.Equal(t, int32(2), res.GetDeletions())
				d := res.GetUnifiedDiff()
				for _, want := range []string{"diff --git a/README b/README\n", "+more\n", "-func A() {}\n", "+func B() {}\n",
					"deleted file mode 100644\n", "+<script>x</script>\n", "Binary files /dev/null and b/logo.png differ\n"} {
					require.Contains(t, d, want)
				}
				require.Equal(t, gitIn(t, dir, "diff-tree", "-p", "--no-renames", base, sha)+"\n", d, "git's own diff, whole")

				// The same answer again (a commit never changes), and by assignment id.
				again, err := b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A",
					AssignmentId: c.GetAssignment().GetId()})
				require.NoError(t, err)
				require.Equal(t, d, again.GetUnifiedDiff())
				if kind == "url" {
					left, err := os.ReadDir(filepath.Join(work, taskDiffDir))
					require.NoError(t, err)
					require.Empty(t, left, "the scratch repository is removed after")
				}
			})
		})
	}
}

// A huge diff is cut at a line boundary under max_bytes and says so; the file list and the counts
// stay whole.
func TestGetTaskDiffTruncatesAHugeDiff(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		dir, _ := servedRepo(t)
		b := bundleWith(t, st)
		e, c := diffRun(t, b, &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}})
		var big strings.Builder
		for i := range 20000 {
			fmt.Fprintf(&big, "line %d of a generated file\n", i)
		}
		commitTask(t, b, dir, c, func() {
			writeFile(t, filepath.Join(dir, "big.txt"), big.String())
			writeFile(t, filepath.Join(dir, "small.txt"), "small\n")
		})
		res, err := b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A", MaxBytes: 4096})
		require.NoError(t, err)
		require.True(t, res.GetTruncated())
		d := res.GetUnifiedDiff()
		require.LessOrEqual(t, len(d), 4096)
		require.Greater(t, len(d), 3000)
		require.True(t, strings.HasSuffix(d, "\n"), "whole lines only")
		require.True(t, strings.HasPrefix(d, "diff --git a/big.txt b/big.txt\n"), d[:100])
		require.Len(t, res.GetFiles(), 2)
		require.Equal(t, int32(20001), res.GetAdditions())

		// The default cap (1 MiB) holds it whole.
		res, err = b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A"})
		require.NoError(t, err)
		require.False(t, res.GetTruncated())
		require.Contains(t, res.GetUnifiedDiff(), "+line 19999 of a generated file\n")
		require.Contains(t, res.GetUnifiedDiff(), "b/small.txt")
	})
}

// Unknown execution, task or assignment: NotFound; a task that ended without a commit (failed):
// FailedPrecondition; bad input: InvalidArgument with field violations.
func TestGetTaskDiffErrors(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		dir, _ := servedRepo(t)
		b := bundleWith(t, st)
		e, c := diffRun(t, b, &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}})
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(), InstanceId: "agent-1",
			FencingToken: c.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, Tries: 1,
			Error: &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "exit status 1"}})
		require.NoError(t, err)

		for name, tc := range map[string]struct {
			req  *schedulerv1.GetTaskDiffRequest
			code codes.Code
		}{
			"failed task":        {&schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A"}, codes.FailedPrecondition},
			"unknown execution":  {&schedulerv1.GetTaskDiffRequest{ExecutionId: "ex_nope", TaskId: "A"}, codes.NotFound},
			"unknown task":       {&schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "Z"}, codes.NotFound},
			"unknown assignment": {&schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A", AssignmentId: "as_nope"}, codes.NotFound},
		} {
			_, err := b.client.GetTaskDiff(t.Context(), tc.req)
			require.Equal(t, tc.code.String(), status.Code(err).String(), "%s: %v", name, err)
		}
		_, err = b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: "ex\x00", TaskId: "../A", MaxBytes: 4 << 20})
		requireViolations(t, err, map[string]string{
			"execution_id": "does not match regex pattern `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`",
			"task_id":      "does not match regex pattern `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`",
			"max_bytes":    "must be greater than or equal to 0 and less than or equal to 3145728",
		})
	})
}

// A repository the Scheduler cannot read (here: removed after the task committed; in a
// deployment: a path only the agents' hosts have) answers Unavailable with the reason.
func TestGetTaskDiffOfAnUnreadableRepositoryIsUnavailable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		dir, _ := servedRepo(t)
		b := bundleWith(t, st)
		e, c := diffRun(t, b, &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}})
		commitTask(t, b, dir, c, func() { writeFile(t, filepath.Join(dir, "a.txt"), "a\n") })
		require.NoError(t, os.RemoveAll(dir))
		_, err := b.client.GetTaskDiff(t.Context(), &schedulerv1.GetTaskDiffRequest{ExecutionId: e.GetId(), TaskId: "A"})
		requireCode(t, err, codes.Unavailable)
		require.Contains(t, err.Error(), "the run's repository cannot be read")
	})
}
