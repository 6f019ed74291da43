//go:build !linux

package proc

import "errors"

// sandboxSetup is never reached: namespaces exist only on Linux, where DetectSandbox finds them.
func sandboxSetup() error { return errors.New("namespaces need Linux") }
