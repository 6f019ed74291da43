package plan

import (
	"testing"

	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

func TestReady(t *testing.T) {
	t.Parallel()
	im := func(path string, read bool) tasklist.Impact {
		op := commonv1.FileOperation_FILE_OPERATION_UPDATE
		if read {
			op = commonv1.FileOperation_FILE_OPERATION_READ
		}
		return tasklist.Impact{Path: path, Kind: tasklist.InferKind(path), Operation: op}
	}
	task := func(id string, deps []int32, impacts ...tasklist.Impact) Task {
		return Task{ID: id, Deps: deps, Impacts: impacts}
	}
	cases := []struct {
		name  string
		tasks []Task
		max   int
		want  map[string]int32
	}{
		{"independent tasks split by max_parallel start at once", []Task{
			task("a", nil, im("a", false)), task("b", nil, im("b", false)), task("c", nil, im("c", false))}, 1,
			map[string]int32{"a": 0, "b": 1, "c": 1}},
		{"a chain waits for each wave", []Task{
			task("a", nil, im("a", false)), task("b", []int32{0}, im("b", false)), task("c", []int32{1}, im("c", false))}, 4,
			map[string]int32{"a": 0, "b": 0, "c": 0}},
		{"a dependency two waves back", []Task{
			task("a", nil, im("x", false)), task("y", nil, im("x", false)), task("d", []int32{0}, im("d", false))}, 4,
			map[string]int32{"a": 0, "y": 0, "d": 2}},
		{"a file written in a wave between", []Task{
			task("a", nil, im("a", false)), task("b", nil, im("b", false)), task("c", nil, im("b", false)), task("e", nil, im("b", true))}, 1,
			// waves: a, b, c, e; c conflicts with b (wave 2); e reads b, written by c (wave 3).
			map[string]int32{"a": 0, "b": 1, "c": 0, "e": 0}},
		{"readers do not conflict", []Task{
			task("a", nil, im("a", false)), task("r1", nil, im("s", true)), task("r2", nil, im("s", true))}, 1,
			map[string]int32{"a": 0, "r1": 1, "r2": 1}},
		{"a directory covers its files", []Task{
			task("d", nil, im("src/", false)), task("x", nil, im("other", false)), task("f", nil, im("src/lib/f.go", false)), task("g", nil, im("docs/g.md", false))}, 1,
			map[string]int32{"d": 0, "x": 1, "f": 2, "g": 1}},
		{"a file under a later directory", []Task{
			task("f", nil, im("src/f.go", false)), task("x", nil, im("other", false)), task("d", nil, im("src/", false))}, 1,
			map[string]int32{"f": 0, "x": 1, "d": 2}},
		{"globs", []Task{
			task("g", nil, im("src/**/*.go", false)), task("x", nil, im("other", false)), task("f", nil, im("src/a/b.go", false)), task("t", nil, im("src/a/b.ts", false))}, 1,
			map[string]int32{"g": 0, "x": 1, "f": 2, "t": 1}},
		{"an exclusive task waits and holds back later ones", []Task{
			task("a", nil, im("a", false)), {ID: "check", Exclusive: true}, task("b", nil, im("b", false))}, 4,
			map[string]int32{"a": 0, "check": 0, "b": 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res, err := Plan(c.tasks, c.max)
			require.NoError(t, err)
			ready := Ready(c.tasks, res, 0)
			got := map[string]int32{}
			for i, tk := range c.tasks {
				got[tk.ID] = ready[i]
			}
			require.Equal(t, c.want, got)
		})
	}
}
