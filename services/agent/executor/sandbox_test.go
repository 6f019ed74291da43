package executor_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/agent/executor"
)

// Issue 14 finding 5: in the namespaces sandbox a task's processes see a /proc of their own: the
// agent (here: the test process) and the host's other processes are invisible; without the
// sandbox they are not. namespaces-nonet leaves only the loopback interface. Validation
// commands run in the same sandbox.
func TestSandboxHidesTheAgent(t *testing.T) {
	t.Parallel()
	require.NoError(t, executor.CheckSandbox(t.Context(), executor.SandboxNamespaces), "this host runs the sandbox")
	b := setup(t)
	me := strconv.Itoa(os.Getpid())
	probe := `echo "pid=$$"; if [ -e /proc/` + me + `/environ ]; then echo agent=visible; else echo agent=hidden; fi; echo "ifaces=$(grep -c : /proc/net/dev)"`
	run := func(s executor.Sandbox) string {
		res, err := b.executor(t, nil, executor.WithSandbox(s)).Run(t.Context(), executor.Request{Dir: b.dir, Task: commandTask(probe), Timeout: time.Minute})
		require.NoError(t, err)
		return res.Output
	}
	none := run(executor.SandboxNone)
	require.Contains(t, none, "agent=visible", "the test sees what a task sees without a sandbox")
	require.NotContains(t, none, "pid=1\n")

	ns := run(executor.SandboxNamespaces)
	require.Contains(t, ns, "pid=1\n", "the task is the init of its PID namespace")
	require.Contains(t, ns, "agent=hidden")

	nonet := run(executor.SandboxNoNetwork)
	require.Contains(t, nonet, "agent=hidden")
	require.Contains(t, nonet, "ifaces=1\n", "only the loopback interface")

	v := executor.Validate(t.Context(), b.dir, &commonv1.TaskValidation{Command: `[ "$$" = 1 ] && [ ! -e /proc/` + me + ` ]`}, time.Minute, 0,
		executor.WithLookupEnv(b.lookup), executor.WithSandbox(executor.SandboxNamespaces))
	require.True(t, v.Passed, "%s", v.Output)

	_, err := executor.ParseSandbox("chroot")
	require.Error(t, err)
	for in, want := range map[string]executor.Sandbox{"": executor.SandboxNone, "none": executor.SandboxNone, "namespaces": executor.SandboxNamespaces, "namespaces-nonet": executor.SandboxNoNetwork} {
		got, err := executor.ParseSandbox(in)
		require.NoError(t, err)
		require.Equal(t, want, got, strings.TrimSpace(in))
	}
}
