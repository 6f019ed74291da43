package main

import "syscall"

// prSetDumpable is prctl's PR_SET_DUMPABLE.
const prSetDumpable = 4

// hideEnvironment makes the agent process non-dumpable: a process of the same user that is not
// privileged (a task's command) can then neither read its /proc/PID/environ (the variables it
// was started with, secrets included) nor attach a debugger to it. Root can still; a sandbox
// (another user) is what stops it there.
func hideEnvironment() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0)
}
