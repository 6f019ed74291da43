// Package workspace is the Agent worker's git layer (DESIGN §5): a cache of mirror clones, one
// detached worktree per assignment, checkpoints (commit + file hashes) with rollback inside that
// worktree only, task commits that stage exactly the task's paths, pushes of task refs to the
// origin, and the cherry-picks of a wave's task commits during integration.
//
// Everything goes through the git CLI (exec.CommandContext), the reference implementation; git
// 2.25 or newer is expected on PATH.
//
// # Layout
//
// A Cache owns one root directory:
//
//	<root>/mirrors/<sha256(source)[:16]>.git   bare mirror of one origin
//	<root>/worktrees/<name>                     one worktree per assignment (AddWorktree)
//	<root>/scratch/<name>                       plain directories for repository-less task lists (Scratch)
//
// The mirror fetches refs/heads/*, refs/converge/* and refs/tags/* from the origin (forced, pruned).
// Several agent processes must use separate roots; within one process a Cache is safe for
// concurrent use: each mirror has its own lock, taken exclusively for clone, fetch, worktree
// removal and ref updates, and shared for reads and worktree creation. Work inside different
// worktrees (commits, resets, cherry-picks) runs in parallel.
//
// # Git environment
//
// Every git command runs with GIT_TERMINAL_PROMPT=0, LC_ALL=C, GIT_CONFIG_NOSYSTEM=1 and
// GIT_EDITOR=true, without the repository-locating variables (GIT_DIR, GIT_WORK_TREE,
// GIT_INDEX_FILE, ...) or identity variables it may have inherited, and with every setting that
// changes results passed explicitly with -c: no hooks, no signing, no rerere, no autocrlf, no
// global excludes file, no fsmonitor. The user's global config is still read, so credential
// helpers and url.<base>.insteadOf keep working for URL origins; nothing that matters depends on
// it. Commands inside a worktree run with GIT_CEILING_DIRECTORIES set to its parent, so a
// worktree whose .git file went missing fails instead of acting on an enclosing repository.
// Nothing assumes a default branch name.
//
// # Errors
//
// A failed git command is a *GitError carrying its arguments, exit code and stderr. Conditions a
// caller acts on are sentinel errors (ErrNotARepository, ErrUnknownRef, ErrUnsafePath,
// ErrNothingToCommit, ErrUnpushed, ErrNoRepository, ErrPushRejected, ErrDirty,
// ErrCheckpointMismatch, ErrConflict) matched with errors.Is, and *ConflictError with errors.As.
package workspace
