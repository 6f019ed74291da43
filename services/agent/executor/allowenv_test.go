package executor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/agent/executor"
)

// A spec may name only the variables on the agent's allow-list (env_passthrough of the command
// and agent-cli executors, api_key_env of the openai one), and never a CONVERGE_* variable: a
// task list must not get the agent's secrets passed to its command or sent to its base_url.
func TestSpecsNameOnlyAllowedVariables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	command := func(names ...string) *commonv1.ExecutorSpec {
		return &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_Command{Command: &commonv1.CommandExecutor{EnvPassthrough: names}}}
	}
	cli := func(names ...string) *commonv1.ExecutorSpec {
		return &commonv1.ExecutorSpec{Kind: &commonv1.ExecutorSpec_AgentCli{AgentCli: &commonv1.AgentCliExecutor{Argv: []string{"cat"}, EnvPassthrough: names}}}
	}
	openai := func(name string) *commonv1.ExecutorSpec {
		s := openAISpec("http://127.0.0.1:1")
		s.GetOpenai().ApiKeyEnv = name
		return s
	}
	allow := executor.WithAllowedEnv("FAKE_KEY")
	for _, tc := range []struct {
		name string
		spec *commonv1.ExecutorSpec
		opts []executor.Option
		want string // "" = accepted
	}{
		{"command, allowed", command("FAKE_KEY"), []executor.Option{allow}, ""},
		{"command, not allowed", command("FAKE_KEY", "FAKE_SECRET"), []executor.Option{allow}, "command.env_passthrough names FAKE_SECRET, which is not on this agent's allow-list"},
		{"agent cli, not allowed", cli("FAKE_SECRET"), []executor.Option{allow}, "agent_cli.env_passthrough names FAKE_SECRET"},
		{"openai key, not allowed", openai("FAKE_SECRET"), []executor.Option{allow}, "openai.api_key_env names FAKE_SECRET"},
		{"openai key, allowed", openai("FAKE_KEY"), []executor.Option{allow}, ""},
		{"an empty allow-list allows nothing", command("FAKE_KEY"), []executor.Option{executor.WithAllowedEnv()}, "not on this agent's allow-list"},
		{"CONVERGE_ even when listed", command("CONVERGE_TOKEN"), []executor.Option{executor.WithAllowedEnv("CONVERGE_TOKEN")}, "CONVERGE_* variables are never passed"},
		{"CONVERGE_ without a list", openai("converge_token"), nil, "CONVERGE_* variables are never passed"},
	} {
		_, err := executor.New(tc.spec, append([]executor.Option{executor.WithLookupEnv(b.lookup)}, tc.opts...)...)
		if tc.want == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}
