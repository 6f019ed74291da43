package plan

import (
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// Eager dispatch: waves stay the unit of integration, but a task need not wait for every task of
// the waves before its own. Task t of wave m may start as soon as the wave
//
//	ready(t) = max(the last wave holding a task t depends on,
//	               the last wave before m holding a task whose impacts overlap t's) + 1
//
// is open: every wave before ready(t) is then integrated, so t's dependencies are on the run
// branch it starts from, and no task of the waves from ready(t) to m−1 (the ones that may still
// run, or be integrated after t started) touches t's files, so t's commit still merges onto its
// own wave's base. Tasks of t's own wave do not overlap it (the plan), and a task of a later
// wave that overlaps t has a ready wave after m, so it cannot run alongside t.
//
// # Complexity
//
// Waves are visited in order, and for every path the last wave (so far) with an impact exactly
// at it, with a directory impact at it, and with an impact under it is kept, each also for
// writers only: a file or directory impact costs O(path depth) map look-ups. Globs are compared
// one by one with the impacts of the waves after the task's dependencies (as in Plan, "maybe" is
// a conflict); they spend the budget, and once it is spent the remaining tasks wait for their
// own wave (ready 0). An exclusive task (check-only) waits for its own wave and makes every later
// task wait for it.

// lastWaves is, for one path and one class, the last wave with any impact and with a writer.
type lastWaves struct{ any, write int32 }

// Ready returns, for each task, the first wave (1-based) whose opening lets it start before its
// own wave, or 0 when no earlier wave would do (it waits for its own), for the plan r of tasks.
// budget bounds the glob comparisons (as PlanContext's operations; 0: DefaultBudget).
func Ready(tasks []Task, r *Result, budget int64) []int32 {
	if budget <= 0 {
		budget = DefaultBudget
	}
	ready := make([]int32, len(tasks))
	waveOf := make([]int32, len(tasks))
	for i, w := range r.Waves {
		for _, pl := range w {
			waveOf[pl.Task] = int32(i + 1)
		}
	}
	var (
		exact, dir, under = map[string]lastWaves{}, map[string]lastWaves{}, map[string]lastWaves{}
		globs             []waveImpact // glob impacts of earlier waves, in wave order
		plain             []waveImpact // file and directory impacts of earlier waves (for globs)
		lastExclusive     int32
		ops               int64
	)
	pick := func(l lastWaves, write bool) int32 {
		if write {
			return l.any
		}
		return l.write
	}
	for i, w := range r.Waves {
		m := int32(i + 1)
		for _, pl := range w {
			t := pl.Task
			if tasks[t].Exclusive || ops > budget {
				continue
			}
			c := lastExclusive
			for _, d := range tasks[t].Deps {
				c = max(c, waveOf[d])
			}
			for _, im := range tasks[t].Impacts {
				if c >= m-1 {
					break
				}
				write := im.Writes()
				node := im.Node()
				if im.Kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB {
					g := &impact{path: im.Path, kind: im.Kind, write: write}
					for _, list := range [][]waveImpact{globs, plain} {
						for j := len(list) - 1; j >= 0 && list[j].wave > c; j-- {
							ops += compareCost(g, &list[j].im)
							if (write || list[j].im.write) && overlaps(g, &list[j].im) {
								c = list[j].wave
							}
						}
					}
					continue
				}
				c = max(c, pick(exact[node], write))
				if im.Kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY {
					c = max(c, pick(under[node], write))
				}
				for a := parentOf(node); a != ""; a = parentOf(a) {
					c = max(c, pick(dir[a], write))
				}
				x := &impact{path: im.Path, kind: im.Kind, write: write}
				for j := len(globs) - 1; j >= 0 && globs[j].wave > c; j-- {
					ops += compareCost(x, &globs[j].im)
					if (write || globs[j].im.write) && overlaps(&globs[j].im, x) {
						c = globs[j].wave
					}
				}
			}
			if c+1 < m && ops <= budget {
				ready[t] = c + 1
			}
		}
		// Wave m's impacts join the sets only now: a task never looks at its own wave.
		for _, pl := range w {
			t := pl.Task
			if tasks[t].Exclusive {
				lastExclusive = m
			}
			for _, im := range tasks[t].Impacts {
				write := im.Writes()
				if im.Kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB {
					globs = append(globs, waveImpact{wave: m, im: impact{path: im.Path, kind: im.Kind, write: write}})
					continue
				}
				node := im.Node()
				plain = append(plain, waveImpact{wave: m, im: impact{path: im.Path, kind: im.Kind, write: write}})
				mark(exact, node, m, write)
				if im.Kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY {
					mark(dir, node, m, write)
				}
				for a := parentOf(node); a != ""; a = parentOf(a) {
					mark(under, a, m, write)
				}
			}
		}
	}
	return ready
}

// waveImpact is an impact of a task of wave wave.
type waveImpact struct {
	wave int32
	im   impact
}

// mark records an impact of wave m at path in set.
func mark(set map[string]lastWaves, path string, m int32, write bool) {
	l := set[path]
	l.any = m
	if write {
		l.write = m
	}
	set[path] = l
}

// parentOf is the directory above path, "" at the top.
func parentOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return ""
}
