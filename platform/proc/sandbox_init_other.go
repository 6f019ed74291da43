//go:build !linux

package proc

import (
	"errors"
	"os"
)

// keepFD is never reached: namespaces exist only on Linux.
func keepFD(*os.File) (int, error) { return -1, errors.New("namespaces need Linux") }
