package scheduler

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/store"
)

// Eager dispatch follows dependencies, not waves: a dependency that completed without a commit
// (nothing of it to integrate) satisfies its dependents at once, so a chain whose waves are its
// dependency levels runs ahead of its waves; a dependent of two waits for both.
func TestEagerDispatchFollowsCommitlessDependencies(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		task := func(id, file string, deps ...string) *commonv1.Task {
			return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true", File: file, DependsOn: deps}
		}
		// Waves are the levels: A and B (1), C after A (2), D after C and B (3), E after C (3).
		spec := func(name string) *schedulerv1.TaskListSpec {
			return &schedulerv1.TaskListSpec{Name: name, Tasks: []*commonv1.Task{task("A", "a.txt"), task("B", "b.txt"),
				task("C", "c.txt", "A"), task("D", "d.txt", "C", "B"), task("E", "e.txt", "C")}}
		}
		for _, mode := range []schedulerv1.DispatchMode{schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES, schedulerv1.DispatchMode_DISPATCH_MODE_EAGER} {
			eager := mode == schedulerv1.DispatchMode_DISPATCH_MODE_EAGER
			t.Run(mode.String(), func(t *testing.T) {
				b := runBundle(t, st)
				e := b.start(t, b.createList(t, spec("levels-"+mode.String())), &schedulerv1.ExecutionOptions{Dispatch: mode})
				require.EqualValues(t, 3, e.GetWaveCount())
				done := func(c *schedulerv1.ClaimedAssignment) {
					t.Helper()
					_, err := b.complete(t.Context(), c, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED)
					require.NoError(t, err)
				}
				a, bb := b.claim(t, "agent-1", 0), b.claim(t, "agent-2", 0)
				require.Equal(t, []string{"A", "B"}, []string{a.GetAssignment().GetTaskId(), bb.GetAssignment().GetTaskId()})
				done(a) // no commit
				c := b.claim(t, "agent-1", 0)
				if !eager {
					require.Nil(t, c, "strict: wave 2 waits for wave 1")
					done(bb)
					require.ElementsMatch(t, []string{"C", "D", "E"}, b.work(t, "agent-1", e.GetId(), succeed))
				} else {
					require.Equal(t, "C", c.GetAssignment().GetTaskId(), "A completed without a commit: C need not wait for wave 1")
					require.EqualValues(t, 2, c.GetAssignment().GetWaveNumber())
					require.Nil(t, b.claim(t, "agent-3", 0), "D and E wait for C")
					done(c)
					ee := b.claim(t, "agent-1", 0)
					require.Equal(t, "E", ee.GetAssignment().GetTaskId(), "C done: E starts while B (wave 1) still runs")
					require.Nil(t, b.claim(t, "agent-3", 0), "D still waits for B")
					done(bb)
					d := b.claim(t, "agent-2", 0)
					require.Equal(t, "D", d.GetAssignment().GetTaskId())
					done(ee)
					done(d)
				}
				got := b.waitEnded(t, e.GetId())
				require.Equal(t, commonv1.Outcome_OUTCOME_CONVERGED_PENDING_HUMAN, got.GetOutcome(), got.GetStatusMessage())
				require.EqualValues(t, 5, got.GetCompletedTasks())

				log := logOf(t, b, e.GetId())
				lease := func(task string) int64 { return seqOf(log, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, task, 0) }
				completed := func(task string) int64 { return seqOf(log, commonv1.EventType_EVENT_TYPE_TASK_COMPLETED, task, 0) }
				waveDone := func(n int32) int64 { return seqOf(log, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", n) }
				require.Less(t, waveDone(1), waveDone(2))
				require.Less(t, waveDone(2), waveDone(3))
				for _, dep := range [][2]string{{"A", "C"}, {"C", "D"}, {"B", "D"}, {"C", "E"}} {
					require.Less(t, completed(dep[0]), lease(dep[1]), "%s before %s", dep[0], dep[1])
				}
				if eager {
					require.Less(t, lease("C"), waveDone(1), "C started before its dependency's wave ended")
					require.Less(t, lease("E"), waveDone(1), "E too, two levels down")
					require.Less(t, lease("D"), completed("E"), "D started while E (wave 3) ran")
				} else {
					require.Less(t, waveDone(1), lease("C"))
					require.Less(t, waveDone(2), lease("D"))
				}
				_, waves := b.execution(t, e.GetId())
				for i, want := range []int32{2, 1, 2} {
					require.Equal(t, want, waves[i].GetCompletedCount(), "wave %d", i+1)
				}
			})
		}
	})
}

// A dependency that committed still holds its dependents until its wave is integrated: they
// start from the integration, which has its commit.
func TestEagerDispatchWaitsForTheIntegrationOfACommit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, st store.Store) {
		dir, _ := servedRepo(t)
		b := runBundle(t, st)
		task := func(id, file string, deps ...string) *commonv1.Task {
			return &commonv1.Task{Id: id, Title: "task " + id, Action: commonv1.TaskAction_TASK_ACTION_RUN, Command: "true", File: file, DependsOn: deps}
		}
		spec := &schedulerv1.TaskListSpec{Name: "commits", Repository: &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}},
			Tasks: []*commonv1.Task{task("A", "a.txt"), task("B", "b.txt"), task("C", "c.txt", "A")}}
		e := b.start(t, b.createList(t, spec), nil)
		require.Equal(t, schedulerv1.DispatchMode_DISPATCH_MODE_EAGER, e.GetOptions().GetDispatch())
		a, bb := b.claim(t, "agent-1", 0), b.claim(t, "agent-2", 0)
		require.Equal(t, []string{"A", "B"}, []string{a.GetAssignment().GetTaskId(), bb.GetAssignment().GetTaskId()})

		// A commits a.txt on its base, as its agent would.
		gitIn(t, dir, "checkout", "-q", "--detach", a.GetBaseCommit())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644))
		gitIn(t, dir, "add", "-A")
		gitIn(t, dir, "commit", "-q", "-m", "Task A")
		sha := gitIn(t, dir, "rev-parse", "HEAD")
		gitIn(t, dir, "update-ref", a.GetTaskRef(), sha)
		gitIn(t, dir, "checkout", "-q", "main")
		_, err := b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: a.GetAssignment().GetId(), InstanceId: "agent-1",
			FencingToken: a.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1,
			CommitSha: sha, TaskRef: a.GetTaskRef()})
		require.NoError(t, err)
		require.Nil(t, b.claim(t, "agent-1", 0), "A's commit is not on the run branch yet: C waits for wave 1's integration")
		_, err = b.complete(t.Context(), bb, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED) // B: no commit
		require.NoError(t, err)

		in := b.claim(t, "agent-2", 0)
		require.Equal(t, schedulerv1.AssignmentKind_ASSIGNMENT_KIND_INTEGRATION, in.GetAssignment().GetKind(), "wave 1 integrates A's commit")
		require.Nil(t, b.claim(t, "agent-1", 0), "C waits while wave 1 integrates")
		_, err = b.client.CompleteTask(t.Context(), &schedulerv1.CompleteTaskRequest{AssignmentId: in.GetAssignment().GetId(), InstanceId: "agent-2",
			FencingToken: in.GetAssignment().GetFencingToken(), Result: schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, Tries: 1, CommitSha: sha})
		require.NoError(t, err)
		c := b.claim(t, "agent-1", 0)
		require.Equal(t, "C", c.GetAssignment().GetTaskId())
		require.Equal(t, sha, c.GetBaseCommit(), "C starts from wave 1's integration")

		log := logOf(t, b, e.GetId())
		require.Less(t, seqOf(log, commonv1.EventType_EVENT_TYPE_WAVE_COMPLETED, "", 1), seqOf(log, commonv1.EventType_EVENT_TYPE_LEASE_GRANTED, "C", 0))
	})
}
