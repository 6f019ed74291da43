package proc

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

const (
	prCapbsetDrop  = 24
	prSetNoNewPriv = 38
	capVersion3    = 0x20080522
)

// sandboxSetup runs in the re-executed init, inside the new namespaces, before the command:
// mounts private (nothing propagates back), a fresh /proc of the new PID namespace over the
// host's, then every capability dropped (bounding set, effective, permitted, inheritable) and
// no_new_privs, so the command can neither undo the mounts nor gain privileges.
func sandboxSetup() error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount a fresh /proc: %w", err)
	}
	for c := uintptr(0); c < 64; c++ {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, c, 0); errno != 0 && !errors.Is(errno, syscall.EINVAL) {
			return fmt.Errorf("drop capability %d: %w", c, errno)
		}
	}
	hdr := struct {
		version uint32
		pid     int32
	}{capVersion3, 0}
	var data [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); errno != 0 {
		return fmt.Errorf("drop capabilities: %w", errno)
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPriv, 1, 0); errno != 0 {
		return fmt.Errorf("no_new_privs: %w", errno)
	}
	return nil
}
