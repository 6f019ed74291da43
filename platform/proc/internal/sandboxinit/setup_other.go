//go:build !linux

package sandboxinit

// setup is never reached: namespaces exist only on Linux, where proc.DetectSandbox finds them.
func setup() error { return &sandboxError{msg: "namespaces need Linux"} }
