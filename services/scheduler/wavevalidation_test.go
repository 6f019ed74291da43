package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Issue 15 part 4: a validation level failing on a wave's integrated commit fails the wave and the
// run (the later waves never start), and the INTEGRATION_FAILED event names the level and carries
// the output's tail.
func TestWaveValidationFailureFailsTheWave(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		b := runBundle(t, st)
		spec := &schedulerv1.TaskListSpec{Name: "levels", Tasks: []*commonv1.Task{
			{Id: "X", Title: "x", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "x.txt"},
			{Id: "Z", Title: "z", Command: "true", Action: commonv1.TaskAction_TASK_ACTION_RUN, File: "z.txt", DependsOn: []string{"X"}},
		}}
		e := b.start(t, b.createList(t, spec), nil)
		c := b.claim(t, "agent-1", time.Second)
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: c.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: c.GetAssignment().GetFencingToken(), Tries: 1,
			Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, CommitSha: strings.Repeat("a", 40)})
		require.NoError(t, err)
		integ := b.claim(t, "agent-1", time.Second)
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, integ.GetAssignment().GetKind())
		require.False(t, integ.GetFinalIntegration(), "wave 1 of 2")
		output := strings.Repeat("noise\n", 2000) + "FAIL: TestHabits (api)\n"
		_, err = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: integ.GetAssignment().GetId(),
			InstanceId: "agent-1", FencingToken: integ.GetAssignment().GetFencingToken(),
			Result:               schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED,
			Error:                &commonv1.ErrorContext{Code: "VALIDATION_FAILED", Message: "API validation failed: exited 1"},
			ValidationOutputTail: output,
			LevelResults: []*schedulerv1.ValidationLevelResult{
				{Level: schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, Ran: true, Passed: true},
				{Level: schedulerv1.ValidationLevel_VALIDATION_LEVEL_API, Ran: true, ExitCode: 1, OutputTail: output},
			}})
		require.NoError(t, err)

		got, waves := b.execution(t, e.GetId())
		require.Equal(t, schedulerv1.ExecutionStatus_EXECUTION_STATUS_FAILED, got.GetStatus())
		require.Contains(t, got.GetStatusMessage(), "validation level api failed")
		require.Equal(t, schedulerv1.WaveStatus_WAVE_STATUS_FAILED, waves[0].GetStatus())
		require.NotEqual(t, schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED, waves[1].GetStatus(), "the next wave does not run")
		log, err := b.client.GetExecutionLog(t.Context(), &schedulerv1.GetExecutionLogRequest{ExecutionId: e.GetId(),
			EventTypes: []commonv1.EventType{commonv1.EventType_EVENT_TYPE_INTEGRATION_FAILED}})
		require.NoError(t, err)
		require.Len(t, log.GetEntries(), 1)
		ctx := log.GetEntries()[0].GetContext().AsMap()
		require.Equal(t, "api", ctx["level"])
		tail, _ := ctx["output_tail"].(string)
		require.True(t, strings.HasSuffix(tail, "FAIL: TestHabits (api)\n"), "the output's tail: %q", tail)
		require.LessOrEqual(t, len(tail), waveOutputTail+len("[…]"))
	})
}
