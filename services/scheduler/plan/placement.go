package plan

import (
	"slices"
	"strconv"
	"unsafe"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Placements: why each task landed in its wave (the level its dependencies give it, or the
// conflicts that pushed it past the level's first wave). The packer records what decided (the
// dependency that gives the level, the tasks and paths of a conflict, the size of a full wave);
// the words are rendered from it only where they are read (Result.Message, Response): the
// engine never reads them, and a plan of 100,000 tasks would otherwise build 100,000 strings.

// checkOnly says why an exclusive task is alone in its wave.
const checkOnly = "declares no files in a list with a repository: a check-only task conflicts with every other task, so it runs alone in its wave"

// What a placement's message is rendered from (Placement.why).
const (
	whyLevel          = iota // dependency level; arg: the dependency that gives it, or -1
	whyExclusive             // an exclusive task after the level's first wave
	whyAfterExclusive        // the wave before holds an exclusive task; arg: that task
	whyMaxParallel           // the wave before is full; arg: its number of tasks
	whyConflict              // file conflicts with the wave before
	// file conflicts with the wave before, found when read (Result.report); arg: the number of
	// tasks the wave before held
	whyConflictLater
)

// maxLateReport is the most tasks a wave may hold for the conflicts with it to be found when they
// are read: finding them again costs the wave's impacts (no sets then), so a wider wave's are
// found when the task is placed.
const maxLateReport = 64

// conflictsAny reports whether a task with impacts ims (its layout's), which has no glob,
// conflicts with wave rel of the level, which holds none: conflictsWith without the report,
// stopping at the first conflict.
func (p *packer) conflictsAny(ims []slim, rel int) bool {
	w := int32(p.first + rel)
	for i := range ims {
		im := &ims[i]
		readers := !im.write
		if im.dir && p.who(im.node, classUnder, w, readers) >= 0 {
			return true
		}
		if p.who(im.node, classExact, w, readers) >= 0 {
			return true
		}
		for a := p.dirUp[im.node]; a >= 0; a = p.dirUp[a] {
			if p.who(a, classDir, w, readers) >= 0 {
				return true
			}
		}
	}
	return false
}

// report returns pl's conflicting tasks and paths (Conflicts, Paths), appending them to conflicts
// and paths when they are found again now.
func (r *Result) report(pl *Placement, conflicts []int, paths []string) ([]int, []string) {
	if pl.why != whyConflictLater {
		return r.Conflicts(pl), r.Paths(pl)
	}
	return r.lateReport(pl, conflicts[:0], paths[:0])
}

// lateReport finds pl's conflicts (whyConflictLater) again, appending them to conflicts and paths.
func (r *Result) lateReport(pl *Placement, conflicts []int, paths []string) ([]int, []string) {
	pr := r.prepared
	wave := r.Waves[pl.prev-1][:pl.arg] // the tasks the wave before held, in placement order
	ims := pr.impactsOf(int32(pl.Task))
	note := func(who int32, path string) {
		if who < 0 {
			return
		}
		if len(conflicts) < maxReported && !slices.Contains(conflicts, int(who)) {
			conflicts = append(conflicts, int(who))
		}
		if len(paths) < maxReported && !slices.Contains(paths, path) {
			paths = append(paths, path)
		}
	}
	// As conflictsWith, the sets' first task (first writer) being the wave's first with such an
	// impact.
	for i := range ims {
		im := &ims[i]
		writers := !im.write
		if im.kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY {
			note(pr.firstIn(wave, im.node, classUnder, writers), im.path)
		}
		note(pr.firstIn(wave, im.node, classExact, writers), im.path)
		for a := pr.dirUp[im.node]; a >= 0; a = pr.dirUp[a] {
			note(pr.firstIn(wave, a, classDir, writers), im.path)
		}
	}
	return conflicts, paths
}

// firstIn returns the first task of wave (a wave without globs) that the packer would have put
// in the set (node, class) (a writer when writers is set), or -1.
func (pr *Prepared) firstIn(wave []Placement, node int32, class int, writers bool) int32 {
	for i := range wave {
		for _, x := range pr.impactsOf(int32(wave[i].Task)) {
			if writers && !x.write {
				continue
			}
			switch class {
			case classExact:
				if x.node == node {
					return int32(wave[i].Task)
				}
			case classDir:
				if x.node == node && x.kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY {
					return int32(wave[i].Task)
				}
			case classUnder:
				for a := pr.dirUp[x.node]; a >= 0; a = pr.dirUp[a] {
					if a == node {
						return int32(wave[i].Task)
					}
				}
			}
		}
	}
	return -1
}

// placement records why task t landed in wave rel of its level; flags and ims are its layout's.
func (p *packer) placement(t int32, lvl, rel int, flags uint8, ims []slim) Placement {
	pl := Placement{Task: int(t), Level: lvl}
	if rel == 0 {
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL
		pl.why, pl.arg = whyLevel, p.via[t]
		return pl
	}
	prev := p.waves[rel-1]
	pl.prev = int32(p.first + rel) // 1-based number of the wave before
	pl.conflicts = int32(len(p.conflicts))
	pl.paths = int32(len(p.paths))
	switch {
	case flags&flagExclusive != 0:
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
		pl.why = whyExclusive
		for _, c := range prev.tasks[:min(len(prev.tasks), maxReported)] {
			p.conflicts = append(p.conflicts, int(c))
		}
		pl.nConflicts = uint8(len(p.conflicts) - int(pl.conflicts))
		return pl
	case prev.exclusive:
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
		pl.why, pl.arg = whyAfterExclusive, prev.tasks[0]
		p.conflicts = append(p.conflicts, int(prev.tasks[0]))
		pl.nConflicts = 1
		return pl
	}
	if len(prev.globs) == 0 && len(prev.tasks) <= maxLateReport && flags&flagGlob == 0 {
		// No glob on either side: the conflicts are found again from the plan when they are read
		// (Result.report), from the tasks the wave before held then (the first arg of its
		// placements). Here only whether there is one, when the wave before is full.
		if len(prev.tasks) >= p.maxParallel && !p.conflictsAny(ims, rel-1) {
			pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_MAX_PARALLEL
			pl.why, pl.arg = whyMaxParallel, int32(len(prev.tasks))
			return pl
		}
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
		pl.why, pl.arg = whyConflictLater, int32(len(prev.tasks))
		return pl
	}
	if len(prev.tasks) >= p.maxParallel && !p.conflictsWith(rel-1, ims, nil) {
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_MAX_PARALLEL
		pl.why, pl.arg = whyMaxParallel, int32(len(prev.tasks))
		return pl
	}
	found := p.found[:0]
	p.conflictsWith(rel-1, ims, &found)
	p.found = found
	pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
	pl.why = whyConflict
	for _, c := range found { // at most maxReported of each: linear scans are cheapest
		if cs := p.conflicts[pl.conflicts:]; len(cs) < maxReported && !slices.Contains(cs, int(c.with)) {
			p.conflicts = append(p.conflicts, int(c.with))
		}
		if ps := p.paths[pl.paths:]; len(ps) < maxReported && !slices.Contains(ps, c.path) {
			p.paths = append(p.paths, c.path)
		}
	}
	pl.nConflicts = uint8(len(p.conflicts) - int(pl.conflicts))
	pl.nPaths = uint8(len(p.paths) - int(pl.paths))
	return pl
}

// Conflicts are, for FILE_CONFLICT, the tasks of the wave before pl's that it conflicts with (at
// most 10), nil for other reasons. The slice is the plan's: do not change it.
func (r *Result) Conflicts(pl *Placement) []int {
	if pl.why == whyConflictLater {
		c, _ := r.lateReport(pl, nil, nil)
		return c
	}
	if pl.nConflicts == 0 {
		return nil
	}
	return r.conflicts[pl.conflicts : pl.conflicts+int32(pl.nConflicts) : pl.conflicts+int32(pl.nConflicts)]
}

// Paths are, for FILE_CONFLICT, pl's own paths that conflict (at most 10), nil for other
// reasons. The slice is the plan's: do not change it.
func (r *Result) Paths(pl *Placement) []string {
	if pl.why == whyConflictLater {
		_, p := r.lateReport(pl, nil, nil)
		return p
	}
	if pl.nPaths == 0 {
		return nil
	}
	return r.paths[pl.paths : pl.paths+int32(pl.nPaths) : pl.paths+int32(pl.nPaths)]
}

// Message says in words why pl's task landed in its wave.
func (r *Result) Message(pl *Placement) string {
	conflicts, paths := r.report(pl, nil, nil)
	return string(r.appendMessage(nil, pl, conflicts, paths))
}

// appendMessage appends pl's message to b; conflicts and paths are pl's (report).
func (r *Result) appendMessage(b []byte, pl *Placement, conflicts []int, paths []string) []byte {
	switch pl.why {
	case whyLevel:
		if pl.Level == 0 {
			b = append(b, "dependency level 0: waits for no task"...)
		} else {
			b = strconv.AppendInt(append(b, "dependency level "...), int64(pl.Level), 10)
			if pl.arg >= 0 {
				b = append(append(b, ": after "...), r.tasks[pl.arg].ID...)
			}
		}
		if r.tasks[pl.Task].Exclusive {
			b = append(append(b, "; "...), checkOnly...)
		}
	case whyExclusive:
		b = append(append(b, checkOnly...), " (after wave "...)
		b = append(strconv.AppendInt(b, int64(pl.prev), 10), ')')
	case whyAfterExclusive:
		b = strconv.AppendInt(append(b, "wave "...), int64(pl.prev), 10)
		b = append(append(append(b, " holds "...), r.tasks[pl.arg].ID...),
			", which declares no files: a check-only task conflicts with every other task and runs alone in its wave"...)
	case whyMaxParallel:
		b = strconv.AppendInt(append(b, "wave "...), int64(pl.prev), 10)
		b = strconv.AppendInt(append(b, " already holds "...), int64(pl.arg), 10)
		b = append(strconv.AppendInt(append(b, " tasks (max_parallel "...), int64(r.maxParallel), 10), ')')
	case whyConflict, whyConflictLater:
		b = append(b, "file conflict with "...)
		for i, c := range conflicts {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, r.tasks[c].ID...)
		}
		b = append(b, " on "...)
		for i, path := range paths {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, path...)
		}
		b = strconv.AppendInt(append(b, " (wave "...), int64(pl.prev), 10)
		b = append(b, ')')
	}
	return b
}

// conflictsWith reports whether a task with impacts ims (its layout's) conflicts with wave rel
// of the level, collecting the conflicts into report when it is not nil. An impact's path is read
// only when it conflicts.
func (p *packer) conflictsWith(rel int, ims []slim, report *[]conflict) bool {
	w := int32(p.first + rel)
	found := false
	note := func(who int32, im *slim) {
		if who >= 0 {
			found = true
			if report != nil {
				*report = append(*report, conflict{who, p.ims[im.src].path})
			}
		}
	}
	for i := range ims {
		im := &ims[i]
		readers := !im.write
		if im.glob {
			note(p.who(im.node, classGlob, w, readers), im)
			continue
		}
		if im.dir {
			note(p.who(im.node, classUnder, w, readers), im)
		}
		note(p.who(im.node, classExact, w, readers), im)
		for a := p.dirUp[im.node]; a >= 0; a = p.dirUp[a] {
			note(p.who(a, classDir, w, readers), im)
		}
	}
	if p.globConflict(true, p.waves[rel], ims, report) {
		found = true
	}
	return found
}

// textArena builds strings in shared chunks: one allocation per 64 KiB of text instead of one
// per string (a response for 100,000 tasks has 100,000 messages). A chunk's bytes are written
// once and never changed, so the strings that point into it are immutable.
type textArena struct{ buf []byte }

// copy returns b's bytes as a string.
func (a *textArena) copy(b []byte) string {
	if cap(a.buf)-len(a.buf) < len(b) {
		a.buf = make([]byte, 0, max(len(b), 64<<10))
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	c := a.buf[start:]
	return unsafe.String(unsafe.SliceData(c), len(c))
}
