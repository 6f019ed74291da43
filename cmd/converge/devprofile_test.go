package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDevCPUProfile: `converge dev --cpuprofile` (CONVERGE_DEV_CPUPROFILE) writes a pprof CPU
// profile, a %p in its path replaced by the process id (bench/dag's per-process profiles).
func TestDevCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev-%p.prof")
	t.Setenv("CONVERGE_DEV_CPUPROFILE", path)
	fl := devCommand().Flags().Lookup("cpuprofile")
	require.NotNil(t, fl)
	require.Equal(t, path, fl.DefValue)
	require.Contains(t, fl.Usage, "[CONVERGE_DEV_CPUPROFILE]")

	stop, err := startCPUProfile(path)
	require.NoError(t, err)
	stop()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(path), fmt.Sprintf("dev-%d.prof", os.Getpid())))
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a pprof profile is gzipped")

	_, err = startCPUProfile(filepath.Join(t.TempDir(), "missing", "x.prof"))
	require.ErrorContains(t, err, "--cpuprofile")
}
