package workspace

import (
	"context"
	"io"

	"github.com/converge-dev/converge/platform/gitexec"
)

// gitCmd is one git invocation, run by platform/gitexec (fixed configuration and environment, no
// hooks, no prompt, capped output).
type gitCmd struct {
	dir   string    // working directory
	env   []string  // extra environment, after gitexec's fixed settings
	stdin io.Reader // optional
	gc    bool      // leave automatic gc enabled (fetch into the mirror, under its lock)
	args  []string
}

// run executes the command and returns its standard output. A failure is a *GitError.
func (c gitCmd) run(ctx context.Context) (string, error) {
	return gitexec.Cmd{Dir: c.dir, Env: c.env, Stdin: c.stdin, GC: c.gc, Args: c.args}.Run(ctx)
}

// git runs git with args in dir.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	return gitCmd{dir: dir, args: args}.run(ctx)
}
