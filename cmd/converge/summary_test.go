package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// assignments of the greeter fixture: every task done, 1.3 on its second try.
func greeterAssignments() []*schedulerv1.Assignment {
	done := func(id string, wave, tries int32, files ...string) *schedulerv1.Assignment {
		return &schedulerv1.Assignment{Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, TaskId: id, WaveNumber: wave, Attempt: 1, Tries: tries,
			Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, CommitSha: "c0ffee" + id, FilesChanged: files}
	}
	return []*schedulerv1.Assignment{
		done("1.1", 1, 1, "greet/greet.go"),
		{Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, WaveNumber: 1, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED},
		done("1.2", 2, 1, "main.go"),
		done("1.3", 2, 2, "greet/greet_test.go"),
		done("2.1", 2, 1, "README.md", "greet/shout.go", "greet/shout_test.go"),
		done("2.2", 3, 1, "README.md", "greet/farewell.go", "greet/farewell_test.go"),
		done("3.1", 4, 1, "main.go"),
	}
}

func integratedWaves(waves []*schedulerv1.Wave) []*schedulerv1.Wave {
	for i, w := range waves {
		w.Status = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED
		w.IntegrationCommit = string(rune('a'+i)) + "000000000000000000000000000000000000000"
	}
	return waves
}

func TestSummaryConverged(t *testing.T) {
	t.Parallel()
	ex, waves := greeterExecution()
	ex.Status, ex.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, commonv1.Outcome_OUTCOME_CONVERGED
	ex.CompletedTasks, ex.StatusMessage = 6, "converged: 6 criteria passed"
	ex.Verification = &schedulerv1.VerifySummary{ReportId: "vr_1", Verdict: commonv1.Verdict_VERDICT_CONVERGED, PassCount: 6}
	s := newSummary(ex, integratedWaves(waves), greeterList(), greeterAssignments(), 48*time.Second, followUp{rerun: "converge run tasks.md"})
	require.True(t, s.converged())
	var out bytes.Buffer
	s.render(&out)
	want := `
📋 Summary of ex_1 (run 1 of "greeter")

Tasks: 6/6 completed | 0 skipped | 0 failed
Time: 48s
Verdict: ✅ CONVERGED — 6 criteria passed (report vr_1)
Outcome: CONVERGED — converged: 6 criteria passed

Results:
  ✅ Task 1.1: Greeting package
  ✅ Task 1.2: Command-line entry
  ✅ Task 1.3: Greeting tests (2 tries)
  ✅ Task 2.1: Shout
  ✅ Task 2.2: Farewell
  ✅ Task 3.1: Command-line flags

Files changed:
  - README.md
  - greet/farewell.go
  - greet/farewell_test.go
  - greet/greet.go
  - greet/greet_test.go
  - greet/shout.go
  - greet/shout_test.go
  - main.go

Run branch: converge/ex_1 (on top of 0123456789ab)
  git -C /tmp/greeter log --oneline converge/ex_1

Next steps:
  - Review the changes: git -C /tmp/greeter diff 0123456789ab..converge/ex_1
  - Take them: git -C /tmp/greeter merge converge/ex_1
`
	require.Equal(t, want, out.String())

	var doc map[string]any
	out.Reset()
	require.NoError(t, s.writeJSON(&out))
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc), out.String())
	require.Equal(t, true, doc["converged"])
	require.Equal(t, "converge/ex_1", doc["run_branch"])
	require.Len(t, doc["tasks"], 6)
	require.Len(t, doc["waves"], 4)
	require.Equal(t, "VERDICT_CONVERGED", doc["verification"].(map[string]any)["verdict"])
}

// A run that failed: a task failed after its tries, its dependents were skipped, Verify Done never
// ran, and the in-memory suite is gone: the next steps say so.
func TestSummaryFailed(t *testing.T) {
	t.Parallel()
	ex, waves := greeterExecution()
	ex.Status, ex.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED
	ex.CompletedTasks, ex.FailedTasks, ex.SkippedTasks = 1, 1, 2
	ex.StatusMessage = "1 tasks failed"
	waves[0].Status, waves[0].IntegrationCommit = schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED, "a000000000000000000000000000000000000000"
	as := []*schedulerv1.Assignment{
		{Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, TaskId: "1.1", WaveNumber: 1, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_COMPLETED, Tries: 1, FilesChanged: []string{"greet/greet.go"}},
		{Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, TaskId: "1.2", WaveNumber: 2, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_FAILED, Tries: 4,
			Error: &commonv1.ErrorContext{Message: "validation failed: exit code 1"}},
		{Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, TaskId: "3.1", WaveNumber: 4, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_SKIPPED,
			Error: &commonv1.ErrorContext{Message: "dependency 1.2 did not complete"}},
		{Kind: schedulerv1.AssignmentKind_ASSIGNMENT_KIND_TASK, TaskId: "2.2", WaveNumber: 3, Status: schedulerv1.AssignmentStatus_ASSIGNMENT_STATUS_PENDING},
	}
	s := newSummary(ex, waves, greeterList(), as, 2*time.Minute+5*time.Second, followUp{rerun: "converge run tasks.md --repo /tmp/greeter", logFile: "/tmp/converge-run-1.log"})
	require.False(t, s.converged())
	var out bytes.Buffer
	s.render(&out)
	want := `
📋 Summary of ex_1 (run 1 of "greeter")

Tasks: 1/6 completed | 2 skipped | 1 failed
Time: 2m05s
Verdict: none — the run ended before Verify Done
Outcome: FAILED — 1 tasks failed

Results:
  ✅ Task 1.1: Greeting package
  ❌ Task 1.2: Command-line entry (failed after 4 tries: validation failed: exit code 1)
  ⬜ Task 2.2: Farewell (not run)
  ⏭️ Task 3.1: Command-line flags (skipped: dependency 1.2 did not complete)

Files changed:
  - greet/greet.go

Run branch: converge/ex_1 (on top of 0123456789ab)
  git -C /tmp/greeter log --oneline converge/ex_1

Next steps:
  - Fix the failed tasks (their command, validation or the repository) and run again: converge run tasks.md --repo /tmp/greeter
  - What did get built is on the run branch: git -C /tmp/greeter log --oneline converge/ex_1
  - This run's log went away with its in-memory suite: add --data-dir DIR to keep it for converge logs
  - The suite's own log: /tmp/converge-run-1.log
`
	require.Equal(t, want, out.String())
}

// Verify Done said FAILED on a deployment: the next steps point at the logs there.
func TestSummaryVerdictFailedOnServer(t *testing.T) {
	t.Parallel()
	ex, waves := greeterExecution()
	ex.Status, ex.Outcome = schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, commonv1.Outcome_OUTCOME_FAILED
	ex.CompletedTasks = 6
	ex.Verification = &schedulerv1.VerifySummary{ReportId: "vr_2", Verdict: commonv1.Verdict_VERDICT_FAILED, PassCount: 4, FailCount: 2, FailedCriteria: []string{"F2", "E1"}}
	s := newSummary(ex, integratedWaves(waves), greeterList(), greeterAssignments(), time.Minute, followUp{server: "127.0.0.1:7070", rerun: "converge run tasks.md --server 127.0.0.1:7070"})
	var out bytes.Buffer
	s.render(&out)
	require.Contains(t, out.String(), "Verdict: ❌ FAILED — 2 of 6 criteria failed: F2, E1 (report vr_2)\n")
	require.Contains(t, out.String(), "  - Read what went wrong: converge logs ex_1 --server 127.0.0.1:7070 --type task_failed,integration_failed,verdict\n")
	require.Contains(t, out.String(), "  - The tasks ran but the result misses done-criteria F2, E1: add or fix tasks that meet them and run again: converge run tasks.md --server 127.0.0.1:7070\n")
	require.NotContains(t, out.String(), "in-memory")
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	require.Equal(t, "/tmp/a-b_c.d", shellQuote("/tmp/a-b_c.d"))
	require.Equal(t, "'/tmp/with space'", shellQuote("/tmp/with space"))
	require.Equal(t, `'it'\''s'`, shellQuote("it's"))
	require.Equal(t, "''", shellQuote(""))
}

// The next steps name only what exists (issue 12, defect 13): a run that ended before Verify Done
// (no report), a verdict without failed criteria, a follow-up without a rerun command: no step
// ends on an empty id ("for report ", "criteria : ").
func TestSummaryNextStepsNameOnlyWhatExists(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		outcome commonv1.Outcome
		status  schedulerv1.ExecutionStatus
		verify  *schedulerv1.VerifySummary
		failed  int32
		f       followUp
	}{
		{"pending human without a report", commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED, nil, 0, followUp{rerun: "converge run t.md"}},
		{"pending human, report not set", commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, schedulerv1.ExecutionStatus_EXECUTION_STATUS_COMPLETED,
			&schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_CONVERGED, PendingHumanCount: 1}, 0, followUp{server: "127.0.0.1:7070", rerun: "converge run t.md"}},
		{"blocked before Verify Done", commonv1.Outcome_OUTCOME_BLOCKED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, nil, 0, followUp{}},
		{"failed verdict without criteria", commonv1.Outcome_OUTCOME_FAILED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED,
			&schedulerv1.VerifySummary{Verdict: commonv1.Verdict_VERDICT_FAILED, FailCount: 1}, 0, followUp{dataDir: "/tmp/d"}},
		{"failed tasks, no rerun", commonv1.Outcome_OUTCOME_FAILED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, nil, 1, followUp{}},
		{"cancelled, no rerun", commonv1.Outcome_OUTCOME_CANCELLED, schedulerv1.ExecutionStatus_EXECUTION_STATUS_CANCELLED, nil, 0, followUp{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ex, waves := greeterExecution()
			ex.Status, ex.Outcome, ex.Verification, ex.FailedTasks = tc.status, tc.outcome, tc.verify, tc.failed
			s := newSummary(ex, waves, greeterList(), nil, time.Minute, tc.f)
			steps := s.nextSteps()
			require.NotEmpty(t, steps)
			for _, step := range steps {
				require.NotRegexp(t, `[\s:]$`, step, "a step ends on something missing")
				require.NotContains(t, step, "  ")
				require.NotContains(t, step, " :")
				require.NotRegexp(t, `\b(report|criteria|for)$`, step)
			}
			var out bytes.Buffer
			s.render(&out)
			require.NotContains(t, out.String(), "for report \n")
			require.NotContains(t, out.String(), "(report )")
		})
	}
}
