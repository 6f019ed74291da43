package clustertest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRandomDAG(t *testing.T) {
	t.Parallel()
	deps := RandomDAG(1000, 5000, 1)
	require.Len(t, deps, 1000)
	edges := 0
	for to, ds := range deps {
		for i, from := range ds {
			require.Less(t, from, to, "an edge points from the lower index to the higher")
			if i > 0 {
				require.Less(t, ds[i-1], from, "sorted, no duplicate edge")
			}
		}
		edges += len(ds)
	}
	require.Equal(t, 5000, edges)
	require.Equal(t, deps, RandomDAG(1000, 5000, 1), "the same seed, the same graph")
	require.NotEqual(t, deps, RandomDAG(1000, 5000, 2))
	require.Equal(t, 3, func() int {
		n := 0
		for _, d := range RandomDAG(3, 10, 1) {
			n += len(d)
		}
		return n
	}(), "at most n(n-1)/2 edges")
}
