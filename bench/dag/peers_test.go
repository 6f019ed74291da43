package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNinjaLatenciesFromTheLog(t *testing.T) {
	t.Parallel()
	// t0 and t1 have no dependencies; t2 depends on both, t3 on t2.
	g := graph{shape: "random", deps: [][]int{nil, nil, {0, 1}, {2}}}
	write := func(t *testing.T, body string) string {
		p := filepath.Join(t.TempDir(), ".ninja_log")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	lat, err := ninjaLatencies(write(t, "# ninja log v5\n0\t3\t0\tt0000\tab\n1\t7\t0\tt0001\tcd\n9\t10\t0\tt0002\tef\n10\t12\t0\tt0003\t01\n"), g)
	require.NoError(t, err)
	// t2 starts at 9, its last dependency (t1) ended at 7; t3 starts at 10, t2 ended at 10.
	require.Equal(t, []time.Duration{2 * time.Millisecond, 0}, lat)

	for name, body := range map[string]string{
		"not a ninja log":  "# make log\n",
		"a step missing":   "# ninja log v5\n0\t3\t0\tt0000\tab\n1\t7\t0\tt0001\tcd\n9\t10\t0\tt0002\tef\n",
		"a step twice":     "# ninja log v5\n0\t3\t0\tt0000\tab\n0\t3\t0\tt0000\tab\n1\t7\t0\tt0001\tcd\n9\t10\t0\tt0002\tef\n10\t12\t0\tt0003\t01\n",
		"a foreign step":   "# ninja log v5\n0\t3\t0\tt9999\tab\n",
		"end before start": "# ninja log v5\n5\t3\t0\tt0000\tab\n",
		"too few fields":   "# ninja log v5\n0\t3\n",
	} {
		_, err := ninjaLatencies(write(t, body), g)
		require.Error(t, err, name)
	}
}

// TestNinjaPeerReportsItsLatency runs the real ninja: on a chain every step but the first has a
// dependency, so the log gives one latency per step after the first; a fan-out gives none.
func TestNinjaPeerReportsItsLatency(t *testing.T) {
	t.Parallel()
	chain, err := makeGraph("chain", options{chainTasks: 30})
	require.NoError(t, err)
	r, err := peer("ninja", chain, 2, 2)
	require.NoError(t, err)
	require.Equal(t, "ok", r.Outcome)
	require.NotEmpty(t, r.Latency)
	require.GreaterOrEqual(t, r.LatP50Ms, 0.0)
	require.GreaterOrEqual(t, r.LatP99Ms, r.LatP50Ms)
	require.GreaterOrEqual(t, r.LatMaxMs, r.LatP99Ms)

	lat, err := func() ([]time.Duration, error) {
		dir := t.TempDir()
		file, body := peerFile("ninja", chain)
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644))
		require.NoError(t, runIn(dir, "ninja", "-j", "2", "--quiet"))
		return ninjaLatencies(filepath.Join(dir, ".ninja_log"), chain)
	}()
	require.NoError(t, err)
	require.Len(t, lat, 29)

	fan, err := makeGraph("fanout", options{tasks: 20})
	require.NoError(t, err)
	r, err = peer("ninja", fan, 2, 1)
	require.NoError(t, err)
	require.Empty(t, r.Latency)
}

func runIn(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, out)
	}
	return nil
}
