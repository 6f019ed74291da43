package executor

import (
	"context"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// commandExecutor runs the task's command with `sh -c` in the worktree.
type commandExecutor struct {
	spec *commonv1.CommandExecutor // nil: no passthrough
	opts *options
}

func (e *commandExecutor) Run(ctx context.Context, req Request) (Result, error) {
	if err := req.check(); err != nil {
		return Result{ExitCode: -1}, err
	}
	command := req.Task.GetCommand()
	if strings.TrimSpace(command) == "" {
		return Result{ExitCode: -1}, newError(CodeNoCommand, "task %q has no command to run", req.Task.GetId())
	}
	res := proc.Run(ctx, e.opts.spec(proc.Spec{
		Shell:     command,
		Dir:       req.Dir,
		Env:       e.opts.env(e.spec.GetEnvPassthrough(), req),
		Timeout:   req.timeout(),
		OutputCap: req.outputCap(),
		Groups:    e.opts.groups,
	}))
	out := clean(res.Output, req.outputCap())
	result := Result{ExitCode: res.ExitCode, Output: out, Duration: res.Duration}
	if err := processError(ctx, "the task's command", res, req.timeout(), out); err != nil {
		return result, err
	}
	return result, nil
}
