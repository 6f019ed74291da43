package proc

import (
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// outputPipe answers a pipe whose read end is in the runtime's poller and whose write end (the
// child's stdout and stderr) is blocking, as os.Pipe's is once the child has it, without
// os.Pipe's registering of the write end in the poller, exec's switching it back to blocking and
// its unregistering at close: five system calls fewer per run (issue 17, the agent's CPU per
// no-op task).
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.SetNonblock(p[0], true); err != nil {
		_ = syscall.Close(p[0])
		_ = syscall.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// bootTicks answers the time since boot in the clock ticks of /proc/<pid>/stat's starttime
// (USER_HZ, 100 a second on every Linux), or -1.
func bootTicks() int64 {
	var ts syscall.Timespec
	const clockBoottime = 7
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockBoottime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return -1
	}
	return (ts.Sec*1e9 + ts.Nsec) / 1e7
}

// record tells groups that the group of pid started. A GroupDir needs the leader's start time,
// which the kernel takes from the boot clock in the fork: when the clock showed the same tick
// before the fork (ticks) and after it, that tick is the start time, without reading
// /proc/<pid>/stat (an open, a read that formats the whole line, a close: 5 % of the agent's CPU
// per no-op task, issue 17); otherwise (a fork that straddles a tick, one in tens) it is read.
func record(groups Recorder, pid int, ticks int64) {
	g, ok := groups.(*GroupDir)
	if !ok || ticks < 0 || bootTicks() != ticks {
		groups.Started(pid)
		return
	}
	g.startedAt(pid, strconv.FormatInt(ticks, 10))
}
