package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/repopath"
)

// Scope guards per iteration (seed §15): what an iteration changed on the run branch (git diff of
// its base commit and its last integration commit, for a local repository), checked against the
// build's guards when the iteration ends.

// changes is what one iteration changed.
type changes struct {
	created, modified, deleted []string
	lines                      int32
	known                      bool // false: not measured (no local repository, nothing integrated)
}

func (c changes) all() []string {
	return slices.Concat(c.created, c.modified, c.deleted)
}

// iterationChanges reads what the ended execution changed: from its base commit to its last
// integrated wave's commit, in its local repository.
func (s *Server) iterationChanges(ctx context.Context, ex *schedulerv1.Execution, waves []*schedulerv1.Wave) (changes, error) {
	dir := ex.GetRepository().GetPath()
	head := ""
	for _, w := range waves {
		if w.GetStatus() == schedulerv1.WaveStatus_WAVE_STATUS_COMPLETED && w.GetIntegrationCommit() != "" {
			head = w.GetIntegrationCommit()
		}
	}
	if dir == "" || head == "" || ex.GetBaseCommit() == "" || head == ex.GetBaseCommit() {
		return changes{known: dir != "" && head != ""}, nil
	}
	var c changes
	status, err := git(ctx, dir, "diff", "--name-status", "--no-renames", ex.GetBaseCommit(), head)
	if err != nil {
		return c, err
	}
	for _, l := range strings.Split(status, "\n") {
		kind, p, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		switch kind {
		case "A":
			c.created = append(c.created, p)
		case "D":
			c.deleted = append(c.deleted, p)
		default:
			c.modified = append(c.modified, p)
		}
	}
	numstat, err := git(ctx, dir, "diff", "--numstat", "--no-renames", ex.GetBaseCommit(), head)
	if err != nil {
		return c, err
	}
	for _, l := range strings.Split(numstat, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		add, _ := strconv.Atoi(f[0]) // "-" for a binary file: 0
		del, _ := strconv.Atoi(f[1])
		c.lines += int32(add + del)
	}
	c.known = true
	return c, nil
}

// scopeViolation checks an iteration's changes against the guards; it answers the guard broken
// and the path or figure ("" when none). AUTONOMOUS builds pass the size and confirm-required
// guards (they block only for what touches credentials or history: the blocklist).
func scopeViolation(g *schedulerv1.ScopeGuards, c changes, autonomy schedulerv1.Autonomy) (guard, detail string) {
	if !c.known {
		return "", ""
	}
	for _, p := range c.all() {
		for _, glob := range g.GetBlocklistGlobs() {
			if repopath.Match(glob, p) {
				return "blocklist", fmt.Sprintf("Modify %s: it matches the blocklist glob %q", p, glob)
			}
		}
	}
	if autonomy == schedulerv1.Autonomy_AUTONOMY_AUTONOMOUS {
		return "", ""
	}
	for _, p := range c.all() {
		if slices.Contains(g.GetConfirmedPaths(), p) {
			continue
		}
		for _, glob := range g.GetConfirmRequiredGlobs() {
			if repopath.Match(glob, p) {
				return "confirm-required", fmt.Sprintf("Modify %s: it matches the confirm-required glob %q and no person confirmed it", p, glob)
			}
		}
	}
	if n := len(c.all()); g.GetMaxFilesPerIteration() > 0 && n > int(g.GetMaxFilesPerIteration()) {
		return "max files per iteration", fmt.Sprintf("Change %d files in one iteration: more than max_files_per_iteration (%d)", n, g.GetMaxFilesPerIteration())
	}
	if g.GetMaxLinesPerIteration() > 0 && c.lines > g.GetMaxLinesPerIteration() {
		return "max lines per iteration", fmt.Sprintf("Change %d lines in one iteration: more than max_lines_per_iteration (%d)", c.lines, g.GetMaxLinesPerIteration())
	}
	return "", ""
}

// scopeReport is the seed's §15.3 scope violation response.
func scopeReport(b *schedulerv1.FeatureBuild, guard, detail string) string {
	return fmt.Sprintf("## Scope Guard Triggered\n\n**Feature:** %s\n**Iteration:** %d of %d\n**Attempted action:** %s\n**Guard:** %s\n\n"+
		"**Reason:** changes beyond the build's scope guards need a person's review (security, size, sensitive paths).\n\n"+
		"**Options:**\n1. Continue without this change (may not fully satisfy criteria)\n2. EXIT and request a person to review or make the change\n\n"+
		"**Choosing:** EXIT for human intervention\n\n**Human action required:**\nReview the change on the run branch %s; make it by hand, or confirm the path "+
		"(scope_guards.confirmed_paths) or raise the limit.\nThen run: `converge build %s --resume`\n",
		b.GetFeature(), b.GetCurrentIteration(), b.GetMaxIterations(), detail, guard, runBranchOf(b), b.GetFeature())
}
