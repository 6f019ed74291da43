package plan

import (
	"sync"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// The packer reads the tasks in level order (level by level, by priority, then list order), not
// in list order: reading each task's impacts where Prepare interned them costs a cache miss or
// two per task (at 100,000 tasks, a third of the plan). So the impacts are laid out again in the
// order the packer places the tasks, in a compact, pointer-free form (what the sets need: the
// node, the kind and the path's first bytes), and the packer reads them in sequence. Prepare lays
// them out once per list, in the order of the list's levels and priorities; a plan computes its
// levels and order itself and reads Prepare's layout when its order is the same (it always is
// for an unchanged list), and lays the impacts out itself otherwise. The plan's scratch (levels, order, layout,
// sets, wave states) is kept in a pool from plan to plan.

// slim is an impact as the packer reads it, laid out in placement order: its node, kind and first
// bytes, and its index in Prepared.ims (its path, for globs and conflicts).
type slim struct {
	head             uint64
	node             int32
	src              int32
	glob, dir, write bool
}

// slimOf is impact im, at index src of Prepared.ims, as the packer reads it.
func slimOf(im *impact, src int32) slim {
	return slim{head: im.head, node: im.node, src: src, write: im.write,
		glob: im.kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB,
		dir:  im.kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY}
}

// Per-task flags of the layout.
const (
	flagExclusive = 1 << iota // the task is exclusive
	flagGlob                  // the task has a glob impact
)

// layout is the tasks' impacts in placement order: the task at position i of the order has
// flags flag[i] and impacts ims[off[i]:off[i+1]].
type layout struct {
	ims  []slim
	off  []int32
	flag []uint8
}

// lay lays out the impacts of pr's tasks in order.
func (l *layout) lay(pr *Prepared, order []int32) {
	l.ims = resize(l.ims, len(pr.ims))
	l.off = resize(l.off, len(order)+1)
	l.flag = resize(l.flag, len(order))
	ims, off, flag := l.ims, l.off, l.flag
	k := int32(0)
	off[0] = 0
	for i, t := range order {
		a, b := pr.off[t], pr.off[t+1]
		f := uint8(0)
		if pr.exclusive[t] {
			f = flagExclusive
		}
		for j := range pr.ims[a:b] {
			ims[k] = slimOf(&pr.ims[a+int32(j)], a+int32(j))
			if ims[k].glob {
				f |= flagGlob
			}
			k++
		}
		off[i+1] = k
		flag[i] = f
	}
}

// resize returns s with length n, reusing its room when it has enough (the contents are then
// left over: the caller writes every element).
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// packers keeps the packers of finished plans, with their scratch, for the next plans.
var packers sync.Pool

// getPacker returns a packer for a plan of pr, from the pool when one is there.
func getPacker(pr *Prepared, maxParallel int) *packer {
	p, _ := packers.Get().(*packer)
	if p == nil {
		p = &packer{sets: newSetTable(pr.nodes)}
	} else {
		p.sets.reset(pr.nodes)
	}
	p.tasks, p.maxParallel = pr.tasks, maxParallel
	p.ims, p.dirUp = pr.ims, pr.dirUp
	p.arena = make([]Placement, len(pr.tasks)) // the plan's: the Result keeps it
	p.result, p.conflicts, p.paths = nil, nil, nil
	p.open = p.open[:0]
	p.waves = p.waves[:0]
	p.first, p.ops, p.placed, p.err = 0, 0, 0, nil
	return p
}

// putPacker gives p back to the pool once its plan is done: what the Result keeps, and every
// pointer into the plan's lists, is dropped first.
func putPacker(p *packer) {
	p.tasks, p.ims, p.dirUp, p.laid = nil, nil, nil, nil
	p.result, p.arena, p.conflicts, p.paths = nil, nil, nil, nil
	clear(p.found[:cap(p.found)]) // conflicts name paths
	p.found = p.found[:0]
	p.ctx, p.err = nil, nil
	packers.Put(p)
}

// compareCost is compareCost of the impacts a and b stand for, reading them only when they are of
// the same kind.
func (p *packer) compareCost(a, b *slim) int64 {
	if a.glob != b.glob || a.dir != b.dir {
		return fullCompare
	}
	return compareCost(&p.ims[a.src], &p.ims[b.src])
}

// overlaps is overlaps of the impacts a and b stand for (at least one a glob). A file's path and
// a glob whose literal prefix's first bytes differ from it are told apart from their heads,
// without reading the file's impact (not in the cache: the packer reads the layout).
func (p *packer) overlaps(a, b *slim) bool {
	if !a.glob {
		a, b = b, a
	}
	g := &p.ims[a.src]
	if !b.glob && !b.dir {
		if n := min(g.lit, 8); n > 0 && (a.head^b.head)>>(64-8*n) != 0 {
			return false
		}
	}
	return overlaps(g, &p.ims[b.src])
}
