package servicecmd

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// StartCPUProfile writes a pprof CPU profile, a %p in its path replaced by the process id; a path
// it cannot create is an error naming the flag.
func TestStartCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev-%p.prof")
	stop, err := StartCPUProfile(path)
	require.NoError(t, err)
	stop()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(path), fmt.Sprintf("dev-%d.prof", os.Getpid())))
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a pprof profile is gzipped")

	_, err = StartCPUProfile(filepath.Join(t.TempDir(), "missing", "x.prof"))
	require.ErrorContains(t, err, "--cpuprofile")
}
