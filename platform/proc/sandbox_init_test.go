package proc_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/proc"
)

var smallInit struct {
	once sync.Once
	path string
	err  error
}

// TestMain removes the init builtInit built, and the emptied run cgroups kept under the parents
// DetectSandbox made.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, name := range []string{"converge-proc-test", "converge-proc-bench"} {
		if dir, err := proc.CgroupDir(name); err == nil {
			proc.ReleaseCgroups(dir)
		}
	}
	if smallInit.path != "" {
		_ = os.RemoveAll(filepath.Dir(smallInit.path))
	}
	os.Exit(code)
}

// builtInit answers converge-sandbox-init built once for the tests, in a directory the sandbox
// user cannot search (mode 0700, root's): the run reaches it through its descriptor only.
func builtInit(t testing.TB) string {
	t.Helper()
	smallInit.once.Do(func() {
		dir, err := os.MkdirTemp("", "converge-init-")
		if err != nil {
			smallInit.err = err
			return
		}
		smallInit.path = filepath.Join(dir, proc.InitName)
		out, err := exec.Command("go", "build", "-o", smallInit.path, "github.com/converge-dev/converge/platform/proc/cmd/converge-sandbox-init").CombinedOutput()
		if err != nil {
			smallInit.err = errors.New(string(out))
		}
	})
	require.NoError(t, smallInit.err)
	return smallInit.path
}

// namespaced answers the sandbox this host allows with namespaces, or fails the test.
func namespaced(t *testing.T) *proc.Sandbox {
	t.Helper()
	s := sandbox(t)
	if !s.Namespaces {
		t.Fatalf("this test needs namespaces: %+v", s)
	}
	return s
}

// Sandbox.Init is what a namespaced run starts first, as argv[0] converge-sandbox-init followed
// by the command's absolute path: a binary that is not the init (false) ends the run with its own
// status instead of the command's.
func TestSandboxInitIsWhatANamespacedRunStarts(t *testing.T) {
	t.Parallel()
	s := *namespaced(t)
	s.Init = builtInit(t)
	res := proc.Run(t.Context(), proc.Spec{Shell: "echo in the sandbox; exit 3", Dir: "/", Env: proc.Env(nil, nil), Timeout: 30 * time.Second, Sandbox: &s})
	require.NoError(t, res.Err)
	require.Equal(t, 3, res.ExitCode, res.Output)
	require.Equal(t, "in the sandbox\n", res.Output)

	falseBin, err := exec.LookPath("false")
	require.NoError(t, err)
	s.Init = falseBin
	res = proc.Run(t.Context(), proc.Spec{Shell: "exit 3", Dir: "/", Env: proc.Env(nil, nil), Timeout: 30 * time.Second, Sandbox: &s})
	require.NoError(t, res.Err)
	require.Equal(t, 1, res.ExitCode, "false ran instead of the init: %s", res.Output)
}

// An init that was asked for (Sandbox.Init, $CONVERGE_SANDBOX_INIT) and is missing is an error
// that says what to do, not a silent fallback; neither asked for nor beside the running binary
// (as this test binary), the running binary is the init, and DetectSandbox says which.
func TestSandboxInitMissingIsAClearError(t *testing.T) {
	s := *namespaced(t)
	s.Init = filepath.Join(t.TempDir(), proc.InitName)
	res := proc.Run(t.Context(), proc.Spec{Argv: []string{"true"}, Dir: "/", Env: proc.Env(nil, nil), Timeout: 30 * time.Second, Sandbox: &s})
	require.ErrorIs(t, res.Err, proc.ErrSandboxInit)
	require.ErrorIs(t, res.Err, os.ErrNotExist)
	require.Contains(t, res.Err.Error(), "make build")
	require.Contains(t, res.Err.Error(), proc.EnvSandboxInit)

	s.Init = "relative/" + proc.InitName
	res = proc.Run(t.Context(), proc.Spec{Argv: []string{"true"}, Dir: "/", Env: proc.Env(nil, nil), Timeout: 30 * time.Second, Sandbox: &s})
	require.ErrorIs(t, res.Err, proc.ErrSandboxInit)

	_, rep := proc.DetectSandbox(t.Context(), nobody, nobody, "converge-proc-test")
	require.Contains(t, rep.Init, "the server binary itself", "a test binary has no init beside it")

	t.Setenv(proc.EnvSandboxInit, builtInit(t))
	sb, rep := proc.DetectSandbox(t.Context(), nobody, nobody, "converge-proc-test")
	require.True(t, sb.Namespaces, "%+v", rep)
	require.Equal(t, builtInit(t), rep.Init)

	t.Setenv(proc.EnvSandboxInit, s.Init)
	sb, _ = proc.DetectSandbox(t.Context(), nobody, nobody, "converge-proc-test")
	require.False(t, sb.Namespaces, "a missing init turns namespaces off, as any failed probe")
}

// The shipped init started by anyone else changes nothing: without its argv[0] it prints its
// usage; as converge-sandbox-init but not PID 1 of a new PID namespace (here in a user and mount
// namespace of its own, so that a mount could not reach the host) it refuses before mounting.
func TestSandboxInitBinaryRefusesOutsideTheSandbox(t *testing.T) {
	t.Parallel()
	bin := builtInit(t)
	out, err := exec.Command(bin, "true").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "usage: converge-sandbox-init")

	cmd := exec.Command(bin, "/bin/true")
	cmd.Args[0] = proc.InitName
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Equal(t, 126, cmd.ProcessState.ExitCode(), "output: %s", out)
	require.True(t, strings.Contains(string(out), "not the init of a new PID namespace"), "output: %s", out)
}

// envReportInit asks the test binary, copied beside an init, to print DetectSandbox's Init.
const envReportInit = "CONVERGE_PROC_TEST_REPORT_INIT"

// A binary with converge-sandbox-init beside it (as make build and the images lay them out)
// starts its sandboxed runs with that one, and says so: here the test binary copied into a
// directory with the built init, asked (TestHelperReportInit) what DetectSandbox found.
func TestSandboxInitBesideTheBinaryIsFound(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	self, err := os.Executable()
	require.NoError(t, err)
	copyFile(t, self, filepath.Join(dir, "server"))
	copyFile(t, builtInit(t), filepath.Join(dir, proc.InitName))
	cmd := exec.Command(filepath.Join(dir, "server"), "-test.run", "^TestHelperReportInit$")
	cmd.Env = append(os.Environ(), envReportInit+"=1", proc.EnvSandboxInit+"=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "init="+filepath.Join(dir, proc.InitName)+"\n")
	require.Contains(t, string(out), "namespaces=true")
}

// TestHelperReportInit prints DetectSandbox's Init and whether a sandboxed run worked, for
// TestSandboxInitBesideTheBinaryIsFound; it does nothing in a plain test run.
func TestHelperReportInit(t *testing.T) {
	if os.Getenv(envReportInit) == "" {
		t.Skip("started by TestSandboxInitBesideTheBinaryIsFound only")
	}
	sb, rep := proc.DetectSandbox(t.Context(), nobody, nobody, "converge-proc-test")
	fmt.Printf("namespaces=%v\ninit=%s\n", sb.Namespaces, rep.Init)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}
