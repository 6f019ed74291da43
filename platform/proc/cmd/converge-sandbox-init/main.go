// Command converge-sandbox-init is the init of a process started by a namespaced proc.Run
// (platform/proc's Sandbox): PID 1 of the new user, PID and mount namespaces, it makes the mounts
// private, mounts a fresh /proc, drops every capability, sets no_new_privs and executes the
// command. proc.Run starts it as
//
//	converge-sandbox-init /absolute/path/of/the/command args...
//
// It is shipped beside the server binaries (make build, the container images) because it is small:
// it imports nothing but package sandboxinit (os, syscall), so a check starts after the runtime of
// a 1.5 MB binary instead of the server's 48 MB one re-executed as its own init (issue 17, P6).
// Started any other way — not as PID 1 of a new PID namespace — it refuses and changes nothing.
package main

import (
	"os"

	"github.com/converge-dev/converge/platform/proc/internal/sandboxinit"
)

func main() {
	// sandboxinit's own init already ran the sandbox for argv[0] == sandboxinit.Arg and executed
	// the command (or exited); whatever reaches main was not started by proc.Run.
	sandboxinit.Run()
	_, _ = os.Stderr.WriteString("usage: " + sandboxinit.Arg + " /path/of/command [args...]: started by platform/proc's sandbox as PID 1 of new namespaces only\n")
	os.Exit(2)
}
