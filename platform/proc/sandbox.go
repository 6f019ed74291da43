package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/converge-dev/converge/platform/proc/internal/sandboxinit"
)

// Sandbox confines the processes Run starts with Spec.Sandbox, as far as the host allows:
//
//   - Namespaces (Linux): a user namespace whose root is the host's UID (an unprivileged user
//     when the caller is root, the caller itself otherwise), a PID namespace (the process is
//     PID 1 of its own tree: it sees no other process, and when it dies the kernel kills
//     everything left in the namespace, setsid or not) and a mount namespace with a fresh /proc
//     (the caller's /proc/<pid>/environ is not reachable). The command runs with no capabilities
//     and no_new_privs. The network is shared, unless NoNetwork: a network namespace of its own
//     (a loopback interface, down; no route out).
//   - Without namespaces, a caller that is root still runs the process as UID/GID (so the
//     caller's /proc/<pid>/environ, mode 0400, is unreadable); otherwise the process runs as the
//     caller: what it can read, the caller's environment included, it reads.
//   - CgroupParent (cgroup v2, writable): each run gets a cgroup of its own under it, killed as a
//     whole (cgroup.kill) when the run ends or times out, so nothing that left the process group
//     survives either. An emptied one is kept for a later run (cgroup.go): a process that stops
//     calls ReleaseCgroups (or KillCgroups) for each CgroupParent it used.
//
// DetectSandbox tries what the host allows and answers a Sandbox with what works and a
// description of what does not. A Sandbox is safe for concurrent use.
//
// A namespaced run starts an init that finishes the sandbox inside the namespaces and executes
// the command: the small converge-sandbox-init binary (InitName) when it is beside the running
// binary (as `make build` and the container images ship it) or named by Sandbox.Init or
// $CONVERGE_SANDBOX_INIT (missing, it is an error: Result.Err wraps ErrSandboxInit); otherwise the
// running binary itself, re-executed (package proc/internal/sandboxinit's init is the same init in
// every binary that imports proc), which costs the start of the whole server binary on every run.
type Sandbox struct {
	// UID and GID are the host user and group the process runs as; -1: the caller's.
	UID, GID int
	// Namespaces runs the process in new user, PID and mount namespaces.
	Namespaces bool
	// NoNetwork (with Namespaces) adds a network namespace: the process reaches no network.
	NoNetwork bool
	// CgroupParent is a cgroup v2 directory runs get cgroups under; "": none.
	CgroupParent string
	// Init is the absolute path of the converge-sandbox-init binary namespaced runs start; "":
	// $CONVERGE_SANDBOX_INIT, else the one beside the running binary, else the running binary.
	Init string
}

// initArg is argv[0] of the re-executed binary that sets up the namespaces before the command.
const initArg = sandboxinit.Arg

// SandboxInit, in a process started by a namespaced Run, finishes the sandbox (private mounts,
// a fresh /proc, no capabilities, no_new_privs) and executes the command; it never returns then.
// In any other process it does nothing. Package internal/sandboxinit's init already does it, as
// early in the process's initialisation as Go allows, for every binary that imports proc.
func SandboxInit() { sandboxinit.Run() }

// ErrSandboxUnavailable wraps why DetectSandbox could not use a mechanism.
var ErrSandboxUnavailable = errors.New("proc: sandbox unavailable")

// SandboxReport says what DetectSandbox found.
type SandboxReport struct {
	// Namespaces is why namespaces are off ("" when on).
	Namespaces string
	// Cgroup is why per-run cgroups are off ("" when on).
	Cgroup string
	// User is why the process runs as the caller ("" when it runs as the sandbox user).
	User string
	// Init is the init binary namespaced runs start (its path), or why it is the server's own
	// binary or unusable; "" when namespaces are off.
	Init string
}

// String describes what is not isolated, for the log.
func (r SandboxReport) String() string {
	var parts []string
	if r.Namespaces != "" {
		parts = append(parts, "no namespaces ("+r.Namespaces+"): the command sees the host's processes and /proc")
	}
	if r.User != "" {
		parts = append(parts, "runs as the server's own user ("+r.User+"): it can read what the server can, its /proc/<pid>/environ included")
	}
	if r.Cgroup != "" {
		parts = append(parts, "no cgroup ("+r.Cgroup+"): a process that leaves the group (setsid) survives the timeout unless the PID namespace holds it")
	}
	if len(parts) == 0 {
		return "full: user, PID and mount namespaces, a fresh /proc, its own uid, a cgroup per run"
	}
	return strings.Join(parts, "; ")
}

// DetectSandbox answers the sandbox the host allows for a process that should run as uid:gid
// (used only when the caller is root; otherwise the caller's own ids), and what is not available.
// cgroupName names the directory made under the caller's cgroup for the runs' cgroups.
func DetectSandbox(ctx context.Context, uid, gid int, cgroupName string) (*Sandbox, SandboxReport) {
	var rep SandboxReport
	s := &Sandbox{UID: -1, GID: -1}
	if os.Geteuid() == 0 {
		s.UID, s.GID = uid, gid
	} else {
		rep.User = "the server is not root: it cannot switch to another uid"
	}
	s.Namespaces = true
	rep.Init = s.initReport()
	if err := s.probe(ctx); err != nil {
		rep.Init = ""
		s.Namespaces = false
		rep.Namespaces = err.Error()
		if s.UID >= 0 {
			if err := s.probe(ctx); err != nil {
				s.UID, s.GID = -1, -1
				rep.User = err.Error()
			}
		}
	}
	if dir, err := cgroupDir(cgroupName); err != nil {
		rep.Cgroup = err.Error()
	} else {
		s.CgroupParent = dir
		if err := s.probe(ctx); err != nil {
			ReleaseCgroups(dir)
			s.CgroupParent = ""
			rep.Cgroup = err.Error()
		}
	}
	return s, rep
}

// probe runs `true` in the sandbox.
func (s *Sandbox) probe(ctx context.Context) error {
	res := Run(ctx, Spec{Argv: []string{"true"}, Env: Env(nil, nil), Dir: "/", Timeout: 10 * time.Second, Sandbox: s})
	if res.Err != nil {
		return res.Err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(res.Output))
	}
	return nil
}

// prepare adjusts cmd's attributes for the sandbox and answers a cgroup to kill and remove at
// the end (nil: none).
func (s *Sandbox) prepare(attr *syscall.SysProcAttr) (*runCgroup, error) {
	if s.Namespaces {
		uid, gid := s.UID, s.GID
		if uid < 0 {
			uid, gid = os.Geteuid(), os.Getegid()
		}
		attr.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS
		if s.NoNetwork {
			attr.Cloneflags |= syscall.CLONE_NEWNET
		}
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The child becomes root of the namespace (the host's uid): the ids it was cloned with
		// are not mapped there, and an unmapped process gets no capability to set up the mounts.
		attr.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	} else if s.UID >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.GID), NoSetGroups: false, Groups: []uint32{}}
	}
	if s.CgroupParent == "" {
		return nil, nil
	}
	cg, err := poolOf(s.CgroupParent).get()
	if err != nil {
		return nil, err
	}
	// The child is cloned into the cgroup (clone3's CLONE_INTO_CGROUP): no move after the start.
	attr.UseCgroupFD = true
	attr.CgroupFD = cg.fd
	return cg, nil
}

// argv answers what to execute for argv: the re-executed init when namespaces are on.
func (s *Sandbox) argv(argv []string) (path string, args []string, err error) {
	if !s.Namespaces {
		return "", argv, nil
	}
	// A link, not the path it names: the sandbox user may not be able to reach the binary's
	// directory (a magic link is followed without searching it).
	link, err := s.initLink()
	if err != nil {
		return "", nil, err
	}
	return link, append([]string{initArg}, argv...), nil
}
