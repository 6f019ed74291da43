package sandboxinit

import (
	"syscall"
	"unsafe"
)

const (
	prCapbsetDrop  = 24
	prSetNoNewPriv = 38
	capVersion3    = 0x20080522
)

// setup runs inside the new namespaces, before the command: mounts private (nothing propagates
// back), a fresh /proc of the new PID namespace over the host's, then every capability dropped
// (bounding set, effective, permitted, inheritable) and no_new_privs, so the command can neither
// undo the mounts nor gain privileges.
func setup() error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return errorf("make mounts private", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return errorf("mount a fresh /proc", err)
	}
	for c := uintptr(0); c < 64; c++ {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, c, 0); errno != 0 && errno != syscall.EINVAL {
			return errorf("drop capability "+itoa(c), errno)
		}
	}
	hdr := struct {
		version uint32
		pid     int32
	}{capVersion3, 0}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return errorf("drop capabilities", errno)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPriv, 1, 0); errno != 0 {
		return errorf("no_new_privs", errno)
	}
	return nil
}
