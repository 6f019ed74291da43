package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
)

// EnvBinDir names the environment variable that points at a directory of prebuilt binaries
// (converge and converge-<service>); when it is set nothing is built.
const EnvBinDir = "CONVERGE_TEST_BIN"

// Services are the converge-<service> binaries, in the order a cluster starts them.
var Services = []string{"registry", "knowledge", "verifier", "scheduler", "agent"}

// packages maps each binary to its main package, relative to the repository root.
var packages = map[string]string{
	"converge":           "./cmd/converge",
	"converge-registry":  "./services/registry/cmd/converge-registry",
	"converge-knowledge": "./services/knowledge/cmd/converge-knowledge",
	"converge-verifier":  "./services/verifier/cmd/converge-verifier",
	"converge-scheduler": "./services/scheduler/cmd/converge-scheduler",
	"converge-agent":     "./services/agent/cmd/converge-agent",
	// Not started by the tests: beside the services, it is the init of their sandboxed processes.
	"converge-sandbox-init": "./platform/proc/cmd/converge-sandbox-init",
}

var builds struct {
	mu    sync.Mutex
	dir   string          // the temporary directory built binaries go to
	built map[string]bool // binary → built into dir
}

// Binary answers the path of a binary, "converge" or "converge-<service>": from $CONVERGE_TEST_BIN,
// or built once per process (with every binary not built yet, in one go build) from this
// repository.
func Binary(tb TB, name string) string {
	tb.Helper()
	if _, ok := packages[name]; !ok {
		tb.Fatalf("clustertest: no binary %q (converge or converge-<service>)", name)
	}
	dir, err := BinDir()
	if err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
	return filepath.Join(dir, name)
}

// BinDir answers the directory holding every binary: $CONVERGE_TEST_BIN, or the temporary
// directory they are built into (at the first call, all of them at once).
func BinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		return d, nil
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "converge-bin-")
		if err != nil {
			return "", err
		}
		builds.dir, builds.built = dir, map[string]bool{}
	}
	var missing []string
	for name := range packages {
		if !builds.built[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return builds.dir, nil
	}
	slices.Sort(missing)
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	args := []string{"build", "-o", builds.dir + string(filepath.Separator)}
	for _, name := range missing {
		args = append(args, packages[name])
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %v in %s: %v\n%s", args, root, err, out)
	}
	for _, name := range missing {
		builds.built[name] = true
	}
	return builds.dir, nil
}

// RemoveBinaries removes the binaries built by this process (not those of $CONVERGE_TEST_BIN).
// Call it from TestMain after m.Run, or at the end of a command.
func RemoveBinaries() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir, builds.built = "", nil
	}
}

// RepoRoot answers the repository's root: the directory holding go.work, looked for from the
// working directory up, then from this package's source.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if fileExists(filepath.Join(d, "go.work")) && fileExists(filepath.Join(d, "services")) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("clustertest: no go.work above %v: run from the converge repository or set %s", starts, EnvBinDir)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
