package worker

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Issue 15 part 4: after a task's own validation, the project's levels run in order, codebase →
// api → ui, and the first failing one stops the later ones and fails the try (VALIDATION_FAILED
// naming the level, its output tail kept); the completion carries the level results.
func TestTaskValidationLevelsStopAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	// Each level's command is rewritten per case to append its name to a file of the case.
	level := func(_, exit string) *commonv1.TaskValidation {
		return &commonv1.TaskValidation{Command: "exit " + exit}
	}
	for _, tc := range []struct {
		name       string
		levels     *schedulerv1.ValidationLevels
		wantRan    []string
		wantResult []schedulerv1.ValidationLevel
		wantErr    string
	}{
		{"api fails: ui does not run", &schedulerv1.ValidationLevels{Codebase: level("codebase", "0"), Api: level("api", "1"), Ui: level("ui", "0")},
			[]string{"codebase", "api"}, []schedulerv1.ValidationLevel{schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, schedulerv1.ValidationLevel_VALIDATION_LEVEL_API}, "api validation failed"},
		{"codebase fails: nothing after it", &schedulerv1.ValidationLevels{Codebase: level("codebase", "2"), Api: level("api", "0"), Ui: level("ui", "0")},
			[]string{"codebase"}, []schedulerv1.ValidationLevel{schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE}, "codebase validation failed"},
		{"all pass", &schedulerv1.ValidationLevels{Codebase: level("codebase", "0"), Api: level("api", "0"), Ui: level("ui", "0")},
			[]string{"codebase", "api", "ui"}, []schedulerv1.ValidationLevel{schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, schedulerv1.ValidationLevel_VALIDATION_LEVEL_API, schedulerv1.ValidationLevel_VALIDATION_LEVEL_UI}, ""},
		{"ui not triggered by the task's changes", &schedulerv1.ValidationLevels{Codebase: level("codebase", "0"), Ui: level("ui", "1"), UiTriggerGlobs: []string{"web/**"}},
			[]string{"codebase"}, []schedulerv1.ValidationLevel{schedulerv1.ValidationLevel_VALIDATION_LEVEL_CODEBASE, schedulerv1.ValidationLevel_VALIDATION_LEVEL_UI}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran := tmpFile(t, "ran")
			levels := rewrite(tc.levels, ran)
			h := startWorker(t, nil)
			ca := claimed(t, &commonv1.Task{Id: "1", Title: "write", File: "out.txt", Command: "echo hi > out.txt"}, origin(t))
			ca.Options.MaxRetries = proto.Int32(0)
			ca.Validation = levels
			h.sched.push(ca)
			c := h.complete()
			require.Equal(t, tc.wantRan, lines(t, ran))
			var got []schedulerv1.ValidationLevel
			for _, r := range c.GetLevelResults() {
				got = append(got, r.GetLevel())
			}
			require.Equal(t, tc.wantResult, got)
			if tc.wantErr == "" {
				require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
				return
			}
			require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult())
			require.Equal(t, "VALIDATION_FAILED", c.GetError().GetCode())
			require.Contains(t, c.GetError().GetMessage(), tc.wantErr)
			require.Contains(t, c.GetValidationOutputTail(), "output", "the failing level's output tail")
		})
	}
}

// rewrite points the levels' commands at ran (each appends its name to it).
func rewrite(in *schedulerv1.ValidationLevels, ran string) *schedulerv1.ValidationLevels {
	out := proto.Clone(in).(*schedulerv1.ValidationLevels)
	for name, tv := range map[string]*commonv1.TaskValidation{"codebase": out.Codebase, "api": out.Api, "ui": out.Ui} {
		if tv == nil {
			continue
		}
		exit := tv.GetCommand()[len(tv.GetCommand())-1:]
		tv.Command = "echo " + name + " >> " + shq(ran) + "; echo " + name + " output; exit " + exit
	}
	return out
}

// Issue 15 part 4 (seed 003): the project's full test command (the codebase level) runs after
// every task, not only at the wave's integration.
func TestFullSuiteRunsAfterEachTask(t *testing.T) {
	t.Parallel()
	ran := tmpFile(t, "ran")
	h := startWorker(t, nil)
	repo := origin(t)
	for _, id := range []string{"1", "2"} {
		ca := claimed(t, &commonv1.Task{Id: id, Title: "write", File: "out" + id + ".txt", Command: "echo hi > out" + id + ".txt"}, repo)
		ca.Validation = &schedulerv1.ValidationLevels{Codebase: &commonv1.TaskValidation{Command: "echo suite >> " + shq(ran)}}
		h.sched.push(ca)
		c := h.complete()
		require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	}
	require.Equal(t, []string{"suite", "suite"}, lines(t, ran))
}

// Issue 15 part 4: every wave's integration (not only the last) runs the levels on the integrated
// commit, codebase → api → ui, stopping at the first failing one; the failure fails the
// integration VALIDATION_FAILED naming the level, with its output tail. A level whose trigger
// globs match nothing the wave changed does not run.
func TestWaveIntegrationRunsEveryLevel(t *testing.T) {
	t.Parallel()
	level := func(exit string) *commonv1.TaskValidation { return &commonv1.TaskValidation{Command: "exit " + exit} }
	integration := func(repo string) *schedulerv1.ClaimedAssignment {
		ca := claimed(t, &commonv1.Task{Id: "wave-1"}, "")
		ca.Task = nil
		ca.Assignment.Kind, ca.Assignment.WaveNumber = schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, 1
		ca.Assignment.TaskId = ""
		if repo != "" {
			ca.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: repo}, BaseRef: "main"}
			ca.BaseCommit = gitT(t, repo, "rev-parse", "HEAD")
		}
		return ca
	}

	ran := tmpFile(t, "ran")
	h := startWorker(t, nil)
	ca := integration("")
	ca.Validation = rewrite(&schedulerv1.ValidationLevels{Codebase: level("0"), Api: level("1"), Ui: level("0")}, ran)
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, []string{"codebase", "api"}, lines(t, ran), "ui does not run after a failing api level")
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult())
	require.Equal(t, "VALIDATION_FAILED", c.GetError().GetCode())
	require.Contains(t, c.GetError().GetMessage(), "API validation failed")
	require.Contains(t, c.GetValidationOutputTail(), "api output")
	require.Len(t, c.GetLevelResults(), 2)

	// On a repository: the wave changed nothing under server/, so the api level is not triggered.
	ran = tmpFile(t, "ran")
	ca = integration(origin(t))
	ca.Validation = rewrite(&schedulerv1.ValidationLevels{Codebase: level("0"), Api: level("1"), ApiTriggerGlobs: []string{"server/**"}, Ui: level("0")}, ran)
	h.sched.push(ca)
	c = h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
	require.Equal(t, []string{"codebase", "ui"}, lines(t, ran))
}
