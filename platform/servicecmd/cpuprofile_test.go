package servicecmd

import (
	"context"
	"errors"
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

// Every service binary takes --cpuprofile from CONVERGE_SERVICE_CPUPROFILE and writes the profile
// when it stops, even when it stops on an error (bench/dag's Scheduler and Registry processes
// are profiled this way).
func TestModuleWritesItsCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc-%p.prof")
	t.Setenv("CONVERGE_SERVICE_CPUPROFILE", path)
	built := false
	m := Module{Name: "probe", Listen: "127.0.0.1:0", Build: func(context.Context, Runtime) (Built, error) {
		built = true
		return Built{}, errors.New("no store here")
	}}
	cmd := m.Command()
	fl := cmd.Flags().Lookup("cpuprofile")
	require.NotNil(t, fl)
	require.Contains(t, fl.Usage, "[CONVERGE_SERVICE_CPUPROFILE]")
	cmd.SetArgs(nil)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.ErrorContains(t, cmd.Execute(), "no store here")
	require.True(t, built)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(path), fmt.Sprintf("svc-%d.prof", os.Getpid())))
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "a pprof profile is gzipped")

	t.Setenv("CONVERGE_SERVICE_CPUPROFILE", filepath.Join(t.TempDir(), "missing", "x.prof"))
	built = false
	cmd = m.Command()
	cmd.SetArgs(nil)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	require.ErrorContains(t, cmd.Execute(), "--cpuprofile")
	require.False(t, built, "a profile that cannot be written stops the binary before it builds")
}
