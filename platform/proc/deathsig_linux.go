package proc

import "syscall"

// setDeathSignal has the kernel send SIGKILL to the process when the thread that started it
// exits, which is when the calling process dies: Go ends a thread while the process runs only
// when a goroutine locked to it (runtime.LockOSThread) exits, so a caller must not run Run on
// such a goroutine and exit it while the process runs.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
