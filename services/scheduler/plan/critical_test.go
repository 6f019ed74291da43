package plan

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClaimPositions(t *testing.T) {
	t.Parallel()
	task := func(id string, priority int32, deps ...int32) Task {
		return Task{ID: id, Priority: priority, Deps: deps}
	}
	// r, s, u (level 0); w on s, v on u (1); z on v (2); z1 on z (3). u's chain: u v z z1.
	tasks := []Task{task("r", 0), task("s", 0), task("u", 0), task("w", 0, 1), task("v", 0, 2), task("z", 0, 4), task("z1", 0, 5)}
	res, err := Plan(tasks, 8)
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 4, 1, 3, 2, 1}, Chains(tasks, res))

	order := func(tasks []Task, maxParallel int) [][]string {
		t.Helper()
		res, err := Plan(tasks, maxParallel)
		require.NoError(t, err)
		pos := ClaimPositions(tasks, res)
		byRank := make(map[int32]string)
		var out [][]string
		for w, wave := range res.Waves {
			var ids []string
			for i := range wave {
				byRank[pos[w][i]] = tasks[wave[i].Task].ID
				ids = append(ids, tasks[wave[i].Task].ID)
			}
			out = append(out, ids)
		}
		require.Len(t, byRank, len(tasks), "every position once")
		var ranked []string
		for r := range int32(len(tasks)) {
			ranked = append(ranked, byRank[r])
		}
		return append(out, ranked)
	}
	// The waves keep their placements; the claim order is by chain, then wave, then placement.
	require.Equal(t, [][]string{{"r", "s", "u"}, {"w", "v"}, {"z"}, {"z1"}, {"u", "v", "s", "z", "r", "w", "z1"}}, order(tasks, 8), "s and z tie at 2: the earlier wave first")
	// Priority comes first: r's 1 puts it before every chain.
	tasks[0].Priority = 1
	got := order(tasks, 8)
	require.Equal(t, []string{"r", "u", "v", "s", "z", "w", "z1"}, got[len(got)-1])
	// Deterministic: the same plan, the same positions.
	require.Equal(t, got, order(tasks, 8))
}
