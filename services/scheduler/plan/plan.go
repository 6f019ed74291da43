// Package plan groups the tasks of a task list into waves (DESIGN §2 step 2): the topological
// levels of the dependency DAG, each level split so that no two tasks of a wave have overlapping
// file impacts, and no wave holds more than max_parallel tasks. Every placement says why the
// task landed in its wave.
//
// # Algorithm
//
//  1. Levels. Kahn's algorithm computes each task's dependency level, the length of the longest
//     dependency chain below it (0 = no dependencies). O(tasks + dependencies).
//  2. Order. The tasks of a level are taken by priority (higher first), then list order.
//  3. Waves. Each level gets waves of its own, after the previous level's. A task goes to the
//     first wave of its level that is not full and holds no task whose impacts overlap its own
//     (first fit). Two impacts overlap when their paths can name the same file and at least one
//     of them writes: two readers never conflict. An exclusive task (a check-only task: one that
//     declares no files in a list with a repository, see FromSpec) conflicts with every task: it
//     gets a new wave of its own, which no later task joins.
//
// # Complexity
//
// Finding the first fitting wave does not compare the task with every task of the level. Each
// exact file and directory is a node of the path tree, and for each node the packer keeps the
// set of the level's waves with an impact exactly at it, with a directory impact at it, and with
// an impact under it (the last two only for nodes where some task has a directory impact), each
// also for writers only. A set is a union-find over wave numbers whose find answers the first wave
// at or after w that is not in the set, in amortized near-constant time; so is the set of full
// waves. The fitting wave is the first w that all of the task's sets (one per impact and
// ancestor directory) and the full set let through: the search only moves forward, each step
// jumping over a whole run of waves that one set holds. For exact files and directories a task
// costs O(impacts × path depth × α) per step, and it takes one step unless its paths sit in
// interleaved waves (then at most one per such run); a plan costs
// O(T + D + T log T + I × depth × α) for T tasks, D dependencies and I impacts: near-linear. A
// thousand tasks writing the same file take one step each, not one per earlier wave.
//
// Globs cannot be indexed by node: a glob is checked against the impacts of a candidate wave one
// by one (exact match of file against glob with doublestar; glob against directory and glob
// against glob segment by segment, conservatively, so that a possible overlap is a conflict).
// Identical globs are indexed like files. A task with globs, or a wave with globs, costs
// O(impacts of the wave) per candidate wave, and a wave holds at most max_parallel tasks.
package plan

import (
	"context"
	"errors"
	"fmt"
	"slices"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// DefaultMaxParallel is the wave size when none is given.
const DefaultMaxParallel = 4

// Task is one task to plan.
type Task struct {
	// ID is the task's id, used in messages.
	ID string
	// Priority orders the tasks of a level: higher first, then list order.
	Priority int32
	// Deps are the indexes of the tasks this one depends on.
	Deps []int32
	// Impacts are the task's resolved file impacts.
	Impacts []tasklist.Impact
	// Exclusive: the task may touch anything (it declares no files), so it conflicts with every
	// other task and runs alone in its wave.
	Exclusive bool
}

// Placement is one task's place in a wave and why. What decided is recorded; the words and the
// conflicts are Result's Message, Conflicts and Paths.
type Placement struct {
	// Task is the index of the task.
	Task int
	// Level is its dependency level (0 = no dependencies).
	Level int
	// Reason is what decided its wave.
	Reason schedulerv1.PlacementReason
	// What the message is rendered from: why (a why* constant), the wave before (1-based), and
	// arg (the dependency that gives the level, the exclusive task of the wave before, or the
	// number of tasks in the full wave before). The conflicting tasks and paths:
	// Result.conflicts[conflicts:][:nConflicts] and Result.paths[paths:][:nPaths]. The bytes
	// sit beside Reason: 40 bytes a placement, not 48.
	why                uint8
	nConflicts, nPaths uint8
	prev               int32
	arg                int32
	conflicts, paths   int32
}

// Result is a plan.
type Result struct {
	// Waves are the waves in order; each lists its placements in priority order. They are the
	// plan's: the conflicts of some placements are found from them when read.
	Waves [][]Placement
	// Levels is the number of dependency levels.
	Levels int

	tasks       []Task    // what the messages name
	prepared    *Prepared // what conflicts found when read are found from
	maxParallel int
	conflicts   []int    // the placements' conflicting tasks
	paths       []string // the placements' conflicting paths
}

// ErrCycle is returned for a dependency graph that is not a DAG (a list that did not pass
// tasklist.Validate).
var ErrCycle = errors.New("plan: the dependencies have a cycle")

// maxReported caps the conflicting tasks and paths a placement names.
const maxReported = 10

// DefaultBudget is the operations budget of a plan (see PlanContext): some 800,000 glob
// comparisons, a few seconds of CPU at worst. Plans of lists with files and directories, however large, take about
// one operation per task; only globs that overlap many waves come near it.
const DefaultBudget = 20_000_000

// fullCompare is the cost, in operations, of comparing a glob with another impact segment by
// segment, against 1 for a step of the search or a comparison the literal prefixes decide: it is
// some 25 times as slow (a few µs against ~100 ns, measured on the 2-core bench machine).
const fullCompare = 25

// compareCost is what comparing impacts a and b (one a glob) costs.
func compareCost(a, b *impact) int64 {
	if a.kind == b.kind && !prefixCompatible(staticPrefix(a.path), staticPrefix(b.path)) {
		return 1
	}
	return fullCompare
}

// checkEvery is how many operations pass between two looks at the context.
const checkEvery = 1 << 12

// BudgetError is a plan stopped because it used up its operations budget.
type BudgetError struct {
	// Operations is what the plan had spent when it stopped; Budget is its limit.
	Operations, Budget int64
	// Placed is the number of tasks placed by then, of Tasks.
	Placed, Tasks int
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("plan: stopped after %d operations (the budget) with %d of %d tasks placed", e.Operations, e.Placed, e.Tasks)
}

// Plan plans the waves of tasks with at most maxParallel tasks per wave (0 means
// DefaultMaxParallel) within DefaultBudget operations. It is deterministic: the same tasks give
// the same plan.
func Plan(tasks []Task, maxParallel int) (*Result, error) {
	return PlanContext(context.Background(), tasks, maxParallel, DefaultBudget)
}

// PlanContext is Plan that stops with ctx's error once ctx ends, and with a *BudgetError once it
// has spent budget operations (0: no limit). An operation is one step of a task's search for its
// wave or one comparison of a glob with another impact: what grows when globs overlap (a list of
// 2,000 tasks with 100 overlapping globs each costs billions of them), so the limit bounds the
// time a request can cost whatever its list.
func PlanContext(ctx context.Context, tasks []Task, maxParallel int, budget int64) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return Prepare(tasks).Plan(ctx, maxParallel, budget)
}

// Plan is PlanContext for the prepared tasks: the same plan, without interning their paths again.
// A Prepared is never changed by a plan, so plans of it may run concurrently.
func (pr *Prepared) Plan(ctx context.Context, maxParallel int, budget int64) (*Result, error) {
	if maxParallel <= 0 {
		maxParallel = DefaultMaxParallel
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tasks := pr.tasks
	p := getPacker(pr, maxParallel)
	defer putPacker(p)
	nLevels, err := levelsOf(tasks, &p.scratch)
	if err != nil {
		return nil, err
	}
	levelOrder(tasks, nLevels, pr.byPriority, pr.fewPriorities, &p.scratch)
	p.laid = &pr.lay // the order Prepare laid the impacts out in, unless this plan's differs
	if !slices.Equal(p.order, pr.order) {
		p.lay.lay(pr, p.order)
		p.laid = &p.lay
	}

	p.ctx, p.budget, p.check = ctx, budget, checkEvery
	for l := range nLevels {
		p.level(p.start[l], p.start[l+1], l)
		if p.err != nil {
			return nil, p.err
		}
	}
	return &Result{Waves: p.result, Levels: nLevels, tasks: tasks, prepared: pr, maxParallel: maxParallel,
		conflicts: p.conflicts, paths: p.paths}, nil
}

// Set classes: per node of the path tree (and per glob pattern), the waves of the current level
// that hold an impact of the class there. Each set comes in two flavours, "any impact" and
// "a writer", kept in one map entry.
const (
	classExact = iota // an impact (file or directory) exactly at the node
	classDir          // a directory impact at the node (covering everything under it)
	classUnder        // an impact strictly under the node
	classGlob         // a glob impact whose pattern is the node's string
	classes           // number of classes
)

// impact is a task's impact, prepared for packing.
type impact struct {
	path  string
	kind  commonv1.FileImpactKind
	write bool
	node  int32 // interned node (the path without a trailing "/"), or interned glob pattern
	// lit, for a glob that Prepare made, is the length of its literal prefix (staticPrefix)
	// without a trailing "/": every file the glob matches starts with it ("a/**" matches "a").
	// 0 for other impacts, and for globs made elsewhere: no prefix to check.
	lit int32
	// head is the path's first 8 bytes, big-endian, zero-padded, set by Prepare (with lit): a
	// glob's literal prefix and a file's path are told apart in one comparison when their first
	// bytes differ.
	head uint64
}

// headOf is the first 8 bytes of s, big-endian, zero-padded.
func headOf(s string) uint64 {
	h := uint64(0)
	for i := range 8 {
		h <<= 8
		if i < len(s) {
			h |= uint64(s[i])
		}
	}
	return h
}

// waveState is what packing needs of a wave of the current level.
type waveState struct {
	tasks  []int32
	globs  []slim  // glob impacts in the wave
	plain  []slim  // file and directory impacts in the wave (for globs to check)
	owners []int32 // owner of each plain impact
	gowner []int32 // owner of each glob impact
	// exclusive: the wave holds an exclusive task, alone.
	exclusive bool
}

// packer places the tasks of each level into waves.
type packer struct {
	tasks       []Task
	maxParallel int
	ims         []impact     // every task's impacts (the layout's src index them)
	laid        *layout      // the impacts again, in placement order (what place reads): Prepare's, or lay
	lay         layout       // the impacts laid out by this plan when its order is not Prepare's
	scratch                  // levels and order
	dirUp       []int32      // the nearest ancestor of each path where some task has a directory impact, or -1
	sets        *setTable    // (node, class, wave) → membership, this level's
	open        []int32      // union-find over waves: open[w] == w when wave w is not full
	waves       []*waveState // waves of the current level
	first       int          // number of the current level's first wave (0-based)
	result      [][]Placement
	// The level's placements in placement order and the relative wave of each, laid out wave by
	// wave into arena (one allocation for the whole plan) once the level is packed.
	pending     []Placement
	pendingWave []int32
	arena       []Placement
	counts      []int // placements per wave of the level (scratch)
	// The placements' conflicting tasks and paths (see Placement), and the conflicts of the
	// placement being recorded (scratch).
	conflicts []int
	paths     []string
	found     []conflict
	// The budget: ops spent, the limit (0: none), the next ops count at which ctx is looked at,
	// and why the plan stopped.
	ctx         context.Context
	ops, budget int64
	check       int64
	placed      int
	err         error
}

// spend counts n operations; false once the plan must stop (p.err says why).
func (p *packer) spend(n int64) bool {
	if p.err != nil {
		return false
	}
	p.ops += n
	if p.budget > 0 && p.ops > p.budget {
		p.err = &BudgetError{Operations: p.ops, Budget: p.budget, Placed: p.placed, Tasks: len(p.tasks)}
		return false
	}
	if p.ops >= p.check {
		p.check = p.ops + checkEvery
		if err := p.ctx.Err(); err != nil {
			p.err = err
			return false
		}
	}
	return true
}

func key(node int32, class int, wave int32) uint64 {
	return (uint64(node)*classes+uint64(class))<<32 | uint64(uint32(wave))
}

// free returns the first wave at or after w that is not in the set (node, class), of writers
// only when writers is set, compressing the path it walked.
func (p *packer) free(node int32, class int, w int32, writers bool) int32 {
	if !p.sets.has(node, class) {
		return w // no task of the level is in the set: the common case, no hashing
	}
	x := w
	for {
		m := p.sets.get(key(node, class, x))
		if m == nil || (writers && !m.writer) {
			break
		}
		if writers {
			x = m.nextW
		} else {
			x = m.next
		}
	}
	if x == w || x == w+1 {
		return x // nothing to compress
	}
	// Path compression: every member walked now points at x.
	for y := w; y != x; {
		m := p.sets.get(key(node, class, y))
		next := m.next
		if writers {
			next, m.nextW = m.nextW, x
		} else {
			m.next = x
		}
		y = next
	}
	return x
}

// add puts wave w in the set (node, class), and in its writers' flavour when write is set,
// remembering task t.
func (p *packer) add(node int32, class int, w, t int32, write bool) {
	m, inserted := p.sets.put(node, class, key(node, class, w), member{next: w + 1, nextW: w + 1, who: t, whoW: -1})
	if !inserted && (!write || m.writer) {
		return // nothing changes
	}
	if write {
		m.writer, m.whoW = true, t
	}
}

// who returns the task that put wave w in the set (node, class) (the first writer with writers
// set), or -1.
func (p *packer) who(node int32, class int, w int32, writers bool) int32 {
	if !p.sets.has(node, class) {
		return -1
	}
	m := p.sets.get(key(node, class, w))
	switch {
	case m == nil || (writers && !m.writer):
		return -1
	case writers:
		return m.whoW
	default:
		return m.who
	}
}

// openFrom returns the first wave at or after w that is not full.
func (p *packer) openFrom(w int32) int32 {
	x := w
	for int(x) < len(p.open) && p.open[x] != x {
		x = p.open[x]
	}
	for y := w; y != x; {
		next := p.open[y]
		p.open[y] = x
		y = next
	}
	return x
}

// fit returns the first wave at or after w that impact im lets through: a wave with no impact
// it overlaps in the sets it must avoid. A writer avoids every impact at its node and every
// directory impact above it (a directory writer also everything under it); a reader avoids the
// writers among them. Globs are checked against globs here only when identical; the rest is
// globConflict's.
func (p *packer) fit(im *slim, w int32) int32 {
	readers := !im.write // a reader only avoids writers
	if im.glob {
		return p.free(im.node, classGlob, w, readers)
	}
	for {
		x := w
		if im.dir {
			x = p.free(im.node, classUnder, x, readers)
		}
		x = p.free(im.node, classExact, x, readers)
		for a := p.dirUp[im.node]; a >= 0; a = p.dirUp[a] {
			x = p.free(a, classDir, x, readers)
		}
		if x == w {
			return w
		}
		w = x
	}
}

// level packs the tasks of one level: those at positions from to to-1 of the order.
func (p *packer) level(from, to int, lvl int) {
	p.first = len(p.result)
	p.waves = p.waves[:0]
	p.sets.next() // the sets of the level before are never looked at again
	p.pending, p.pendingWave = p.pending[:0], p.pendingWave[:0]
	for pos := from; pos < to; pos++ {
		if p.place(p.order[pos], pos, lvl); p.err != nil {
			return
		}
		p.placed++
	}
	// Lay the placements out wave by wave, each wave in placement order.
	counts := append(p.counts[:0], make([]int, len(p.waves))...)
	for _, rel := range p.pendingWave {
		counts[rel]++
	}
	p.counts = counts
	for rel, n := range counts {
		p.result[p.first+rel] = p.arena[:0:n]
		p.arena = p.arena[n:]
	}
	for i, rel := range p.pendingWave {
		w := p.first + int(rel)
		p.result[w] = append(p.result[w], p.pending[i])
	}
}

// record keeps task t's placement in wave rel of the level; flags and ims are its layout's.
func (p *packer) record(t int32, lvl, rel int, flags uint8, ims []slim) {
	p.pending = append(p.pending, p.placement(t, lvl, rel, flags, ims))
	p.pendingWave = append(p.pendingWave, int32(rel))
}

// newWave appends an empty wave to the level's, reusing the state (and the slices' room) of a
// wave of an earlier level: nothing of it is kept once its level is packed.
func (p *packer) newWave() *waveState {
	n := len(p.waves)
	if n < cap(p.waves) {
		if ws := p.waves[:n+1][n]; ws != nil {
			p.waves = p.waves[:n+1]
			*ws = waveState{tasks: ws.tasks[:0], globs: ws.globs[:0], plain: ws.plain[:0],
				owners: ws.owners[:0], gowner: ws.gowner[:0]}
			return ws
		}
	}
	ws := &waveState{tasks: make([]int32, 0, min(p.maxParallel, 64))}
	p.waves = append(p.waves, ws)
	return ws
}

// placeAlone puts exclusive task t in a new wave after the level's waves, and closes that wave.
func (p *packer) placeAlone(t int32, lvl int) {
	w := int32(p.first + len(p.waves))
	ws := p.newWave()
	ws.tasks, ws.exclusive = append(ws.tasks, t), true
	p.result = append(p.result, nil)
	p.open = append(p.open, w+1) // full: nothing joins it
	p.record(t, lvl, len(p.waves)-1, flagExclusive, nil)
}

// place puts task t, at position pos of the order, in the first wave of its level it fits in.
func (p *packer) place(t int32, pos int, lvl int) {
	flags := p.laid.flag[pos]
	if flags&flagExclusive != 0 {
		p.placeAlone(t, lvl)
		return
	}
	ims := p.laid.ims[p.laid.off[pos]:p.laid.off[pos+1]]
	hasGlob := flags&flagGlob != 0
	w := p.openFrom(int32(p.first))
	for {
		if !p.spend(1) {
			return
		}
		moved := false
		for i := range ims {
			if x := p.fit(&ims[i], w); x != w {
				w, moved = x, true
			}
		}
		if x := p.openFrom(w); x != w {
			w, moved = x, true
		}
		if moved {
			continue
		}
		if rel := int(w) - p.first; rel < len(p.waves) && p.globConflict(hasGlob, p.waves[rel], ims, nil) {
			w++
			continue
		}
		break
	}

	// Put it there.
	rel := int(w) - p.first
	if rel == len(p.waves) {
		p.newWave()
		p.result = append(p.result, nil)
		p.open = append(p.open, w)
	}
	ws := p.waves[rel]
	ws.tasks = append(ws.tasks, t)
	for i := range ims {
		im := &ims[i]
		if im.glob {
			p.add(im.node, classGlob, w, t, im.write)
			ws.globs = append(ws.globs, *im)
			ws.gowner = append(ws.gowner, t)
			continue
		}
		if im.dir {
			p.add(im.node, classDir, w, t, im.write)
		}
		p.add(im.node, classExact, w, t, im.write)
		for a := p.dirUp[im.node]; a >= 0; a = p.dirUp[a] {
			p.add(a, classUnder, w, t, im.write)
		}
		ws.plain = append(ws.plain, *im)
		ws.owners = append(ws.owners, t)
	}
	if len(ws.tasks) >= p.maxParallel {
		p.open[w] = w + 1
	}
	p.record(t, lvl, rel, flags, ims)
}

// conflict is one overlap found between the task being placed and a task of a wave.
type conflict struct {
	with int32
	path string
}

// globConflict reports whether a task with impacts ims (its layout's) conflicts with wave ws
// through a glob (a glob of the wave, or one of the task's globs against the wave's files and
// directories). With report set, it collects every such conflict into it instead of stopping at
// the first.
func (p *packer) globConflict(hasGlob bool, ws *waveState, ims []slim, report *[]conflict) bool {
	if len(ws.globs) == 0 && !hasGlob {
		return false
	}
	found := false
	for i := range ims {
		im := &ims[i]
		for j := range ws.globs {
			g := &ws.globs[j]
			if !p.spend(p.compareCost(im, g)) {
				return true // the plan stops: place sees p.err
			}
			if (im.write || g.write) && p.overlaps(im, g) {
				if report == nil {
					return true
				}
				found = true
				*report = append(*report, conflict{ws.gowner[j], p.ims[im.src].path})
			}
		}
		if !im.glob {
			continue
		}
		for j := range ws.plain {
			other := &ws.plain[j]
			if !p.spend(p.compareCost(im, other)) {
				return true
			}
			if (im.write || other.write) && p.overlaps(im, other) {
				if report == nil {
					return true
				}
				found = true
				*report = append(*report, conflict{ws.owners[j], p.ims[im.src].path})
			}
		}
	}
	return found
}
