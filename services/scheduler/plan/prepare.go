package plan

import (
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
)

// Prepared is a list of tasks with every impact's path interned into the path tree: what the
// packer needs of the files, computed once per list (Prepare) however many times it is planned.
// Naming each file once is the one step of planning a plain topological sort has no counterpart
// of (one hash and one cold probe per path, about a Kahn sort's time at 100,000 tasks), so a list
// kept for planning again (a stored task list) keeps its Prepared. It is never changed once
// built: plans of it may run concurrently.
type Prepared struct {
	tasks     []Task
	ims       []impact // every task's impacts: task t's are ims[off[t]:off[t+1]]
	off       []int32
	exclusive []bool  // each task's Exclusive
	dirUp     []int32 // per node, the nearest ancestor where some task has a directory impact, or -1
	nodes     int     // number of interned paths and patterns
	// The tasks by priority (higher first) then list order, when they have few distinct
	// priorities (fewPriorities; nil then when they all have the same): see priorityOrder.
	byPriority    []int32
	fewPriorities bool
	// The impacts laid out in the order the plans place the tasks (order, the list's levels and
	// priorities): a plan whose order is this one reads them in sequence (see layout).
	order []int32
	lay   layout
}

// Prepare interns the paths of tasks for planning. tasks must not change while the Prepared is
// in use.
func Prepare(tasks []Task) *Prepared {
	pr := &Prepared{
		tasks:     tasks,
		off:       make([]int32, len(tasks)+1),
		exclusive: make([]bool, len(tasks)),
	}
	pr.byPriority, pr.fewPriorities = priorityOrder(tasks)
	total := 0
	for i, t := range tasks {
		total += len(t.Impacts)
		pr.off[i+1] = int32(total)
		pr.exclusive[i] = t.Exclusive
	}
	nodes := newInternTable(total)
	pr.ims = make([]impact, total) // one allocation for every task's impacts
	hasDir := false
	k := 0
	for _, t := range tasks {
		for _, im := range t.Impacts {
			x := &pr.ims[k]
			k++
			*x = impact{path: im.Path, kind: im.Kind, write: im.Writes(), head: headOf(im.Path)}
			switch im.Kind {
			case commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB:
				// Patterns and paths share ids without clashing: their sets are of different classes.
				x.node = nodes.intern(im.Path)
				x.lit = int32(len(strings.TrimSuffix(staticPrefix(im.Path), "/")))
			case commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY:
				x.node = nodes.intern(im.Node())
				hasDir = true
			default:
				x.node = nodes.intern(im.Node())
			}
		}
	}
	parent := nodes.parent
	n := len(parent)
	pr.nodes = n
	// Sets of directory impacts ("dir") and of what lies under a directory ("under") are only
	// ever looked at for paths where some task has a directory impact: skip the others.
	pr.dirUp = make([]int32, n)
	if !hasDir {
		for i := range pr.dirUp {
			pr.dirUp[i] = -1
		}
		pr.layOut()
		return pr
	}
	dirNode := make([]bool, n)
	for i := range pr.ims {
		if pr.ims[i].kind == commonv1.FileImpactKind_FILE_IMPACT_KIND_DIRECTORY {
			dirNode[pr.ims[i].node] = true
		}
	}
	// A parent is interned before its children, so its dirUp is known when theirs is computed.
	for i, a := range parent {
		if a >= 0 && !dirNode[a] {
			a = pr.dirUp[a]
		}
		pr.dirUp[i] = a
	}
	pr.layOut()
	return pr
}

// layOut lays pr's impacts out in the order its plans place the tasks. Nothing when the
// dependencies have a cycle: every plan of pr fails then.
func (pr *Prepared) layOut() {
	var s scratch
	n, err := levelsOf(pr.tasks, &s)
	if err != nil {
		return
	}
	levelOrder(pr.tasks, n, pr.byPriority, pr.fewPriorities, &s)
	pr.order = s.order
	pr.lay.lay(pr, s.order)
}

// Tasks are the prepared tasks.
func (pr *Prepared) Tasks() []Task { return pr.tasks }

// impactsOf returns task t's impacts.
func (pr *Prepared) impactsOf(t int32) []impact { return pr.ims[pr.off[t]:pr.off[t+1]] }

// Subset is the prepared list of the tasks keep marks (keep[i] for task i), in list order, their
// dependencies on tasks left out dropped (as FromSpec drops those on completed tasks): its plan is
// the plan of Prepare of those tasks, without interning their paths again. The path tree is
// shared with pr (paths only the left-out tasks name stay in it, and their sets stay empty). pr
// itself when keep marks every task.
func (pr *Prepared) Subset(keep []bool) *Prepared {
	n := 0
	for i := range pr.tasks {
		if keep[i] {
			n++
		}
	}
	if n == len(pr.tasks) {
		return pr
	}
	newIndex := make([]int32, len(pr.tasks))
	sub := &Prepared{
		tasks:     make([]Task, 0, n),
		off:       make([]int32, 1, n+1),
		exclusive: make([]bool, 0, n),
		dirUp:     pr.dirUp,
		nodes:     pr.nodes,
	}
	ims, deps := 0, 0
	for i := range pr.tasks {
		newIndex[i] = int32(len(sub.tasks))
		if keep[i] {
			sub.tasks = append(sub.tasks, pr.tasks[i])
			ims += int(pr.off[i+1] - pr.off[i])
			deps += len(pr.tasks[i].Deps)
		}
	}
	sub.ims = make([]impact, 0, ims)
	flat := make([]int32, 0, deps) // every kept task's dependencies, in one allocation
	for i := range pr.tasks {
		if !keep[i] {
			continue
		}
		t := &sub.tasks[newIndex[i]]
		start := len(flat)
		for _, d := range t.Deps {
			if keep[d] {
				flat = append(flat, newIndex[d])
			}
		}
		t.Deps = nil
		if len(flat) > start {
			t.Deps = flat[start:len(flat):len(flat)]
		}
		sub.ims = append(sub.ims, pr.impactsOf(int32(i))...)
		sub.off = append(sub.off, int32(len(sub.ims)))
		sub.exclusive = append(sub.exclusive, pr.exclusive[i])
	}
	sub.byPriority, sub.fewPriorities = priorityOrder(sub.tasks)
	sub.layOut()
	return sub
}
