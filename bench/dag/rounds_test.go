package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMedianRoundKeepsOneRoundWhole: the row is the median-wall round with all of its own
// figures (not a mix of rounds), and lists every round's wall in the order run.
func TestMedianRoundKeepsOneRoundWhole(t *testing.T) {
	rs := []side{{WallS: 0.9, LatP50Ms: 9}, {WallS: 0.7, LatP50Ms: 7}, {WallS: 0.8, LatP50Ms: 8}}
	m := medianRound(rs)
	require.Equal(t, 0.8, m.WallS)
	require.Equal(t, 8.0, m.LatP50Ms)
	require.Equal(t, []float64{0.9, 0.7, 0.8}, m.RoundWallsS)

	even := medianRound([]side{{WallS: 2}, {WallS: 1}, {WallS: 4}, {WallS: 3}})
	require.Equal(t, 2.0, even.WallS, "the lower middle of an even count")

	one := medianRound([]side{{WallS: 1.5}})
	require.Equal(t, 1.5, one.WallS)
	require.Nil(t, one.RoundWallsS, "a single round lists no rounds")
}
