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
	var s scratch
	n, err := levelsOf(tasks, &s)
	if err != nil {
		return nil, 0, err
	}
	out := make([]int, len(s.levels))
	for i, l := range s.levels {
		out[i] = int(l)
	}
	return out, n, nil
}

// scratch is what levelsOf and levelOrder compute, in slices a packer keeps from plan to plan.
type scratch struct {
	levels, via []int32 // per task: its level, and the dependency that gives it
	order       []int32 // the tasks of level l are order[start[l]:start[l+1]]
	start, fill []int
	stack       []frame
	keys        []uint64
}

// frame is one task of levelsOf's depth-first walk, and the next of its dependencies to visit.
type frame struct{ t, k int32 }

// levelsOf is Levels, into s.levels, with s.via: for each task, the first of its dependencies (in
// its list) whose level is one below its own, or -1 at level 0 (what its placement's message
// names).
func levelsOf(tasks []Task, s *scratch) (nLevels int, err error) {
	const (
		unseen  = -1
		onStack = -2
	)
	s.levels, s.via = resize(s.levels, len(tasks)), resize(s.via, len(tasks))
	levels, via := s.levels, s.via
	for i := range levels {
		levels[i] = unseen
	}
	stack := s.stack
	defer func() { s.stack = stack[:0] }()
	for i := range tasks {
		l, by, ok := int32(0), int32(-1), true
		for _, d := range tasks[i].Deps {
			ld := levels[d]
			if ld < 0 {
				ok = false
				break
			}
			if ld >= l { // the first dependency of the highest level so far
				l, by = ld+1, d
			}
		}
		if ok {
			levels[i], via[i] = l, by
			nLevels = max(nLevels, int(l)+1)
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
					return 0, ErrCycle
				case unseen:
					levels[d] = onStack
					stack = append(stack, frame{d, 0})
				}
				continue
			}
			l, by := int32(0), int32(-1)
			for _, d := range deps {
				if levels[d] >= l {
					l, by = levels[d]+1, d
				}
			}
			levels[f.t], via[f.t] = l, by
			nLevels = max(nLevels, int(l)+1)
			stack = stack[:len(stack)-1]
		}
	}
	return nLevels, nil
}

// levelOrder returns the tasks of each level, by priority (higher first) then list order:
// level l's tasks are order[start[l]:start[l+1]]. With a few distinct priorities (the usual
// list: one, or a handful), two stable counting sorts, by priority then by level, give that
// order in two passes; otherwise a counting sort by level keeps list order, and the tasks of a
// level with different priorities are sorted by a key of priority and index.
// byPriority and few are priorityOrder's answer for tasks (Prepare computes it once per list).
// levels are s.levels (levelsOf); order and start go to s.order and s.start.
func levelOrder(tasks []Task, nLevels int, byPriority []int32, few bool, s *scratch) {
	levels := s.levels
	start := resize(s.start, nLevels+1)
	clear(start)
	for _, l := range levels {
		start[l+1]++
	}
	for l := range nLevels {
		start[l+1] += start[l]
	}
	order := resize(s.order, len(tasks))
	fill := resize(s.fill, nLevels)
	copy(fill, start[:nLevels])
	s.order, s.start, s.fill = order, start, fill
	for i, l := range levels {
		if byPriority != nil {
			t := byPriority[i]
			l = levels[t]
			order[fill[l]] = t
		} else {
			order[fill[l]] = int32(i)
		}
		fill[l]++
	}
	if few {
		return
	}
	keys := s.keys
	defer func() { s.keys = keys[:0] }()
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
}

// maxPriorities is how many distinct priorities priorityOrder sorts by counting.
const maxPriorities = 8

// priorityOrder returns the tasks' indexes by priority (higher first) then list order, by a
// counting sort, when the tasks have at most maxPriorities distinct priorities (ok false
// otherwise); nil, true when they all have the same (list order is then the order).
func priorityOrder(tasks []Task) (_ []int32, ok bool) {
	var distinct [maxPriorities]int32
	n := 0
	rank := make([]uint8, len(tasks))
	for i := range tasks {
		p := tasks[i].Priority
		k := 0
		for k < n && distinct[k] != p {
			k++
		}
		if k == n {
			if n == maxPriorities {
				return nil, false
			}
			distinct[n] = p
			n++
		}
		rank[i] = uint8(k)
	}
	if n <= 1 {
		return nil, true // list order is the order
	}
	// Rank by priority, highest first.
	sorted := slices.Clone(distinct[:n])
	slices.Sort(sorted)
	var toRank [maxPriorities]uint8
	for k, p := range distinct[:n] {
		toRank[k] = uint8(n - 1 - slices.Index(sorted, p))
	}
	var fill [maxPriorities + 1]int
	for i := range rank {
		rank[i] = toRank[rank[i]]
		fill[rank[i]+1]++
	}
	for k := range n {
		fill[k+1] += fill[k]
	}
	out := make([]int32, len(tasks))
	for i, k := range rank {
		out[fill[k]] = int32(i)
		fill[k]++
	}
	return out, true
}
