package sandboxinit_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	_ "github.com/converge-dev/converge/platform/proc/internal/sandboxinit"
)

// TestInitOutsideAPIDNamespaceRefuses: the test binary started as the sandbox's init but not as
// PID 1 of a new PID namespace (here: in a new user and mount namespace of its own, so that a
// mount would not reach the host) refuses, exit status 126, before mounting anything: run as
// root in the host's namespace, the init would otherwise mount a fresh /proc over the host's.
func TestInitOutsideAPIDNamespaceRefuses(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "true")
	cmd.Args[0] = "converge-sandbox-init"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	out, err := cmd.CombinedOutput()
	if err != nil && !errors.As(err, new(*exec.ExitError)) {
		t.Skipf("no user namespaces here: %v", err)
	}
	require.Equal(t, 126, cmd.ProcessState.ExitCode(), "output: %s", out)
	require.True(t, strings.Contains(string(out), "not the init of a new PID namespace"), "output: %s", out)
}
