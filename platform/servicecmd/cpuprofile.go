package servicecmd

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// StartCPUProfile writes a CPU profile (pprof) of the process to path until the returned function
// is called: a binary's --cpuprofile flag. A %p in path is replaced by the process id, so that
// several processes started with one setting (bench/dag's agents) write files of their own.
func StartCPUProfile(path string) (stop func(), err error) {
	path = strings.ReplaceAll(path, "%p", strconv.Itoa(os.Getpid()))
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = out.Close()
	}, nil
}
