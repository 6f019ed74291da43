package plan

import "slices"

// Levels returns the dependency level of each task (the longest chain of dependencies below it)
// and the number of levels. ErrCycle when the graph has a cycle.
//
// A task's level is one more than its dependencies' highest: computed in list order, a task whose
// dependencies all come before it (the usual list) costs one look at each dependency, with no
// adjacency lists built; a dependency not yet computed is resolved by an iterative depth-first
// walk over the dependencies, which also finds cycles. O(tasks + dependencies).
func Levels(tasks []Task) ([]int, int, error) {
	const (
		unseen  = -1
		onStack = -2
	)
	levels := make([]int, len(tasks))
	for i := range levels {
		levels[i] = unseen
	}
	type frame struct{ t, k int32 }
	var stack []frame
	nLevels := 0
	for i := range tasks {
		l, ok := 0, true
		for _, d := range tasks[i].Deps {
			ld := levels[d]
			if ld < 0 {
				ok = false
				break
			}
			l = max(l, ld+1)
		}
		if ok {
			levels[i] = l
			nLevels = max(nLevels, l+1)
			continue
		}
		// Some dependency comes later in the list: walk.
		levels[i] = onStack
		stack = append(stack[:0], frame{int32(i), 0})
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			deps := tasks[f.t].Deps
			if int(f.k) < len(deps) {
				d := deps[f.k]
				f.k++
				switch levels[d] {
				case onStack:
					return nil, 0, ErrCycle
				case unseen:
					levels[d] = onStack
					stack = append(stack, frame{d, 0})
				}
				continue
			}
			l := 0
			for _, d := range deps {
				l = max(l, levels[d]+1)
			}
			levels[f.t] = l
			nLevels = max(nLevels, l+1)
			stack = stack[:len(stack)-1]
		}
	}
	return levels, nLevels, nil
}

// levelOrder returns the tasks of each level, by priority (higher first) then list order:
// level l's tasks are order[start[l]:start[l+1]]. A counting sort by level keeps list order; the
// tasks of a level with different priorities are sorted by a key of priority and index.
func levelOrder(tasks []Task, levels []int, nLevels int) (order []int32, start []int) {
	start = make([]int, nLevels+1)
	for _, l := range levels {
		start[l+1]++
	}
	for l := range nLevels {
		start[l+1] += start[l]
	}
	order = make([]int32, len(tasks))
	fill := make([]int, nLevels)
	copy(fill, start[:nLevels])
	for i, l := range levels {
		order[fill[l]] = int32(i)
		fill[l]++
	}
	var keys []uint64
	for l := range nLevels {
		level := order[start[l]:start[l+1]]
		if len(level) < 2 {
			continue
		}
		same := true
		for _, t := range level[1:] {
			if tasks[t].Priority != tasks[level[0]].Priority {
				same = false
				break
			}
		}
		if same {
			continue
		}
		// Higher priority first: the complement of the priority's order-preserving unsigned form.
		keys = keys[:0]
		for _, t := range level {
			p := ^(uint32(tasks[t].Priority) ^ 0x80000000)
			keys = append(keys, uint64(p)<<32|uint64(uint32(t)))
		}
		slices.Sort(keys)
		for i, k := range keys {
			level[i] = int32(uint32(k))
		}
	}
	return order, start
}
