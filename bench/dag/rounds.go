package main

import (
	"fmt"
	"os"
	"sort"
)

// configuration is one converge deployment, agents and dispatch mode to run a graph on.
type configuration struct {
	what string // for messages
	run  func() (side, error)
}

// convergeRuns runs g on every converge configuration o asks for, o.rounds times each, the
// configurations alternated round by round (a host whose load drifts moves every configuration's
// rounds alike), and answers each configuration's median-wall round with every round's wall.
func convergeRuns(g graph, o options) ([]side, error) {
	var configs []configuration
	if o.mode == "embedded" || o.mode == "both" {
		for _, d := range modesFor(g, o) {
			for _, a := range o.embeddedAgents {
				configs = append(configs, configuration{fmt.Sprintf("%s on converge dev, %s agents, %s dispatch", g.shape, a, d),
					func() (side, error) { return embedded(g, o, d, a == "local") }})
			}
		}
	}
	if o.mode == "postgres" || o.mode == "both" {
		for _, d := range modesFor(g, o) {
			configs = append(configs, configuration{fmt.Sprintf("%s on Postgres + Redis, %s dispatch", g.shape, d),
				func() (side, error) { return production(g, o, d) }})
		}
	}
	rounds := max(o.rounds, 1)
	results := make([][]side, len(configs))
	for r := range rounds {
		for i, c := range configs {
			fmt.Fprintf(os.Stderr, "dag-bench: %s (round %d of %d)\n", c.what, r+1, rounds)
			res, err := withCPU(len(g.deps), c.run)
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
