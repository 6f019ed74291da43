package executor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/converge-dev/converge/platform/proc"
)

// Sandbox says how task processes (the command and agent-cli executors' processes and
// validation commands, all of which a task list chooses) are confined beyond a minimal
// environment and a process group of their own. It runs them in the shared sandbox of package
// proc (proc.Sandbox, the Verifier's), as the agent's own user:
//
// SandboxNamespaces runs each in new user, PID and mount namespaces (root inside is the agent's
// uid on the host, with no capabilities and no_new_privs): the process sees a /proc of its own,
// so the agent and every other process of the host are invisible to it (no /proc/PID/environ or
// cmdline of the agent to read, no signal to send it), and when its leader dies (the try ends,
// or the agent dies: the kernel's parent-death signal) the kernel kills every process in the
// namespace, setsid or not. SandboxNoNetwork adds a network namespace with only a loopback
// interface. Neither changes the user, nor hides files the agent's user can read (its token file
// included): run agents as a user of their own. Hosts that forbid the namespaces (a container
// without CAP_SYS_ADMIN, user namespaces disabled) are found by CheckSandbox at start.
//
// Whatever the mode, WithCgroupParent gives each process a cgroup (v2) of its own, killed whole
// when the process ends or times out: nothing a task started (setsid children included)
// outlives its run.
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

// WithCgroupParent runs each process in a cgroup of its own under dir (a proc.CgroupDir; "":
// none).
func WithCgroupParent(dir string) Option { return func(o *options) { o.cgroupParent = dir } }

// proc answers the proc.Sandbox of s with runs' cgroups under cgroupParent (nil: none at all).
func (s Sandbox) proc(cgroupParent string) *proc.Sandbox {
	if s == SandboxNone && cgroupParent == "" {
		return nil
	}
	return &proc.Sandbox{UID: -1, GID: -1, Namespaces: s != SandboxNone, NoNetwork: s == SandboxNoNetwork, CgroupParent: cgroupParent}
}

// spec applies o's sandbox to a process spec.
func (o *options) spec(p proc.Spec) proc.Spec {
	p.Sandbox = o.sandbox.proc(o.cgroupParent)
	return p
}

// CheckSandbox runs a process in the sandbox and answers why it cannot be used, or nil.
func CheckSandbox(ctx context.Context, s Sandbox) error {
	if s == SandboxNone {
		return nil
	}
	res := proc.Run(ctx, proc.Spec{Shell: `[ "$$" = 1 ]`, Env: proc.Env(nil, nil), Dir: "/", Timeout: 10 * time.Second, Sandbox: s.proc("")})
	if res.Err != nil || res.ExitCode != 0 {
		return fmt.Errorf("sandbox %s does not work on this host (%s%v): %s", s, res.Status, res.Err, strings.TrimSpace(res.Output))
	}
	return nil
}
