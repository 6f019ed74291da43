package security

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/grpcerr"
)

// Finding 12, case and nesting of .git: the Scheduler refuses a task whose file or impacts are
// inside .git in any letter case and at any depth — the rule of platform/repopath, the same the
// agent applies before it writes (services/agent/executor: CodeUnsafePath).
func TestFinding12SchedulerRefusesGitPathsInAnyCaseAndDepth(t *testing.T) {
	t.Parallel()
	addr, token := startDev(t)
	c := schedulerv1.NewSchedulerServiceClient(dialToken(t, addr, token))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []string{".GIT/config", "sub/.git/config", "a/.Git/hooks/pre-commit", ".git"} {
		for _, tc := range []struct {
			name  string
			task  *commonv1.Task
			field string
		}{
			{"file", &commonv1.Task{Id: "1", Title: "t", Command: "true", File: p}, "spec.tasks[0].file"},
			{"files", &commonv1.Task{Id: "1", Title: "t", Command: "true", Files: []*commonv1.FileImpact{{Path: p}}}, "spec.tasks[0].files[0].path"},
		} {
			_, err := c.CreateTaskList(ctx, &schedulerv1.CreateTaskListRequest{Spec: &schedulerv1.TaskListSpec{
				Name: "git", Tasks: []*commonv1.Task{tc.task}}})
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%s %s: %v", tc.name, p, err)
			var fields []string
			for _, v := range grpcerr.Violations(err) {
				fields = append(fields, v.Field)
			}
			require.Contains(t, fields, tc.field, "%s %s: %v", tc.name, p, err)
		}
	}
}
