package plan

import (
	"slices"
	"strconv"
	"strings"
	"unsafe"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Placements: why each task landed in its wave (the level its dependencies give it, or the
// conflicts that pushed it past the level's first wave).

// checkOnly says why an exclusive task is alone in its wave.
const checkOnly = "declares no files in a list with a repository: a check-only task conflicts with every other task, so it runs alone in its wave"

// placement says why task t landed in wave rel of its level.
func (p *packer) placement(t int32, lvl, rel int) Placement {
	pl := Placement{Task: int(t), Level: lvl}
	if rel == 0 {
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_DEPENDENCY_LEVEL
		pl.Message = p.levelMessage(t, lvl)
		if p.tasks[t].Exclusive {
			pl.Message += "; " + checkOnly
		}
		return pl
	}
	prev := p.waves[rel-1]
	prevNumber := p.first + rel // 1-based number of the wave before
	switch {
	case p.tasks[t].Exclusive:
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
		for _, c := range prev.tasks {
			if len(pl.Conflicts) < maxReported {
				pl.Conflicts = append(pl.Conflicts, int(c))
			}
		}
		pl.Message = checkOnly + " (after wave " + strconv.Itoa(prevNumber) + ")"
		return pl
	case prev.exclusive:
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
		pl.Conflicts = []int{int(prev.tasks[0])}
		pl.Message = "wave " + strconv.Itoa(prevNumber) + " holds " + p.tasks[prev.tasks[0]].ID +
			", which declares no files: a check-only task conflicts with every other task and runs alone in its wave"
		return pl
	}
	if len(prev.tasks) >= p.maxParallel && !p.conflictsWith(t, rel-1, nil) {
		pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_MAX_PARALLEL
		b := append(p.scratch[:0], "wave "...)
		b = append(strconv.AppendInt(b, int64(prevNumber), 10), " already holds "...)
		b = append(strconv.AppendInt(b, int64(len(prev.tasks)), 10), " tasks (max_parallel "...)
		b = append(strconv.AppendInt(b, int64(p.maxParallel), 10), ')')
		pl.Message, p.scratch = p.text.copy(b), b
		return pl
	}
	var found []conflict
	p.conflictsWith(t, rel-1, &found)
	pl.Reason = schedulerv1.PlacementReason_PLACEMENT_REASON_FILE_CONFLICT
	for _, c := range found { // at most maxReported of each: linear scans are cheapest
		if len(pl.Conflicts) < maxReported && !slices.Contains(pl.Conflicts, int(c.with)) {
			pl.Conflicts = append(pl.Conflicts, int(c.with))
		}
		if len(pl.Paths) < maxReported && !slices.Contains(pl.Paths, c.path) {
			pl.Paths = append(pl.Paths, c.path)
		}
	}
	ids := make([]string, len(pl.Conflicts))
	for i, c := range pl.Conflicts {
		ids[i] = p.tasks[c].ID
	}
	pl.Message = "file conflict with " + strings.Join(ids, ", ") + " on " + strings.Join(pl.Paths, ", ") +
		" (wave " + strconv.Itoa(prevNumber) + ")"
	return pl
}

// conflictsWith reports whether task t conflicts with wave rel of the level, collecting the
// conflicts into report when it is not nil.
func (p *packer) conflictsWith(t int32, rel int, report *[]conflict) bool {
	w := int32(p.first + rel)
	found := false
	note := func(who int32, path string) {
		if who >= 0 {
			found = true
			if report != nil {
				*report = append(*report, conflict{who, path})
			}
		}
	}
	for i := range p.impacts[t] {
		im := &p.impacts[t][i]
		readers := !im.write
		switch im.kind {
		case commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB:
			note(p.who(im.node, classGlob, w, readers), im.path)
			continue
		case commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY:
			note(p.who(im.node, classUnder, w, readers), im.path)
		}
		note(p.who(im.node, classExact, w, readers), im.path)
		for a := p.dirUp[im.node]; a >= 0; a = p.dirUp[a] {
			note(p.who(a, classDir, w, readers), im.path)
		}
	}
	if p.globConflict(t, true, p.waves[rel], report) {
		found = true
	}
	return found
}

// levelMessage says where a task's dependency level comes from.
func (p *packer) levelMessage(t int32, lvl int) string {
	if lvl == 0 {
		return "dependency level 0: waits for no task"
	}
	for _, d := range p.tasks[t].Deps {
		if p.levels[d] == lvl-1 {
			return p.text.concat("dependency level ", strconv.Itoa(lvl), ": after ", p.tasks[d].ID)
		}
	}
	return "dependency level " + strconv.Itoa(lvl)
}

// textArena builds the placements' messages in shared chunks: one allocation per 64 KiB of
// messages instead of one per task (a plan of 100,000 tasks has 100,000 of them). A chunk's bytes
// are written once and never changed, so the strings that point into it are immutable.
type textArena struct{ buf []byte }

// concat returns the concatenation of parts.
func (a *textArena) concat(parts ...string) string {
	n := 0
	for _, s := range parts {
		n += len(s)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(n, 64<<10))
	}
	start := len(a.buf)
	for _, s := range parts {
		a.buf = append(a.buf, s...)
	}
	b := a.buf[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

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
