package worker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// git runs git in dir for a test.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// origin is a repository with one commit.
func origin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	gitT(t, dir, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("# origin\n"), 0o644))
	gitT(t, dir, "add", "README.md")
	gitT(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

// runTask runs req on a stand-alone worker and collects the stream.
func runTask(t *testing.T, req *agentv1.RunTaskRequest) (*agentv1.RunTaskResult, []*agentv1.RunTaskResponse) {
	t.Helper()
	w, err := New(Config{StandAlone: true, DataDir: t.TempDir(), InstanceID: "agent-test"})
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		got []*agentv1.RunTaskResponse
	)
	err = w.RunTask(context.Background(), req, func(r *agentv1.RunTaskResponse) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, proto.Clone(r).(*agentv1.RunTaskResponse))
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, got)
	last := got[len(got)-1].GetResult()
	require.NotNil(t, last, "the last message carries the result")
	for i, r := range got {
		require.Equal(t, int64(i+1), r.GetSeq())
	}
	return last, got
}

func logged(events []*agentv1.RunTaskResponse, t commonv1.EventType) []string {
	var out []string
	for _, e := range events {
		if e.GetLog().GetEventType() == t {
			out = append(out, e.GetLog().GetMessage())
		}
	}
	return out
}

func TestRunTaskRetriesFromTheCheckpointAndCommitsOnlyItsFiles(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	task := &commonv1.Task{Id: "1.1", Title: "write the greeting", File: "hello.txt", Action: commonv1.TaskAction_TASK_ACTION_CREATE,
		// The first try leaves a half-written file and fails; the retry starts from the checkpoint.
		Command:    `echo partial > hello.txt; [ "${CONVERGE_ATTEMPT}" -ge 2 ] || { echo "transient" >&2; exit 1; }; echo hi > hello.txt`,
		Validation: &commonv1.TaskValidation{Command: "grep -qx hi hello.txt"}}
	res, events := runTask(t, &agentv1.RunTaskRequest{Task: task, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}},
		Branch: "converge/test"})
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, res.GetStatus(), "%v", res.GetError())
	require.Equal(t, int32(2), res.GetAttempts())
	require.Equal(t, []string{"hello.txt"}, res.GetFilesChanged())
	require.True(t, res.GetPushed())
	require.Equal(t, "converge/test", res.GetBranch())
	require.Equal(t, res.GetCommitSha(), gitT(t, repo, "rev-parse", "converge/test"))
	require.Equal(t, "Task 1.1: write the greeting", gitT(t, repo, "log", "-1", "--format=%s", "converge/test"))
	require.Equal(t, "hello.txt", gitT(t, repo, "show", "--name-only", "--format=", "converge/test"))
	require.Equal(t, "hi", gitT(t, repo, "show", "converge/test:hello.txt"))
	require.Len(t, logged(events, commonv1.EventType_EVENT_TYPE_TASK_FAILED), 1)
	require.Len(t, logged(events, commonv1.EventType_EVENT_TYPE_CHECKPOINT_RESTORED), 1)
	require.NotEmpty(t, logged(events, commonv1.EventType_EVENT_TYPE_VALIDATION_RUN))
}

func TestRunTaskFailsAfterItsRetries(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	task := &commonv1.Task{Id: "2", Title: "never valid", File: "x.txt", Command: "echo x > x.txt",
		Validation: &commonv1.TaskValidation{Command: "exit 3"}}
	res, events := runTask(t, &agentv1.RunTaskRequest{Task: task, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}},
		AgentConfig: &commonv1.AgentConfig{MaxRetries: proto.Int32(1)}, Branch: "converge/never"})
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, res.GetStatus())
	require.Equal(t, int32(2), res.GetAttempts())
	require.Equal(t, "VALIDATION_FAILED", res.GetError().GetCode())
	require.Empty(t, res.GetCommitSha())
	require.Len(t, logged(events, commonv1.EventType_EVENT_TYPE_TASK_FAILED), 2)
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--verify", "--quiet", "converge/never").CombinedOutput()
	require.Error(t, err, "nothing was pushed: %s", out)
}

func TestRunTaskInAScratchDirectory(t *testing.T) {
	t.Parallel()
	res, _ := runTask(t, &agentv1.RunTaskRequest{Task: &commonv1.Task{Id: "3", Title: "pure command", Command: "echo GOTCHA: nothing to record without Knowledge",
		Action: commonv1.TaskAction_TASK_ACTION_RUN}})
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, res.GetStatus(), "%v", res.GetError())
	require.Empty(t, res.GetCommitSha())
	require.Equal(t, int32(1), res.GetAttempts())
}

func TestOwnsMatchesDeclaredImpacts(t *testing.T) {
	t.Parallel()
	task := &commonv1.Task{File: "cmd/main.go", Files: []*commonv1.FileImpact{
		{Path: "internal/greet/", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY},
		{Path: "docs/**/*.md", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB},
		{Path: "go.mod"},
	}}
	for path, want := range map[string]bool{
		"cmd/main.go": true, "internal/greet/greet.go": true, "internal/greeter.go": false, "docs/a/b.md": true,
		"docs/a/b.txt": false, "go.mod": true, "go.sum": false, "cmd/other.go": false,
	} {
		require.Equal(t, want, owns(task, path), path)
	}
}
