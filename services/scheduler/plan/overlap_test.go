package plan

import (
	"testing"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/stretchr/testify/require"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
)

// A glob that Prepare made rejects a file outside its literal prefix without the matcher: the
// answer must be the matcher's for every pattern and file, "a/**" matching "a" and escapes,
// classes and alternatives included.
func TestGlobLiteralPrefixAgreesWithTheMatcher(t *testing.T) {
	t.Parallel()
	globs := []string{"a/**", "a/**/*.go", "a/*.go", "a/b/**", "**/*.ts", "a/{x,y}.go", "{a,b}/x.go",
		"a\\*b", "a/[xy].go", "a/x?.go", "ab/**", "a", "a/b.go", "c/d/*.go", "a/b/", "a/**/b/**"}
	files := []string{"a", "a/", "ab", "a/x.go", "a/y.go", "a/b", "a/b/z.go", "a/b/w.ts", "b/x.go", "a*b", "a\\*b",
		"ab/c", "c/d/e.go", "x.ts", "a/xy.go", "a/b.go", "", "a/b/b/c"}
	for _, g := range globs {
		tasks := []Task{{ID: "g", Impacts: []tasklist.Impact{w(g)}}}
		tasks[0].Impacts[0].Kind = commonv1.FileImpactKind_FILE_IMPACT_KIND_GLOB
		for _, f := range files {
			tasks = append(tasks, Task{ID: f, Impacts: []tasklist.Impact{{Path: f, Kind: commonv1.FileImpactKind_FILE_IMPACT_KIND_FILE}}})
		}
		pr := Prepare(tasks)
		glob := &pr.ims[0]
		for i, f := range files {
			file := &pr.ims[1+i]
			require.Equal(t, doublestar.MatchUnvalidated(g, f), overlaps(glob, file), "%q against %q", g, f)
			require.Equal(t, doublestar.MatchUnvalidated(g, f), overlaps(file, glob), "%q against %q", f, g)
		}
	}
}
