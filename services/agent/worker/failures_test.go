package worker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Issue 12 defect 1: a task whose command always fails is reported FAILED with its reason and its
// output, after exactly max_retries + 1 runs — not CANCELLED (which requeues it, 16 runs in all).
func TestFailingTaskIsReportedFailedAfterMaxRetriesPlusOneRuns(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	count := tmpFile(t, "count")
	h := startWorker(t, nil)
	task := &commonv1.Task{Id: "1", Title: "always fails", File: "out.txt",
		Command: "echo run >> " + shq(count) + "; echo 'the build is broken' >&2; exit 1"}
	h.sched.push(claimed(t, task, repo))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult(), "%v", c.GetError())
	require.Equal(t, "EXECUTOR_FAILED", c.GetError().GetCode())
	require.Contains(t, c.GetError().GetMessage(), "exit status 1")
	require.Contains(t, c.GetError().GetMessage(), "the build is broken", "the message ends with the output's last line")
	require.Contains(t, c.GetError().GetStackTrace(), "the build is broken", "the output tail")
	require.Equal(t, int32(4), c.GetTries())
	require.Len(t, lines(t, count), 4, "max_retries 3: the command ran exactly 4 times")
	require.Empty(t, c.GetCommitSha())
}

// The number of runs follows the claimed options' max_retries (and, without one, their agent
// config's), not a constant.
func TestFailingTaskRunsFollowMaxRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts *schedulerv1.ExecutionOptions
		runs int
	}{
		{"max_retries 0", &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(0)}, 1},
		{"max_retries 1", &schedulerv1.ExecutionOptions{MaxRetries: proto.Int32(1)}, 2},
		{"agent config", &schedulerv1.ExecutionOptions{AgentConfig: &commonv1.AgentConfig{MaxRetries: proto.Int32(2)}}, 3},
		{"default", nil, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			count := tmpFile(t, "count")
			h := startWorker(t, nil)
			ca := claimed(t, &commonv1.Task{Id: "2", Title: "never valid", Command: "echo run >> " + shq(count),
				Validation: &commonv1.TaskValidation{Command: "printf 'want %s got %s\\n' 3 2; exit 3"}}, "")
			ca.Options = tc.opts
			h.sched.push(ca)
			c := h.complete()
			require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult(), "%v", c.GetError())
			require.Equal(t, "VALIDATION_FAILED", c.GetError().GetCode(), "%v", c.GetError())
			require.Contains(t, c.GetError().GetMessage(), "want 3 got 2")
			require.Equal(t, int32(tc.runs), c.GetTries())
			require.Len(t, lines(t, count), tc.runs)
			require.Contains(t, c.GetValidationOutputTail(), "want 3 got 2")
		})
	}
}

// A CANCEL directive still ends the work CANCELLED, with the Scheduler's reason.
func TestCancelDirectiveReportsCancelled(t *testing.T) {
	t.Parallel()
	started := tmpFile(t, "started")
	h := startWorker(t, nil)
	h.sched.directive = schedulerv1.Directive_DIRECTIVE_CANCEL
	h.sched.push(claimed(t, &commonv1.Task{Id: "3", Title: "slow", Command: "touch " + shq(started) + "; sleep 60"}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, c.GetResult())
	require.Equal(t, "CANCELLED", c.GetError().GetCode())
	require.True(t, strings.Contains(c.GetError().GetMessage(), "cancelled by the test"), c.GetError().GetMessage())
}
