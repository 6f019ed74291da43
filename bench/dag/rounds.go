package main

import (
	"fmt"
	"os"
	"sort"
)

// configuration is one side to run a graph on: a peer (ninja, make) or a converge deployment
// with its agents and dispatch mode.
type configuration struct {
	what string // for messages
	run  func() (side, error)
}

// shapeRuns runs g on ninja and make (--peer-rounds runs each, their median) and on every
// converge configuration o asks for, in o.rounds rounds: each round runs the peers and then each
// configuration once, so a host whose speed drifts moves every side's rounds alike, and each
// side's row is its median-wall round, with every round's wall. Its answer starts with ninja's.
func shapeRuns(g graph, o options) ([]side, error) {
	var configs []configuration
	for _, p := range []struct{ name, tool string }{{"ninja", "ninja"}, {"make", "make"}} {
		configs = append(configs, configuration{fmt.Sprintf("%s on %s", g.shape, p.name), func() (side, error) {
			r, err := peer(p.tool, g, o.agents, o.peerRounds)
			r.Name = fmt.Sprintf("%s -j %d", p.name, o.agents)
			return r, err
		}})
	}
	convergeCPU := func(run func() (side, error)) func() (side, error) {
		return func() (side, error) { return withCPU(len(g.deps), run) }
	}
	prefetch := o.prefetch
	if len(prefetch) == 0 {
		prefetch = []bool{false}
	}
	for _, ahead := range prefetch {
		o := o
		o.aheadOn = ahead
		what := ""
		if ahead {
			what = ", agents prefetching"
		}
		if o.mode == "embedded" || o.mode == "both" {
			for _, d := range modesFor(g, o) {
				for _, a := range o.embeddedAgents {
					configs = append(configs, configuration{fmt.Sprintf("%s on converge dev, %s agents%s, %s dispatch", g.shape, a, what, d),
						convergeCPU(func() (side, error) { return embedded(g, o, d, a == "local") })})
				}
			}
		}
		if o.mode == "postgres" || o.mode == "both" {
			for _, d := range modesFor(g, o) {
				configs = append(configs, configuration{fmt.Sprintf("%s on Postgres + Redis%s, %s dispatch", g.shape, what, d),
					convergeCPU(func() (side, error) { return production(g, o, d) })})
			}
		}
	}
	rounds := max(o.rounds, 1) // main refuses fewer than 1
	results := make([][]side, len(configs))
	for r := range rounds {
		for i, c := range configs {
			fmt.Fprintf(os.Stderr, "dag-bench: %s (round %d of %d)\n", c.what, r+1, rounds)
			res, err := c.run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.what, err)
			}
			results[i] = append(results[i], res)
		}
	}
	out := make([]side, len(configs))
	for i, rs := range results {
		out[i] = medianRound(rs)
	}
	return out, nil
}

// medianRound is the round of rs with the median wall (the lower middle one of an even count),
// with every round's wall in the order run (none for a single round).
func medianRound(rs []side) side {
	if len(rs) == 1 {
		return rs[0]
	}
	walls := make([]float64, len(rs))
	order := make([]int, len(rs))
	for i, r := range rs {
		walls[i], order[i] = r.WallS, i
	}
	sort.SliceStable(order, func(a, b int) bool { return walls[order[a]] < walls[order[b]] })
	m := rs[order[(len(rs)-1)/2]]
	m.RoundWallsS = walls
	return m
}
