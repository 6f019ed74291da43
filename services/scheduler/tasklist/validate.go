package tasklist

import (
	"fmt"
	"slices"
	"strings"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
)

// Violation is one reason a task list is refused as a whole.
type Violation struct {
	// Field is the path of the offending field within the TaskListSpec, e.g.
	// "tasks[3].depends_on[0]".
	Field string
	// Description says what is wrong, e.g. `unknown task "9.9"`.
	Description string
	// Task is the index of the task the violation is about, or -1 for list-level fields.
	Task int
}

// MaxViolations caps the violations Validate reports; one more says how many were left out.
const MaxViolations = 100

// Validate checks spec as a whole, beyond the per-field protovalidate rules the proto carries:
// duplicate task ids, unknown and self dependencies, dependency cycles (each named, e.g.
// "1.1 → 1.3 → 1.1"), and unsafe paths in tasks, files, context and validation trigger globs
// (see [CheckPath]). It returns nil for a valid list. Violations come in task order, at most
// [MaxViolations] of them (plus one that counts the rest). It runs in O(tasks + dependencies +
// paths).
func Validate(spec *schedulerv1.TaskListSpec) []Violation {
	v := &violations{}
	tasks := spec.GetTasks()

	// Ids first: dependencies are resolved against the first task of each id.
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if first, dup := index[t.GetId()]; dup {
			v.add(i, fmt.Sprintf("tasks[%d].id", i), fmt.Sprintf("duplicate task id %q (first used by tasks[%d])", t.GetId(), first))
			continue
		}
		index[t.GetId()] = i
	}

	for i, t := range tasks {
		if t.GetFile() != "" {
			if msg := CheckPath(t.GetFile(), commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE); msg != "" {
				v.add(i, fmt.Sprintf("tasks[%d].file", i), fmt.Sprintf("%q %s", t.GetFile(), msg))
			}
		}
		for j, f := range t.GetFiles() {
			if msg := CheckPath(f.GetPath(), ResolveKind(f.GetPath(), f.GetKind())); msg != "" {
				v.add(i, fmt.Sprintf("tasks[%d].files[%d].path", i, j), fmt.Sprintf("%q %s", f.GetPath(), msg))
			}
		}
		if t.GetRequiresSignoff() && !IsGate(t) {
			v.add(i, fmt.Sprintf("tasks[%d].requires_signoff", i), fmt.Sprintf("task %q is not a gate: only a milestone or phase gate (a RUN task whose id starts with %q) can require a sign-off", t.GetId(), GatePrefix))
		}
		for j, dep := range t.GetDependsOn() {
			field := fmt.Sprintf("tasks[%d].depends_on[%d]", i, j)
			switch d, ok := index[dep]; {
			case !ok:
				v.add(i, field, fmt.Sprintf("task %q depends on unknown task %q", t.GetId(), dep))
			case d == i || dep == t.GetId():
				v.add(i, field, fmt.Sprintf("task %q depends on itself", t.GetId()))
			}
		}
	}
	for _, c := range Cycles(tasks, index) {
		v.add(c.Task, fmt.Sprintf("tasks[%d].depends_on[%d]", c.Task, c.Dep), "dependency cycle: "+c.String())
	}

	ctx := spec.GetContext()
	v.path("context.spec_file", ctx.GetSpecFile(), commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE)
	v.path("context.tasks_file", ctx.GetTasksFile(), commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE)
	for i, c := range ctx.GetConventions() {
		v.path(fmt.Sprintf("context.conventions[%d].path", i), c.GetPath(), commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE)
	}
	for i, p := range ctx.GetContextFiles() {
		v.path(fmt.Sprintf("context.context_files[%d]", i), p, commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE)
	}
	for i, g := range spec.GetValidation().GetApiTriggerGlobs() {
		v.path(fmt.Sprintf("validation.api_trigger_globs[%d]", i), g, commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB)
	}
	for i, g := range spec.GetValidation().GetUiTriggerGlobs() {
		v.path(fmt.Sprintf("validation.ui_trigger_globs[%d]", i), g, commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB)
	}
	return v.result()
}

// violations collects violations up to MaxViolations and counts the rest.
type violations struct {
	list    []Violation
	dropped int
}

func (v *violations) add(task int, field, desc string) {
	if len(v.list) >= MaxViolations {
		v.dropped++
		return
	}
	v.list = append(v.list, Violation{Field: field, Description: desc, Task: task})
}

// path adds a violation for a list-level path that is set and unsafe.
func (v *violations) path(field, p string, kind commonv1.FileImpactKind) {
	if p == "" {
		return
	}
	if msg := CheckPath(p, kind); msg != "" {
		v.add(-1, field, fmt.Sprintf("%q %s", p, msg))
	}
}

func (v *violations) result() []Violation {
	if v.dropped > 0 {
		v.list = append(v.list, Violation{Field: "tasks", Description: fmt.Sprintf("and %d more violations", v.dropped), Task: -1})
	}
	return v.list
}

// Cycle is one dependency cycle: Path[0] depends on Path[1], ..., and the last on Path[0].
type Cycle struct {
	// Path holds the ids along the cycle, without repeating the first at the end.
	Path []string
	// Task is the index of Path[0]'s task and Dep the index, in its depends_on, of the edge to
	// Path[1]: the field a violation names.
	Task, Dep int
}

// String names the cycle, e.g. "1.1 → 1.3 → 1.1".
func (c Cycle) String() string {
	return strings.Join(append(slices.Clone(c.Path), c.Path[0]), " → ")
}

// Cycles finds the dependency cycles of tasks: one per strongly connected component that has a
// cycle, the shortest one through the component's first task in list order, components in list
// order. index maps ids to task indexes (the first task of each id); unknown and self
// dependencies are left out (Validate reports those on their own). O(tasks + dependencies).
func Cycles(tasks []*commonv1.Task, index map[string]int) []Cycle {
	n := len(tasks)
	// deps[i] are the indexes task i depends on, with the position in its depends_on.
	type edge struct{ to, pos int }
	deps := make([][]edge, n)
	for i, t := range tasks {
		for j, id := range t.GetDependsOn() {
			if d, ok := index[id]; ok && d != i {
				deps[i] = append(deps[i], edge{d, j})
			}
		}
	}

	// Kahn's algorithm peels off every task not on or behind a cycle; cycles live in the rest.
	indeg := make([]int, n) // number of dependents not yet peeled, per task
	for i := range deps {
		for _, e := range deps[i] {
			indeg[e.to]++
		}
	}
	queue := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	peeled := make([]bool, n)
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		peeled[i] = true
		for _, e := range deps[i] {
			if indeg[e.to]--; indeg[e.to] == 0 {
				queue = append(queue, e.to)
			}
		}
	}
	if !slices.Contains(peeled, false) {
		return nil
	}

	// Tarjan's strongly connected components over the rest, iteratively.
	comp := make([]int, n)
	for i := range comp {
		comp[i] = -1
	}
	low, num := make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	var stack []int
	counter, comps := 0, 0
	type frame struct{ node, next int }
	for root := range n {
		if peeled[root] || num[root] != 0 {
			continue
		}
		call := []frame{{root, 0}}
		counter++
		num[root], low[root] = counter, counter
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.next < len(deps[f.node]) {
				w := deps[f.node][f.next].to
				f.next++
				if peeled[w] {
					continue
				}
				if num[w] == 0 {
					counter++
					num[w], low[w] = counter, counter
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				} else if onStack[w] {
					low[f.node] = min(low[f.node], num[w])
				}
				continue
			}
			v := f.node
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].node
				low[p] = min(low[p], low[v])
			}
			if low[v] == num[v] {
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp[w] = comps
					if w == v {
						break
					}
				}
				comps++
			}
		}
	}

	// For each component with a cycle, in order of its first task: the shortest cycle through
	// that task, by breadth-first search within the component.
	var cycles []Cycle
	done := make([]bool, comps)
	prev := make([]int, n) // -2: not reached; -1: the start; else the task reached from
	prevPos := make([]int, n)
	for i := range prev {
		prev[i] = -2
	}
	for s := range n {
		if comp[s] < 0 || done[comp[s]] {
			continue
		}
		done[comp[s]] = true
		c := comp[s]
		bfs := []int{s} // also the list of reached tasks, to reset prev after
		prev[s] = -1
		last, lastPos := -1, -1
		for head := 0; head < len(bfs) && last < 0; head++ {
			u := bfs[head]
			for _, e := range deps[u] {
				if comp[e.to] != c {
					continue
				}
				if e.to == s {
					last, lastPos = u, e.pos
					break
				}
				if prev[e.to] == -2 {
					prev[e.to], prevPos[e.to] = u, e.pos
					bfs = append(bfs, e.to)
				}
			}
		}
		// Walk back from last to s: s → ... → last → s.
		var rev []int
		for u := last; u >= 0; u = prev[u] {
			rev = append(rev, u)
		}
		for _, u := range bfs {
			prev[u] = -2
		}
		if last < 0 {
			continue // a component of one task without a self edge has no cycle
		}
		slices.Reverse(rev)
		path := make([]string, len(rev))
		for i, u := range rev {
			path[i] = tasks[u].GetId()
		}
		dep := lastPos
		if len(rev) > 1 {
			dep = prevPos[rev[1]]
		}
		cycles = append(cycles, Cycle{Path: path, Task: s, Dep: dep})
	}
	return cycles
}
