package worker

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Issue 15 part 5: an executor that asks for a design change ends the task BLOCKED_DCR with the
// request's text at once (no further try): an agent CLI printing a DESIGN CHANGE REQUEST block,
// and a task's command exiting with DCRExitCode. What the try wrote is rolled back.
func TestDesignChangeRequestBlocksTheTask(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		spec *commonv1.ExecutorSpec
		cmd  string
		want string
	}{
		{"agent cli block", &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"sh", "-c",
			"echo run >> %COUNT%; echo partial > out.txt; printf 'thinking\\n## Design Change Request:\\nThe users table has no email column.\\nAdd one first.\\nEND DESIGN CHANGE REQUEST\\nbye\\n'"}}}},
			"", "The users table has no email column.\nAdd one first."},
		{"command exit code", nil, "echo run >> %COUNT%; echo partial > out.txt; echo 'greet.go must not exist yet'; exit " + strconv.Itoa(DCRExitCode),
			"greet.go must not exist yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := tmpFile(t, "count")
			spec, cmd := rebind(tc.spec, tc.cmd, count)
			repo := origin(t)
			h := startWorker(t, nil)
			ca := claimed(t, &commonv1.Task{Id: "1", Title: "dcr", File: "out.txt", Command: cmd}, repo) // max_retries 3
			ca.Options.Executor = spec
			h.sched.push(ca)
			c := h.complete()
			require.Equal(t, schedulerv1.CompletionResult_COMPLETION_RESULT_BLOCKED_DCR, c.GetResult(), "%v", c.GetError())
			require.Equal(t, "DESIGN_CHANGE_REQUEST", c.GetError().GetCode())
			require.Equal(t, tc.want, c.GetError().GetMessage())
			require.Equal(t, int32(1), c.GetTries())
			require.Equal(t, []string{"run"}, lines(t, count), "no further try")
			require.Empty(t, gitT(t, repo, "for-each-ref", "refs/converge"), "nothing committed")
		})
	}
}

// rebind replaces %COUNT% in the case's command (or agent CLI argv) with count's quoted path.
func rebind(spec *commonv1.ExecutorSpec, cmd, count string) (*commonv1.ExecutorSpec, string) {
	if cli := spec.GetAgentCli(); cli != nil {
		spec = proto.Clone(spec).(*commonv1.ExecutorSpec)
		argv := spec.GetAgentCli().Argv
		argv[len(argv)-1] = strings.ReplaceAll(argv[len(argv)-1], "%COUNT%", shq(count))
	}
	return spec, strings.ReplaceAll(cmd, "%COUNT%", shq(count))
}

func TestDesignChangeRequestParsing(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"DESIGN CHANGE REQUEST\nsplit the task":                           "split the task",
		"**design change request**:\n- a\n- b\nend design change request": "- a\n- b",
		"# DESIGN CHANGE REQUEST\n":                                       "(the executor asked for a design change without saying which)",
		"we need no DESIGN CHANGE REQUEST here":                           "",
		"all good":                                                        "",
	} {
		require.Equal(t, want, designChangeRequest(in), in)
	}
}
