package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDevCPUProfile: `converge dev --cpuprofile` takes CONVERGE_DEV_CPUPROFILE and says so in
// its help (servicecmd.StartCPUProfile writes the profile, a %p in its path replaced by the
// process id: bench/dag's per-process profiles).
func TestDevCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev-%p.prof")
	t.Setenv("CONVERGE_DEV_CPUPROFILE", path)
	fl := devCommand().Flags().Lookup("cpuprofile")
	require.NotNil(t, fl)
	require.Equal(t, path, fl.DefValue)
	require.Contains(t, fl.Usage, "[CONVERGE_DEV_CPUPROFILE]")

}
