package executor

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/platform/proc"
)

// PromptFilePlaceholder is replaced in an agent CLI's argv by the path of the prompt file
// (PROMPT_MODE_FILE).
const PromptFilePlaceholder = "{prompt_file}"

// PromptDir is the worktree-relative directory of prompt files. A prompt file is removed when
// the CLI ends, and so is the directory when the executor created it, so neither is committed.
const PromptDir = ".converge"

// agentCLIExecutor runs an external coding-agent CLI in the worktree.
type agentCLIExecutor struct {
	spec *commonv1.AgentCliExecutor
	opts *options
}

func (e *agentCLIExecutor) Run(ctx context.Context, req Request) (Result, error) {
	if err := req.check(); err != nil {
		return Result{ExitCode: -1}, err
	}
	argv := append([]string(nil), e.spec.GetArgv()...)
	spec := proc.Spec{
		Dir:       req.Dir,
		Env:       e.opts.env(e.spec.GetEnvPassthrough(), req),
		Timeout:   req.timeout(),
		OutputCap: req.outputCap(),
		Groups:    e.opts.groups,
	}
	if e.spec.GetPromptMode() == commonv1.PromptMode_PROMPT_MODE_FILE {
		path, cleanup, err := writePromptFile(req)
		if err != nil {
			return Result{ExitCode: -1}, err
		}
		defer cleanup()
		for i, arg := range argv {
			argv[i] = strings.ReplaceAll(arg, PromptFilePlaceholder, path)
		}
	} else {
		spec.Stdin = strings.NewReader(req.Prompt)
	}
	spec.Argv = argv

	res := proc.Run(ctx, e.opts.spec(spec))
	out := clean(res.Output, req.outputCap())
	result := Result{ExitCode: res.ExitCode, Output: out, Duration: res.Duration, Usage: ParseUsage(out)}
	if err := processError(ctx, "agent CLI "+filepath.Base(argv[0]), res, req.timeout(), out); err != nil {
		return result, err
	}
	return result, nil
}

// writePromptFile writes req's prompt to PromptDir/prompt-<task>.md in the worktree and answers
// its absolute path and what removes it again.
func writePromptFile(req Request) (string, func(), error) {
	name := "prompt-" + fileSafe(req.Task.GetId()) + ".md"
	dir, err := safePath(req.Dir, PromptDir)
	if err != nil {
		return "", nil, err
	}
	created := false
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", nil, newError(CodeExecutorFailed, "create %s: %v", PromptDir, err)
		}
		created = true
	}
	path, err := safePath(req.Dir, PromptDir+"/"+name)
	if err != nil {
		return "", nil, err
	}
	cleanup := func() {
		_ = os.Remove(path)
		if created {
			_ = os.Remove(dir) // only when empty
		}
	}
	if err := writeFile(path, []byte(req.Prompt), 0o600); err != nil {
		cleanup()
		return "", nil, newError(CodeExecutorFailed, "write the prompt file: %v", err)
	}
	return path, cleanup, nil
}

// fileSafe makes a task id usable in a file name.
func fileSafe(id string) string {
	if id == "" {
		return "task"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, id)
}
