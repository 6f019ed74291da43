package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Issue 15 part 3: the checkpoint each try starts from is recorded with the Scheduler
// (RecordCheckpoint), and can be read back after a failed try: the commit before the try, its
// kind, the task's file hashes.
func TestCheckpointRecordedAtEachTry(t *testing.T) {
	t.Parallel()
	repo := origin(t)
	base := gitT(t, repo, "rev-parse", "HEAD")
	h := startWorker(t, nil)
	ca := claimed(t, &commonv1.Task{Id: "1", Title: "fails", File: "README.md", Command: "echo broken >> README.md; exit 3"}, repo)
	ca.Options.MaxRetries = proto.Int32(1)
	h.sched.push(ca)
	c := h.complete()
	require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult())
	cks := h.sched.recorded()
	require.Len(t, cks, 2, "one checkpoint per try")
	for i, ck := range cks {
		require.Equal(t, ca.GetAssignment().GetId(), ck.GetAssignmentId())
		require.Equal(t, ca.GetAssignment().GetFencingToken(), ck.GetFencingToken())
		require.Equal(t, base, ck.GetCheckpoint().GetGitRef(), "the commit before the try")
		require.Equal(t, []string{"README.md"}, []string{ck.GetCheckpoint().GetFiles()[0].GetPath()})
		require.NotEmpty(t, ck.GetCheckpoint().GetFiles()[0].GetSha256())
		require.Equal(t, []string{"before_try", "retry"}[i], ck.GetCheckpoint().GetMetadata()["kind"])
	}
	require.Contains(t, cks[1].GetCheckpoint().GetMetadata()["reason"], "exit status 3", "a retry's checkpoint says why")
}

// Issue 15 part 6: STUCK counts tasks, not tries. One task failing all its 4 tries is one failed
// task (consecutive_failures 1, not 4); three different tasks failing in a row are 3; a task
// that succeeds starts the count again.
func TestConsecutiveFailuresCountTasksNotTries(t *testing.T) {
	t.Parallel()
	h := startWorker(t, nil)
	fail := func(id string) *schedulerv1.ClaimedAssignment {
		return claimed(t, &commonv1.Task{Id: id, Title: "fails", Command: "exit 1"}, "") // max_retries 3: 4 tries
	}
	for i, id := range []string{"1", "2", "3"} {
		h.sched.push(fail(id))
		c := h.complete()
		require.Equal(t, int32(4), c.GetTries())
		require.Equal(t, int32(i+1), c.GetConsecutiveFailures(), "task %s", id)
	}
	h.sched.push(claimed(t, &commonv1.Task{Id: "4", Title: "works", Command: "true"}, ""))
	require.Zero(t, h.complete().GetConsecutiveFailures())
	h.sched.push(fail("5"))
	require.Equal(t, int32(1), h.complete().GetConsecutiveFailures())
}

// Issue 15 part 2: scope guards are checked on the try's diff before anything is pushed: a
// blocklisted or confirm-required path, too many files or too many lines fail the try with
// SCOPE_GUARD naming the paths, and nothing reaches the repository.
func TestScopeGuardsRefuseTheTry(t *testing.T) {
	t.Parallel()
	write := "mkdir -p src && echo a > src/a.go && echo b > src/b.go && printf '1\\n2\\n3\\n' > src/c.go && echo x > .env.local"
	task := &commonv1.Task{Id: "1", Title: "writes", Command: write,
		Files: []*commonv1.FileImpact{{Path: "src/", Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY}, {Path: ".env.local"}}}
	for _, tc := range []struct {
		name   string
		guards *schedulerv1.ScopeGuards
		want   string // "" = succeeds
	}{
		{"blocklist", &schedulerv1.ScopeGuards{BlocklistGlobs: []string{".env*"}}, "blocklisted paths (scope_guards.blocklist_globs): .env.local"},
		{"confirm required", &schedulerv1.ScopeGuards{ConfirmRequiredGlobs: []string{"src/b.go"}}, "need a person's confirmation (scope_guards.confirm_required_globs): src/b.go"},
		{"max files", &schedulerv1.ScopeGuards{MaxFilesPerIteration: 3}, "changed 4 files, more than scope_guards.max_files_per_iteration 3"},
		{"max lines", &schedulerv1.ScopeGuards{MaxLinesPerIteration: 5}, "changed 6 lines, more than scope_guards.max_lines_per_iteration 5"},
		{"within the guards", &schedulerv1.ScopeGuards{BlocklistGlobs: []string{"package.json"}, MaxFilesPerIteration: 4, MaxLinesPerIteration: 6}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			repo := origin(t)
			h := startWorker(t, nil)
			ca := claimed(t, task, repo)
			ca.Options.MaxRetries = proto.Int32(0)
			ca.ScopeGuards = tc.guards
			h.sched.push(ca)
			c := h.complete()
			refs := gitT(t, repo, "for-each-ref", "--format=%(refname)", "refs/converge")
			if tc.want == "" {
				require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_SUCCEEDED, c.GetResult(), "%v", c.GetError())
				require.NotEmpty(t, refs)
				return
			}
			require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_FAILED, c.GetResult())
			require.Equal(t, codeScopeGuard, c.GetError().GetCode())
			require.Contains(t, c.GetError().GetMessage(), tc.want)
			require.Empty(t, refs, "nothing was pushed")
			_, err := os.Stat(filepath.Join(repo, ".env.local"))
			require.True(t, os.IsNotExist(err))
			var warned bool
			for _, ev := range h.sched.events(c) {
				warned = warned || (ev.GetEventType() == commonv1.EventType_EVENT_TYPE_WARNING && strings.HasPrefix(ev.GetMessage(), "scope guard"))
			}
			require.True(t, warned, "a WARNING event names the guard and the paths")
		})
	}
}

// Issue 15 part 7: the agent takes the claim's options as the Scheduler resolved them: the tries
// of an assignment are max_retries + 1, whatever the value, with no number of its own.
func TestTriesAreTheResolvedMaxRetriesPlusOne(t *testing.T) {
	t.Parallel()
	h := startWorker(t, nil)
	for _, retries := range []int32{0, 1, 5} {
		count := tmpFile(t, "count")
		ca := claimed(t, &commonv1.Task{Id: "r" + string(rune('0'+retries)), Title: "fails", Command: "echo try >> " + shq(count) + "; exit 1"}, "")
		ca.Options.MaxRetries = proto.Int32(retries)
		ca.Options.AgentConfig.MaxRetries = proto.Int32(7) // the resolved top-level value decides
		h.sched.push(ca)
		c := h.complete()
		require.Equal(t, retries+1, c.GetTries())
		require.Len(t, lines(t, count), int(retries)+1)
	}
}
