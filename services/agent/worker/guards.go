package worker

import (
	"fmt"
	"strings"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/repopath"
)

// Scope guards (seed §15, scheduler.v1.ScopeGuards) limit what one try may change. They are
// checked on the try's diff before anything is pushed: a changed path matching a blocklist or a
// confirm-required glob, more files than max_files_per_iteration, or more lines than
// max_lines_per_iteration fail the try with code SCOPE_GUARD, naming the offending paths; the
// try is rolled back to its checkpoint like any failed try.

// codeScopeGuard is the error code of a try refused by a scope guard.
const codeScopeGuard = "SCOPE_GUARD"

// scopeError is a try refused by a scope guard.
type scopeError struct {
	// rule names the guard: "blocklist", "confirm_required", "max_files", "max_lines" or
	// "undeclared" (a path outside the task's declared files, ExecutionOptions.allow_undeclared_files off).
	rule string
	// paths are the offending paths (all the changed ones for max_files and max_lines).
	paths []string
	msg   string
}

func (e *scopeError) Error() string { return e.msg }

// checkScope checks the changed paths (all of the try's) and the paths to commit against g; nil
// g checks nothing.
func checkScope(g *schedulerv1.ScopeGuards, changed, committed []string) *scopeError {
	if g == nil {
		return nil
	}
	match := func(globs []string) []string {
		var out []string
		for _, p := range changed {
			for _, glob := range globs {
				if repopath.Match(glob, p) || glob == p {
					out = append(out, p)
					break
				}
			}
		}
		return out
	}
	if bad := match(g.GetBlocklistGlobs()); len(bad) > 0 {
		return &scopeError{rule: "blocklist", paths: bad,
			msg: "scope guard: the try changed blocklisted paths (scope_guards.blocklist_globs): " + list(bad)}
	}
	if bad := match(g.GetConfirmRequiredGlobs()); len(bad) > 0 {
		return &scopeError{rule: "confirm_required", paths: bad,
			msg: "scope guard: the try changed paths that need a person's confirmation (scope_guards.confirm_required_globs): " + list(bad)}
	}
	if limit := int(g.GetMaxFilesPerIteration()); limit > 0 && len(committed) > limit {
		return &scopeError{rule: "max_files", paths: committed,
			msg: fmt.Sprintf("scope guard: the try changed %d files, more than scope_guards.max_files_per_iteration %d: %s", len(committed), limit, list(committed))}
	}
	return nil
}

// checkLines checks the lines the try's commit changed against g's max_lines_per_iteration.
func checkLines(g *schedulerv1.ScopeGuards, lines int, committed []string) *scopeError {
	if limit := int(g.GetMaxLinesPerIteration()); limit > 0 && lines > limit {
		return &scopeError{rule: "max_lines", paths: committed,
			msg: fmt.Sprintf("scope guard: the try changed %d lines, more than scope_guards.max_lines_per_iteration %d: %s", lines, limit, list(committed))}
	}
	return nil
}

// listPaths names at most 50 paths.
func listPaths(paths []string) string { return list(paths) }

// list names at most 50 paths.
func list(paths []string) string {
	shown := paths[:min(len(paths), 50)]
	s := strings.Join(shown, ", ")
	if len(paths) > len(shown) {
		s += fmt.Sprintf(", … (%d more)", len(paths)-len(shown))
	}
	return s
}
