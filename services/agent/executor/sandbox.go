package executor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/converge-dev/converge/platform/proc"
)

// Sandbox says how task processes (the command and agent-cli executors' processes and
// validation commands, all of which a task list chooses) are confined beyond a minimal
// environment and a process group of their own.
//
// SandboxNamespaces runs each in new PID and mount namespaces (util-linux unshare; as an
// unprivileged agent also a user namespace mapping it to root inside): the process sees a
// /proc of its own, so the agent and every other process of the host are invisible to it (no
// /proc/PID/environ or cmdline of the agent to read, no signal to send it), and when its leader
// dies (the try ends, or the agent dies: the kernel's parent-death signal) the kernel kills
// every process in the namespace. SandboxNoNetwork adds a network namespace with only a
// loopback interface. Neither changes the user, nor hides files the agent's user can read
// (its token file included): run agents as a user of their own. Hosts without unshare, or that
// forbid the namespaces (a container without CAP_SYS_ADMIN, user namespaces disabled), are
// found by CheckSandbox at start.
type Sandbox string

// Sandboxes.
const (
	SandboxNone       Sandbox = ""
	SandboxNamespaces Sandbox = "namespaces"
	SandboxNoNetwork  Sandbox = "namespaces-nonet"
)

// ParseSandbox reads a --sandbox value: "none" (or ""), "namespaces" or "namespaces-nonet".
func ParseSandbox(s string) (Sandbox, error) {
	switch strings.TrimSpace(s) {
	case "", "none":
		return SandboxNone, nil
	case string(SandboxNamespaces):
		return SandboxNamespaces, nil
	case string(SandboxNoNetwork):
		return SandboxNoNetwork, nil
	}
	return "", fmt.Errorf("sandbox %q: want none, namespaces or namespaces-nonet", s)
}

// WithSandbox confines the processes of New's command and agent-cli executors and of Validate
// as s says.
func WithSandbox(s Sandbox) Option { return func(o *options) { o.sandbox = s } }

// wrap answers argv run inside the sandbox (argv itself without one).
func (s Sandbox) wrap(argv []string) []string {
	if s == SandboxNone {
		return argv
	}
	w := []string{"unshare"}
	if os.Geteuid() != 0 {
		w = append(w, "--user", "--map-root-user")
	}
	w = append(w, "--pid", "--fork", "--kill-child", "--mount-proc")
	if s == SandboxNoNetwork {
		w = append(w, "--net")
	}
	return append(append(w, "--"), argv...)
}

// spec applies the sandbox to a process spec: a Shell line becomes sh -c inside it.
func (s Sandbox) spec(p proc.Spec) proc.Spec {
	if s == SandboxNone {
		return p
	}
	argv := p.Argv
	if len(argv) == 0 && p.Shell != "" {
		argv = []string{"sh", "-c", p.Shell}
	}
	p.Argv, p.Shell = s.wrap(argv), ""
	return p
}

// CheckSandbox runs a process in the sandbox and answers why it cannot be used, or nil.
func CheckSandbox(ctx context.Context, s Sandbox) error {
	if s == SandboxNone {
		return nil
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("sandbox %s needs util-linux's unshare on the PATH: %w", s, err)
	}
	res := proc.Run(ctx, s.spec(proc.Spec{Shell: `[ "$$" = 1 ]`, Env: proc.Env(nil, nil), Timeout: 10 * time.Second}))
	if res.Err != nil || res.ExitCode != 0 {
		return fmt.Errorf("sandbox %s does not work on this host (%s%v): %s", s, res.Status, res.Err, strings.TrimSpace(res.Output))
	}
	return nil
}
