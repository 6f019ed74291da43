package proc

import (
	"os"
	"syscall"
)

// minInitFD is the least descriptor the init binary is kept at: above those os/exec's child
// moves its standard streams through before exec (3 and up, when one of them is below its index),
// so that the magic link still names the init when the child executes it.
const minInitFD = 64

// keepFD duplicates f's descriptor (close-on-exec) at minInitFD or above, kept open for the life
// of the process.
func keepFD(f *os.File) (int, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_DUPFD_CLOEXEC, minInitFD)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
