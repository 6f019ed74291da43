package worker

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
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

// The number of runs follows the claimed options' max_retries, not a constant; options the
// Scheduler did not resolve are refused rather than guessed.
func TestFailingTaskRunsFollowMaxRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts *schedulerv1.ExecutionOptions
		runs int
	}{
		{"max_retries 0", resolvedOptions(0), 1},
		{"max_retries 1", resolvedOptions(1), 2},
		{"max_retries 3", resolvedOptions(3), 4},
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
	h.sched.mu.Lock()
	h.sched.directive = schedulerv1.Directive_DIRECTIVE_CANCEL
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "3", Title: "slow", Command: "touch " + shq(started) + "; sleep 60"}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_CANCELLED, c.GetResult())
	require.Equal(t, "CANCELLED", c.GetError().GetCode())
	require.True(t, strings.Contains(c.GetError().GetMessage(), "cancelled by the test"), c.GetError().GetMessage())
}

// Issue 15 part 11: DRAIN (the run is paused) lets the assignment finish and complete as usual,
// without claiming a next one with the completion; it is scoped to the run, so the worker does
// not drain: it goes on claiming and runs the next assignment it is given.
func TestDrainDirectiveFinishesAndKeepsServing(t *testing.T) {
	t.Parallel()
	h := startWorker(t, func(c *Config) { c.startedGrace = -1 }) // the keeper reports at once, and hears DRAIN
	h.sched.mu.Lock()
	h.sched.directive = schedulerv1.Directive_DIRECTIVE_DRAIN
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "4", Title: "paused run", Command: "echo ok"}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Nil(t, c.GetClaimNext(), "no next assignment claimed with the completion of a draining run")
	h.sched.mu.Lock()
	require.NotEmpty(t, h.sched.reports, "the directive was answered to a report")
	h.sched.directive = schedulerv1.Directive_DIRECTIVE_CONTINUE
	h.sched.mu.Unlock()
	require.False(t, h.w.Draining(), "a run's DRAIN does not drain the worker")

	h.sched.push(claimed(t, &commonv1.Task{Id: "5", Title: "another run", Command: "echo ok"}, ""))
	c = h.complete()
	require.Equal(t, "5", c.GetAssignmentId()[len("as_"):])
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
}

// eventsOf answers the events of type typ.
func eventsOf(events []*schedulerv1.AgentEvent, typ commonv1.EventType) []*schedulerv1.AgentEvent {
	var out []*schedulerv1.AgentEvent
	for _, e := range events {
		if e.GetEventType() == typ {
			out = append(out, e)
		}
	}
	return out
}

// Issue 12 defect 9: an event carries the time it happened (the agent's clock), not the time it
// is delivered: TASK_STARTED is stamped before the command ran.
func TestEventsAreStampedWhenTheyHappen(t *testing.T) {
	t.Parallel()
	ran := tmpFile(t, "ran")
	h := startWorker(t, nil)
	h.sched.push(claimed(t, &commonv1.Task{Id: "9", Title: "clock", Command: "date +%s.%N > " + shq(ran)}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	events := h.sched.events(c)
	require.NotEmpty(t, events)
	for _, e := range events {
		require.NotNil(t, e.GetTime(), "%s has no time", e.GetEventType())
	}
	startedEvents := eventsOf(events, commonv1.EventType_EVENT_TYPE_TASK_STARTED)
	require.Len(t, startedEvents, 1)
	got := lines(t, ran)
	require.Len(t, got, 1)
	sec, err := strconv.ParseFloat(got[0], 64)
	require.NoError(t, err)
	cmdTime := time.Unix(0, int64(sec*1e9))
	require.False(t, startedEvents[0].GetTime().AsTime().After(cmdTime.Add(time.Millisecond)),
		"TASK_STARTED at %s, after the command ran at %s", startedEvents[0].GetTime().AsTime(), cmdTime)
}

// Issue 12 defect 11: a GOTCHA line is recorded in Knowledge with a tag Knowledge accepts
// ("task:<id>" broke its tag pattern, and every discovery was dropped in silence).
func TestDiscoveriesAreRecorded(t *testing.T) {
	t.Parallel()
	h := startWorker(t, nil)
	h.sched.push(claimed(t, &commonv1.Task{Id: "1.2", Title: "learn", File: "db/schema.sql",
		Command: "mkdir -p db && echo 'create table t(x text);' > db/schema.sql && echo 'GOTCHA: SQLite has no DATETIME type: store TEXT'"}, origin(t)))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Equal(t, int32(1), c.GetDiscoveriesCount())
	h.know.mu.Lock()
	items := h.know.items
	h.know.mu.Unlock()
	require.Len(t, items, 1)
	require.Equal(t, "SQLite has no DATETIME type: store TEXT", items[0].GetContent())
	require.Equal(t, "db/schema.sql", items[0].GetFilePattern())
	require.Equal(t, []string{"task-1.2"}, items[0].GetTags())
	require.Equal(t, "1.2", items[0].GetSource().GetTaskId())
	require.Len(t, eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_DISCOVERY_RECORDED), 1)
}

// A discovery Knowledge refuses is not dropped in silence: a WARNING event says so.
func TestRefusedDiscoveryIsAWarning(t *testing.T) {
	t.Parallel()
	h := startWorker(t, func(c *Config) { c.Knowledge = refusingKnowledge{} })
	h.sched.push(claimed(t, &commonv1.Task{Id: "11", Title: "learn", Command: "echo 'GOTCHA: x'"}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Zero(t, c.GetDiscoveriesCount())
	warnings := eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_WARNING)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0].GetMessage(), "GOTCHA not recorded in Knowledge")
	require.Contains(t, warnings[0].GetMessage(), "knowledge is down")
}

type refusingKnowledge struct {
	knowledgev1.KnowledgeServiceClient
}

func (refusingKnowledge) RecordItem(context.Context, *knowledgev1.RecordItemRequest, ...grpc.CallOption) (*knowledgev1.RecordItemResponse, error) {
	return nil, status.Error(codes.Unavailable, "knowledge is down")
}

// Issue 12 defect 12 / issue 15 part 2: in a list with a repository, a try that changed paths
// outside the task's declared files is refused (SCOPE_GUARD naming them, reported in a WARNING
// event, nothing pushed) unless options.allow_undeclared_files is set: then the task commits only
// its files and the rest is named in a WARNING event and discarded. A task that declares no files
// (check-only) commits nothing and its changes are named and discarded.
func TestUndeclaredChangesAreRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	h := startWorker(t, nil)
	allowing := func(ca *schedulerv1.ClaimedAssignment) *schedulerv1.ClaimedAssignment {
		ca.Options.AllowUndeclaredFiles = true
		return ca
	}
	refs := func() string {
		out, err := exec.Command("git", "-C", repo, "for-each-ref", "refs/converge/").CombinedOutput()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}

	// The default: refused, naming the undeclared paths, and nothing pushed.
	ca := claimed(t, &commonv1.Task{Id: "11", Title: "one file", File: "b.txt", Command: "echo b > b.txt && echo z > stray.txt"}, repo)
	ca.Options.MaxRetries = proto.Int32(0)
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult())
	require.Equal(t, "SCOPE_GUARD", c.GetError().GetCode())
	require.Contains(t, c.GetError().GetMessage(), "stray.txt")
	require.NotContains(t, c.GetError().GetMessage(), "b.txt,")
	warnings := eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_WARNING)
	require.NotEmpty(t, warnings)
	require.Equal(t, "undeclared", warnings[0].GetContext().AsMap()["rule"])
	require.Empty(t, refs(), "nothing pushed")

	// Task 11's reports were all sent before its completion (the keeper stops first): forget
	// them, or its WARNING, reported by the keeper when the task outlived a report interval, would
	// count as task 12's.
	h.sched.mu.Lock()
	h.sched.reports = nil
	h.sched.mu.Unlock()
	h.sched.push(claimed(t, &commonv1.Task{Id: "12", Title: "no files", Command: "echo x > a.txt && echo y >> README.md"}, repo))
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Empty(t, c.GetCommitSha(), "a task that declares no files commits nothing")
	require.Empty(t, c.GetFilesChanged())
	require.Empty(t, c.GetTaskRef())
	warnings = eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_WARNING)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0].GetMessage(), "the task declares no files")
	require.Contains(t, warnings[0].GetMessage(), "README.md")
	require.Contains(t, warnings[0].GetMessage(), "a.txt")
	require.Empty(t, refs(), "nothing pushed")

	h.sched.push(allowing(claimed(t, &commonv1.Task{Id: "13", Title: "one file", File: "b.txt", Command: "echo b > b.txt && echo z > stray.txt"}, repo)))
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Equal(t, []string{"b.txt"}, c.GetFilesChanged())
	warnings = eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_WARNING)
	warnings = warnings[len(warnings)-1:]
	require.Contains(t, warnings[0].GetMessage(), "outside the task's declared files")
	require.Contains(t, warnings[0].GetMessage(), "stray.txt")
}

// A claim whose options the Scheduler did not resolve is failed with what is missing, not run
// with guessed defaults.
func TestUnresolvedOptionsAreRefused(t *testing.T) {
	t.Parallel()
	count := tmpFile(t, "count")
	h := startWorker(t, nil)
	ca := claimed(t, &commonv1.Task{Id: "3", Title: "x", Command: "echo run >> " + shq(count)}, "")
	ca.Options = &schedulerv1.ExecutionOptions{MaxRetries: ca.GetOptions().MaxRetries}
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult(), "%v", c.GetError())
	require.Equal(t, "OPTIONS", c.GetError().GetCode())
	require.Contains(t, c.GetError().GetMessage(), "options.task_timeout")
	require.NoFileExists(t, count, "nothing ran")
}

// A task that queued more events than one completion carries (100) sends the rest as reports
// first: none is dropped. Here 150 warnings (150 discoveries Knowledge refused), and no report
// during the task (startedGrace outlasts it), so every event waits for the completion.
func TestEventsBeyondOneCompletionAreReported(t *testing.T) {
	t.Parallel()
	h := startWorker(t, func(c *Config) {
		c.Knowledge = refusingKnowledge{}
		c.startedGrace = time.Hour
	})
	h.sched.push(claimed(t, &commonv1.Task{Id: "12", Title: "learn a lot",
		Command: `i=0; while [ $i -lt 150 ]; do echo "GOTCHA: g$i"; i=$((i+1)); done`}, ""))
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.LessOrEqual(t, len(c.GetEvents()), 100)
	warnings := eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_WARNING)
	require.Equal(t, 150, len(warnings), "warnings sent")
	for i, w := range warnings {
		require.Contains(t, w.GetMessage(), "GOTCHA not recorded in Knowledge", i)
		require.Equal(t, fmt.Sprintf("g%d", i), w.GetContext().GetFields()["content"].GetStringValue(), "in order")
	}
	started := eventsOf(h.sched.events(c), commonv1.EventType_EVENT_TYPE_TASK_STARTED)
	require.Len(t, started, 1)
}
