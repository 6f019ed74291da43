package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// The progress and summary tests feed the renderers the messages a WatchExecution stream sends
// (entries as the Scheduler and the agents write them) and compare the output, as it goes to a
// pipe or a CI log, with golden text.

// stream is a fake execution's log, in seq order.
type fakeStream struct {
	seq  int64
	msgs []*schedulerv1.WatchExecutionResponse
}

func (s *fakeStream) add(t commonv1.EventType, task, instance string, wave int32, msg string, ctx map[string]any) {
	s.seq++
	en := &commonv1.LogEntry{Seq: s.seq, ExecutionId: "ex_1", TaskId: task, InstanceId: instance, WaveNumber: wave,
		EventType: t, Message: msg, Time: timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	if ctx != nil {
		st, err := structpb.NewStruct(ctx)
		if err != nil {
			panic(err)
		}
		en.Context = st
	}
	s.msgs = append(s.msgs, &schedulerv1.WatchExecutionResponse{Entry: en})
}

// greeterList is the task list of the fixtures (examples/greeter's shape).
func greeterList() *schedulerv1.TaskList {
	task := func(id, title string) *commonv1.Task { return &commonv1.Task{Id: id, Title: title} }
	return &schedulerv1.TaskList{Id: "tl_1", Spec: &schedulerv1.TaskListSpec{Name: "greeter", Tasks: []*commonv1.Task{
		task("1.1", "Greeting package"), task("1.2", "Command-line entry"), task("1.3", "Greeting tests"),
		task("2.1", "Shout"), task("2.2", "Farewell"), task("3.1", "Command-line flags"),
	}}}
}

func greeterExecution() (*schedulerv1.Execution, []*schedulerv1.Wave) {
	ex := &schedulerv1.Execution{Id: "ex_1", TaskListId: "tl_1", RunNumber: 1, Status: schedulerv1.ExecutionStatus_EXECUTION_STATUS_RUNNING,
		TotalTasks: 6, WaveCount: 4, Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: "/tmp/greeter"}},
		BaseCommit: "0123456789abcdef0123456789abcdef01234567", RunBranch: "converge/ex_1"}
	wave := func(n int32, ids ...string) *schedulerv1.Wave {
		w := &schedulerv1.Wave{WaveNumber: n, TaskCount: int32(len(ids)), Status: schedulerv1.WaveStatus_WAVE_STATUS_PENDING}
		for _, id := range ids {
			w.Placements = append(w.Placements, &schedulerv1.WavePlacement{TaskId: id})
		}
		return w
	}
	return ex, []*schedulerv1.Wave{wave(1, "1.1"), wave(2, "1.2", "1.3", "2.1"), wave(3, "2.2"), wave(4, "3.1")}
}

// lookupFrom answers assignments from a map the test changes as the run goes.
func lookupFrom(m map[string]*schedulerv1.Assignment) assignmentLookup {
	return func(id string) (*schedulerv1.Assignment, error) {
		if a, ok := m[id]; ok {
			return a, nil
		}
		return nil, errors.New("no assignment")
	}
}

// render feeds the stream to a plain view and answers its output.
func render(t *testing.T, ex *schedulerv1.Execution, waves []*schedulerv1.Wave, s *fakeStream, lookup assignmentLookup, before func(i int)) string {
	t.Helper()
	var out bytes.Buffer
	p := newProgress(ex, waves, greeterList(), lookup)
	v := newView(&out, p, false, 0)
	v.println(p.header(3))
	for i, m := range s.msgs {
		if before != nil {
			before(i)
		}
		v.handle(m)
	}
	v.close()
	return out.String()
}

func TestProgressPlainConverged(t *testing.T) {
	t.Parallel()
	const (
		a1 = "agent-1-ab12"
		a2 = "agent-2-ab12"
		a3 = "agent-3-ab12"
	)
	s := &fakeStream{}
	E := commonv1.EventType_EVENT_TYPE_EXECUTION_STARTED
	s.add(E, "", "", 0, "execution run ex_1 of \"greeter\": 6 tasks in 4 waves", nil)
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 1, "wave 1/4 started: 1 tasks", map[string]any{"wave_number": 1, "task_count": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "1.1", a1, 1, "Task 1.1 leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_STARTED, "1.1", a1, 1, "Task 1.1: Greeting package started by agent-1 (attempt 1)", nil)
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "1.1", a1, 1, "Task 1.1: Greeting package completed at 1111", map[string]any{"files_changed": 1, "tries": 1, "commit": "1111"})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, "", "", 1, "wave 1/4: integration of 1 task commits queued", map[string]any{"wave_number": 1, "merges": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "", a2, 1, "integration of wave 1 leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, "", a2, 1, "wave 1 integrated", map[string]any{"commit": "aaaaaaaaaaaaaaaaaaaa"})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", "", 0, "wave 1/4 completed: 1 completed, 0 failed, 0 skipped", map[string]any{"wave_number": 1})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 2, "wave 2/4 started: 3 tasks", map[string]any{"wave_number": 2, "task_count": 3})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "1.2", a3, 2, "leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "1.3", a1, 2, "leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "2.1", a2, 2, "leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_FAILED, "1.3", a1, 2, "try 1/4 failed (EXECUTOR_FAILED): the task's command failed: exit status 1",
		map[string]any{"try": 1, "code": "EXECUTOR_FAILED", "output_tail": "transient failure: the first try of this task always fails\n"})
	s.add(commonv1.EventType_EVENT_TYPE_CHECKPOINT_RESTORED, "1.3", a1, 2, "restored checkpoint", nil)
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "2.1", a2, 2, "done", map[string]any{"files_changed": 3, "tries": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "1.3", a1, 2, "done", map[string]any{"files_changed": 1, "tries": 2})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "1.2", a3, 2, "done", map[string]any{"files_changed": 1, "tries": 1})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, "", "", 2, "queued", map[string]any{"wave_number": 2, "merges": 3})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, "", a1, 2, "wave 2 integrated", map[string]any{"commit": "bbbbbbbbbbbbbbbbbbbb"})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", "", 0, "wave 2/4 completed", map[string]any{"wave_number": 2})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 3, "wave 3/4 started: 1 tasks", map[string]any{"wave_number": 3, "task_count": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "2.2", a3, 3, "leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "2.2", a3, 3, "done", map[string]any{"files_changed": 3, "tries": 1})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, "", "", 3, "queued", map[string]any{"wave_number": 3, "merges": 1})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, "", a2, 3, "wave 3 integrated", map[string]any{"commit": "cccccccccccccccccccc"})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", "", 0, "wave 3/4 completed", map[string]any{"wave_number": 3})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 4, "wave 4/4 started: 1 tasks", map[string]any{"wave_number": 4, "task_count": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "3.1", a1, 4, "leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "3.1", a1, 4, "done", map[string]any{"files_changed": 1, "tries": 1})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_STARTED, "", "", 4, "queued", map[string]any{"wave_number": 4, "merges": 1})
	s.add(commonv1.EventType_EVENT_TYPE_INTEGRATION_COMPLETED, "", a3, 4, "wave 4 integrated", map[string]any{"commit": "dddddddddddddddddddd"})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", "", 0, "wave 4/4 completed", map[string]any{"wave_number": 4})
	s.add(commonv1.EventType_EVENT_TYPE_VERIFICATION_STARTED, "", "", 0, "every wave integrated", nil)
	s.add(commonv1.EventType_EVENT_TYPE_VERDICT, "", "", 0, "Verify Done: CONVERGED — converged: 6 criteria passed",
		map[string]any{"verdict": "VERDICT_CONVERGED", "pass": 6, "fail": 0, "failed_criteria": ""})
	s.add(commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, "", "", 0, "execution CONVERGED: converged: 6 criteria passed", map[string]any{"outcome": "CONVERGED"})

	ex, waves := greeterExecution()
	running := &schedulerv1.Assignment{TaskId: "1.3", Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING}
	got := render(t, ex, waves, s, lookupFrom(map[string]*schedulerv1.Assignment{"1.3": running}), nil)
	want := `▶ ex_1 run 1 of "greeter": 6 tasks in 4 waves, 3 local agents
  repository /tmp/greeter at 0123456789ab, run branch converge/ex_1
── Wave 1/4: 1 task (1.1)
      🔄 Task 1.1: Greeting package — in progress on agent-1-ab12
[1/6] ✅ Task 1.1: Greeting package — 1 file changed
── Wave 1/4: integrating 1 task commit
── Wave 1/4 done: 1 completed, 0 failed, 0 skipped; integrated at aaaaaaaaaaaa
── Wave 2/4: 3 tasks (1.2, 1.3, 2.1)
      🔄 Task 1.2: Command-line entry — in progress on agent-3-ab12
      🔄 Task 1.3: Greeting tests — in progress on agent-1-ab12
      🔄 Task 2.1: Shout — in progress on agent-2-ab12
      ↻ Task 1.3: Greeting tests — try 1/4 failed (EXECUTOR_FAILED): the task's command failed: exit status 1 · transient failure: the first try of this task always fails
[2/6] ✅ Task 2.1: Shout — 3 files changed
[3/6] ✅ Task 1.3: Greeting tests — 1 file changed, 2 tries
[4/6] ✅ Task 1.2: Command-line entry — 1 file changed
── Wave 2/4: integrating 3 task commits
── Wave 2/4 done: 3 completed, 0 failed, 0 skipped; integrated at bbbbbbbbbbbb
── Wave 3/4: 1 task (2.2)
      🔄 Task 2.2: Farewell — in progress on agent-3-ab12
[5/6] ✅ Task 2.2: Farewell — 3 files changed
── Wave 3/4: integrating 1 task commit
── Wave 3/4 done: 1 completed, 0 failed, 0 skipped; integrated at cccccccccccc
── Wave 4/4: 1 task (3.1)
      🔄 Task 3.1: Command-line flags — in progress on agent-1-ab12
[6/6] ✅ Task 3.1: Command-line flags — 1 file changed
── Wave 4/4: integrating 1 task commit
── Wave 4/4 done: 1 completed, 0 failed, 0 skipped; integrated at dddddddddddd
🔎 Verify Done: checking the done-criteria
✅ Verdict: CONVERGED — 6 criteria passed
🏁 Execution ended CONVERGED
`
	require.Equal(t, want, got)
}

// A task that fails after its tries, a dependent skipped for it, a requeue after an expired
// lease, and the run ending FAILED before Verify Done.
func TestProgressPlainFailed(t *testing.T) {
	t.Parallel()
	s := &fakeStream{}
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 1, "wave 1/4 started", map[string]any{"wave_number": 1, "task_count": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "1.1", "agent-1", 1, "leased", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_EXPIRED, "1.1", "agent-1", 1, "lease of agent-1 expired", nil)
	s.add(commonv1.EventType_EVENT_TYPE_TASK_REQUEUED, "1.1", "agent-1", 1, "requeued (attempt 2): lease of agent-1 (token 1) expired", map[string]any{"attempt": 2})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "1.1", "agent-2", 1, "leased", map[string]any{"attempt": 2})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_FAILED, "1.1", "agent-2", 1, "try 1/2 failed (VALIDATION_FAILED): validation failed: exit code 1", map[string]any{"try": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_FAILED, "1.1", "agent-2", 1, "try 2/2 failed (VALIDATION_FAILED): validation failed: exit code 1", map[string]any{"try": 2})
	lastTry := len(s.msgs) - 1
	s.add(commonv1.EventType_EVENT_TYPE_TASK_FAILED, "1.1", "agent-2", 1, "Task 1.1: Greeting package failed after 2 tries: validation failed: exit code 1", map[string]any{"tries": 2})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", "", 0, "wave 1/4 completed: 0 completed, 1 failed, 0 skipped; nothing to integrate", map[string]any{"wave_number": 1})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 2, "wave 2/4 started", map[string]any{"wave_number": 2, "task_count": 3})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_SKIPPED, "1.2", "", 2, "Task 1.2: Command-line entry skipped: dependency 1.1 did not complete", nil)
	s.add(commonv1.EventType_EVENT_TYPE_EXECUTION_COMPLETED, "", "", 0, "execution FAILED: critical phase database failed: task 1.1", map[string]any{"outcome": "FAILED"})

	ex, waves := greeterExecution()
	as := map[string]*schedulerv1.Assignment{
		"1.1": {TaskId: "1.1", Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_RUNNING},
		"1.2": {TaskId: "1.2", Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED, Error: &commonv1.ErrorContext{Message: "dependency 1.1 did not complete"}},
	}
	got := render(t, ex, waves, s, lookupFrom(as), func(i int) {
		if i == lastTry { // the agent's last try and the Scheduler's verdict on the task come together
			as["1.1"] = &schedulerv1.Assignment{TaskId: "1.1", Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, Tries: 2,
				Error: &commonv1.ErrorContext{Message: "validation failed: exit code 1\nmore output"}}
		}
	})
	want := `▶ ex_1 run 1 of "greeter": 6 tasks in 4 waves, 3 local agents
  repository /tmp/greeter at 0123456789ab, run branch converge/ex_1
── Wave 1/4: 1 task (1.1)
      🔄 Task 1.1: Greeting package — in progress on agent-1
      ↻ Task 1.1: Greeting package — requeued (attempt 2): lease of agent-1 (token 1) expired
      🔄 Task 1.1: Greeting package — in progress on agent-2 (attempt 2)
      ↻ Task 1.1: Greeting package — try 1/2 failed (VALIDATION_FAILED): validation failed: exit code 1
[1/6] ❌ Task 1.1: Greeting package — failed after 2 tries: validation failed: exit code 1
── Wave 1/4 done: 0 completed, 1 failed, 0 skipped; nothing to integrate
── Wave 2/4: 3 tasks (1.2, 1.3, 2.1)
[2/6] ⏭️ Task 1.2: Command-line entry — skipped: dependency 1.1 did not complete
🏁 Execution ended FAILED: critical phase database failed: task 1.1
`
	require.Equal(t, want, got)
}

// The verdict lines say what Verify Done answered.
func TestVerdictLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "✅ Verdict: CONVERGED — 1 criterion passed", verdictLine("VERDICT_CONVERGED", 1, 0, nil, ""))
	require.Equal(t, "❌ Verdict: FAILED — 2 of 6 criteria failed: F2, E1", verdictLine("VERDICT_FAILED", 4, 2, []string{"F2", "E1"}, ""))
	require.Equal(t, "⛔ Verdict: BLOCKED — go is not installed", verdictLine("VERDICT_BLOCKED", 0, 0, nil, "blocked: go is not installed"))
}

// The terminal's live block: a bar per wave, one line per running task and integration.
func TestLiveBlock(t *testing.T) {
	t.Parallel()
	ex, waves := greeterExecution()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := newProgress(ex, waves, greeterList(), nil)
	p.now = func() time.Time { return now.Add(-12 * time.Second) }
	for _, w := range p.waves {
		w.completed, w.status = 0, schedulerv1.WaveStatus_WAVE_STATUS_PENDING
	}
	s := &fakeStream{}
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 1, "", map[string]any{"wave_number": 1, "task_count": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "1.1", "agent-1", 1, "", map[string]any{"files_changed": 1})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", "", 0, "", map[string]any{"wave_number": 1})
	s.add(commonv1.EventType_EVENT_TYPE_WAVE_STARTED, "", "", 2, "", map[string]any{"wave_number": 2, "task_count": 3})
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "1.3", "agent-1", 2, "", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_VALIDATION_RUN, "1.3", "agent-1", 2, "validation \"go test ./greet/\": passed=false exit=1", nil)
	s.add(commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "2.1", "agent-2", 2, "", map[string]any{"attempt": 1})
	s.add(commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, "2.1", "agent-2", 2, "", map[string]any{"files_changed": 3})
	for _, m := range s.msgs {
		p.apply(m, false)
	}
	want := []string{
		"Wave 1/4    ████████████████████████ 1/1 ✓ integrated",
		"Wave 2/4    ████████░░░░░░░░░░░░░░░░ 1/3 running",
		"Wave 3/4    ░░░░░░░░░░░░░░░░░░░░░░░░ 0/1",
		"Wave 4/4    ░░░░░░░░░░░░░░░░░░░░░░░░ 0/1",
		"  🔄 agent-1  Task 1.3: Greeting tests · validation \"go test ./greet/\": passed=false exit=1 · 12s",
		"  [2/6 tasks done · 1m05s]",
	}
	require.Equal(t, want, liveBlock(p, 65*time.Second, now))

	// On a terminal the block is redrawn in place under the permanent lines.
	var out bytes.Buffer
	v := newView(&out, p, true, 0)
	v.println("[3/6] ✅ Task 1.2: Command-line entry")
	v.println("next")
	v.close()
	require.Equal(t, 2, strings.Count(out.String(), "\x1b[6A\x1b[J"), "the block is erased before each permanent line and at the end")
	require.True(t, strings.HasSuffix(out.String(), "\x1b[6A\x1b[J"))
}

func TestLessID(t *testing.T) {
	t.Parallel()
	ids := []string{"1.10", "2.1", "1.2", "A-3", "1.1"}
	for i := range ids {
		for j := range ids {
			if i != j {
				require.False(t, lessID(ids[i], ids[j]) && lessID(ids[j], ids[i]), "%s %s", ids[i], ids[j])
			}
		}
	}
	require.True(t, lessID("1.2", "1.10"))
	require.True(t, lessID("1.10", "2.1"))
	require.False(t, lessID("2.1", "1.10"))
}
