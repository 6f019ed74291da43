package executor

import (
	"context"
	"fmt"
	"strings"
	"time"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// ValidationResult is what a task's validation command showed.
type ValidationResult struct {
	// Passed is set when the command exited with the expected exit code (and when there is no
	// command to run).
	Passed bool
	// ExitCode is the command's exit status; -1 when it was killed or did not start.
	ExitCode int
	// Output is the tail of its combined output, valid UTF-8, at most the cap.
	Output string
	// TimedOut is set when it was killed after its timeout.
	TimedOut bool
	// Duration is how long it ran.
	Duration time.Duration
	// Message says in one line what happened, with the validation's expected result; it is the
	// hint of the next attempt when Passed is false.
	Message string
}

// Validate runs v's command with `sh -c` in dir and judges it by task.proto's TaskValidation:
// the command passes when it exits with expected_exit_code (default 0). The expected text is
// what a person should expect ("exit code 0", "all tests pass"): it is quoted in Message, not
// matched against the output. The command runs for v's timeout, else timeout, else
// DefaultValidationTimeout; outputCap bounds Output (default DefaultOutputCap). Processes get
// the minimal environment of platform/proc plus WithEnvPassthrough's names. A validation
// without a command passes: there is nothing to prove.
func Validate(ctx context.Context, dir string, v *commonv1.TaskValidation, timeout time.Duration, outputCap int64, opts ...Option) ValidationResult {
	command := v.GetCommand()
	if strings.TrimSpace(command) == "" {
		return ValidationResult{Passed: true, Message: "no validation command: nothing to run"}
	}
	if d := v.GetTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	if timeout <= 0 {
		timeout = DefaultValidationTimeout
	}
	if outputCap <= 0 {
		outputCap = DefaultOutputCap
	}
	o := newOptions(opts)
	env, _ := proc.EnvFrom(o.lookupEnv, o.passthrough, nil)
	res := proc.Run(ctx, o.spec(proc.Spec{
		Shell:     command,
		Dir:       dir,
		Env:       env,
		Timeout:   timeout,
		OutputCap: outputCap,
		Groups:    o.groups,
	}))
	want := int(v.GetExpectedExitCode())
	vr := ValidationResult{
		ExitCode: res.ExitCode,
		Output:   clean(res.Output, outputCap),
		TimedOut: res.TimedOut,
		Duration: res.Duration,
	}
	expected := ""
	if e := strings.TrimSpace(v.GetExpected()); e != "" {
		expected = fmt.Sprintf(" (expected: %s)", e)
	}
	display := excerptHead(strings.Join(strings.Fields(command), " "), 120)
	switch {
	case res.Err != nil:
		vr.Message = fmt.Sprintf("validation `%s` could not start: %v", display, res.Err)
	case res.TimedOut:
		vr.Message = fmt.Sprintf("validation `%s` was killed after its %s timeout%s", display, timeout, expected)
	case res.Canceled:
		vr.Message = fmt.Sprintf("validation `%s` was cancelled: %v", display, context.Cause(ctx))
	case res.ExitCode != want:
		vr.Message = fmt.Sprintf("validation `%s` exited %d, want %d%s", display, res.ExitCode, want, expected)
	default:
		vr.Passed = true
		vr.Message = fmt.Sprintf("validation `%s` exited %d%s", display, res.ExitCode, expected)
	}
	return vr
}
