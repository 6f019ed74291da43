package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsNameEveryVariable: every CONVERGE_* variable the Compose file, the manifests or the
// smoke test set is in docs/deploy.md's table, so an operator reading it sees what they configure.
func TestDocsNameEveryVariable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/deploy.md")
	require.NoError(t, err)
	docs := string(raw)
	re := regexp.MustCompile(`\bCONVERGE_[A-Z_]+[A-Z]\b`)
	used := map[string][]string{}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !strings.HasSuffix(path, ".yaml") && !strings.HasSuffix(path, ".example") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range re.FindAllString(string(b), -1) {
			used[v] = append(used[v], path)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, used)
	// The deployment files' own knobs (image tag, published port) are documented with them.
	for v, files := range used {
		require.Contains(t, docs, "`"+v+"`", "%s (set in %v) is not in docs/deploy.md", v, files)
	}
}
