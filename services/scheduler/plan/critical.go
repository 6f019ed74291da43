package plan

import (
	"cmp"
	"slices"
)

// Chains returns, for each task of a plan r of tasks, the number of tasks in the longest chain
// that starts at it and follows its dependents (1 for a task nothing depends on): ninja's
// critical path, every task weighing one. A task with a long chain below it holds back more of
// the run the later it starts.
func Chains(tasks []Task, r *Result) []int32 {
	chain := make([]int32, len(tasks))
	// Every task is placed once, with its dependency level; a dependency's level is below its
	// dependents', so the tasks in decreasing level order see every dependent before its
	// dependencies.
	byLevel := make([][]int32, r.Levels)
	for _, wave := range r.Waves {
		for i := range wave {
			pl := &wave[i]
			byLevel[pl.Level] = append(byLevel[pl.Level], int32(pl.Task))
		}
	}
	for l := len(byLevel) - 1; l >= 0; l-- {
		for _, t := range byLevel[l] {
			chain[t]++ // itself
			for _, d := range tasks[t].Deps {
				if d != t && chain[d] < chain[t] {
					chain[d] = chain[t]
				}
			}
		}
	}
	return chain
}

// ClaimPositions returns the claim order of a plan r of tasks, as the position of each
// placement (positions[w][i] for r.Waves[w][i]): a claim takes the pending task of lowest
// position. The order is the tasks' priority (higher first), then the longest chain of dependents
// below the task (Chains: the critical path first, as ninja does), then the wave, then the
// placement's order in its wave; positions are the ranks 0 … n−1 of the whole run, so tasks of
// different waves compare too (an eager claim choosing among later waves' ready tasks).
func ClaimPositions(tasks []Task, r *Result) [][]int32 {
	chain := Chains(tasks, r)
	type key struct {
		priority, chain, wave, index int32
	}
	var keys []key
	for w, wave := range r.Waves {
		for i := range wave {
			t := wave[i].Task
			keys = append(keys, key{tasks[t].Priority, chain[t], int32(w), int32(i)})
		}
	}
	less := func(a, b key) int {
		if c := cmp.Compare(b.priority, a.priority); c != 0 {
			return c
		}
		if c := cmp.Compare(b.chain, a.chain); c != 0 {
			return c
		}
		if c := cmp.Compare(a.wave, b.wave); c != 0 {
			return c
		}
		return cmp.Compare(a.index, b.index)
	}
	if !slices.IsSortedFunc(keys, less) {
		slices.SortFunc(keys, less)
	}
	positions := make([][]int32, len(r.Waves))
	for w, wave := range r.Waves {
		positions[w] = make([]int32, len(wave))
	}
	for rank, k := range keys {
		positions[k.wave][k.index] = int32(rank)
	}
	return positions
}
