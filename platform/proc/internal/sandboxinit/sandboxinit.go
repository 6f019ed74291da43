// Package sandboxinit is the init of a process started by a namespaced proc.Run, as
// "converge-sandbox-init": the small binary of that name (platform/proc/cmd/converge-sandbox-init),
// or the server's own binary re-executed when that one is not beside it. It finishes the sandbox
// and executes the command. It imports nothing but os and syscall so that the small binary stays
// small and, in a server binary, Go initialises it as early as it can (packages are initialised in
// import-path order once their imports are): before the server's protobuf registries, gRPC, CEL
// and SQLite, whose initialisation a check would otherwise wait for on every run (issue 17, P6).
package sandboxinit

import (
	"os"
	"syscall"
)

// Arg is argv[0] of the re-executed binary.
const Arg = "converge-sandbox-init"

func init() { Run() }

// Run, in a process started as Arg, finishes the sandbox (private mounts, a fresh /proc, no
// capabilities, no_new_privs) and executes the command; it never returns then. In any other
// process it does nothing.
func Run() {
	if len(os.Args) < 2 || os.Args[0] != Arg {
		return
	}
	if os.Getpid() != 1 {
		// proc.Run starts the init as PID 1 of a new PID namespace, inside a new mount
		// namespace. Anywhere else (a caller that named itself so), the mounts below would
		// change the caller's namespace: a fresh /proc over the host's, mounts made private.
		fail(126, "converge sandbox: not the init of a new PID namespace: refusing to set up the sandbox")
	}
	if err := setup(); err != nil {
		fail(126, "converge sandbox: "+err.Error())
	}
	argv := os.Args[1:]
	path := argv[0]
	if !hasSlash(path) {
		p, ok := lookPath(path, os.Getenv("PATH"))
		if !ok {
			fail(127, "converge sandbox: "+path+": command not found")
		}
		path = p
	}
	err := syscall.Exec(path, argv, os.Environ())
	fail(126, "converge sandbox: exec "+argv[0]+": "+err.Error())
}

func fail(code int, msg string) {
	_, _ = os.Stderr.WriteString(msg + "\n")
	os.Exit(code)
}

func hasSlash(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return true
		}
	}
	return false
}

// lookPath finds an executable regular file name in the directories of path (":"-separated, an
// empty one is ".").
func lookPath(name, path string) (string, bool) {
	start := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != ':' {
			continue
		}
		dir := path[start:i]
		start = i + 1
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// itoa formats a small non-negative number.
func itoa(n uintptr) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// sandboxError is an error of the setup.
type sandboxError struct{ msg string }

func (e *sandboxError) Error() string { return e.msg }

func errorf(what string, err error) error { return &sandboxError{msg: what + ": " + err.Error()} }
