package workspace

import (
	"errors"
	"fmt"
	"strings"

	"github.com/converge-dev/converge/platform/gitexec"
)

var (
	// ErrNotARepository: the source given to Cache.Open is not a git repository (a local path
	// that does not exist or is not the top of a repository, or a URL git says is no repository).
	ErrNotARepository = errors.New("not a git repository")

	// ErrUnknownRef: a ref, commit or sha does not name a commit in the mirror.
	ErrUnknownRef = errors.New("unknown ref")

	// ErrUnsafePath: a path is absolute, contains "..", names .git, or leaves the worktree
	// through a symbolic link.
	ErrUnsafePath = errors.New("unsafe path")

	// ErrNothingToCommit: the given paths do not differ from HEAD.
	ErrNothingToCommit = errors.New("nothing to commit")

	// ErrUnpushed: the worktree's HEAD has commits that no ref of the mirror or the origin
	// reaches; such a worktree is never deleted.
	ErrUnpushed = errors.New("worktree has unpushed commits")

	// ErrNoRepository: a git operation on a scratch directory, which has no repository.
	ErrNoRepository = errors.New("scratch directory has no repository")

	// ErrPushRejected: the origin refused a push (non-fast-forward without force, a ref
	// checked out in the origin, a hook, ...); the wrapped *GitError has git's explanation.
	ErrPushRejected = errors.New("push rejected")

	// ErrDirty: the operation needs a worktree without tracked changes (CherryPick).
	ErrDirty = errors.New("worktree has uncommitted changes")

	// ErrCheckpointMismatch: after Restore some checkpointed file does not hash as recorded,
	// which happens when the checkpoint was taken with uncommitted changes to that file.
	ErrCheckpointMismatch = errors.New("restored files differ from the checkpoint")

	// ErrConflict is what every *ConflictError matches with errors.Is.
	ErrConflict = errors.New("cherry-pick conflict")
)

// ConflictError reports a cherry-pick that did not apply cleanly. The worktree was reset to the
// HEAD it had before CherryPick was called.
type ConflictError struct {
	// Commit is the input commit whose pick conflicted.
	Commit string
	// Paths are the repository-relative paths left unmerged by the pick, sorted.
	Paths []string
}

// Error names the commit and the conflicting paths.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("cherry-pick of %s conflicts in %s", e.Commit, strings.Join(e.Paths, ", "))
}

// Unwrap makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// GitError is a git command that failed: its arguments (without the -c options every command
// gets), the directory it ran in, its exit code (-1 when it did not run or was killed) and its
// standard error (platform/gitexec's error).
type GitError = gitexec.Error

// exitCode returns the exit code of a *GitError in err, or -1.
func exitCode(err error) int {
	var ge *GitError
	if errors.As(err, &ge) {
		return ge.ExitCode
	}
	return -1
}
