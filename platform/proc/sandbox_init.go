package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/converge-dev/converge/platform/proc/internal/sandboxinit"
)

// InitName is the file name of the sandbox's init binary (package
// platform/proc/cmd/converge-sandbox-init), shipped beside the server binaries.
const InitName = sandboxinit.Arg

// EnvSandboxInit names the environment variable that gives the path of the sandbox's init
// binary, when it is not beside the running binary.
const EnvSandboxInit = "CONVERGE_SANDBOX_INIT"

// selfInit is what a namespaced run executes when no init binary was found: the running binary,
// through the magic link (its init function is the sandbox's init too).
const selfInit = "/proc/self/exe"

// ErrSandboxInit wraps why the init binary a Sandbox names could not be used.
var ErrSandboxInit = errors.New("proc: sandbox init")

// initFiles are the init binaries opened so far, by path: each is opened once and kept open for
// the life of the process, and a run executes it through /proc/self/fd/<fd> (a magic link: the
// sandbox user need not be able to search the directories on its path).
var initFiles sync.Map // path → *initFile

type initFile struct {
	once sync.Once
	link string // /proc/self/fd/<fd>
	err  error
}

// besideSelf is the init beside the running binary ("" when there is none).
var besideSelf = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), InitName)
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
})

// initPath answers the path of the init binary a namespaced run of s starts, and whether it was
// asked for (Sandbox.Init or $CONVERGE_SANDBOX_INIT: a missing one is an error) rather than found
// beside the running binary ("": none, the running binary is re-executed as the init).
func (s *Sandbox) initPath() (path string, asked bool) {
	if s.Init != "" {
		return s.Init, true
	}
	if p := os.Getenv(EnvSandboxInit); p != "" {
		return p, true
	}
	return besideSelf(), false
}

// initLink answers what a namespaced run of s executes as its init: /proc/self/fd/<fd> of the
// init binary, or /proc/self/exe when there is none beside the running binary and none was asked
// for.
func (s *Sandbox) initLink() (string, error) {
	path, _ := s.initPath()
	if path == "" {
		return selfInit, nil
	}
	v, _ := initFiles.LoadOrStore(path, &initFile{})
	f := v.(*initFile)
	f.once.Do(func() { f.link, f.err = openInit(path) })
	return f.link, f.err
}

// openInit opens the init binary at path for the life of the process and answers its magic link.
func openInit(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("%w %q: not an absolute path", ErrSandboxInit, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w (build it with `make build`, or set %s to its path)", ErrSandboxInit, err, EnvSandboxInit)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSandboxInit, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o001 == 0 {
		return "", fmt.Errorf("%w %s: not a regular file every user may execute (mode %v)", ErrSandboxInit, path, fi.Mode())
	}
	fd, err := keepFD(f)
	if err != nil {
		return "", fmt.Errorf("%w %s: %w", ErrSandboxInit, path, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), nil
}

// initReport says which init namespaced runs start, for SandboxReport.Init.
func (s *Sandbox) initReport() string {
	path, _ := s.initPath()
	if path == "" {
		return "the server binary itself (no " + InitName + " beside it nor $" + EnvSandboxInit + "): every run starts it, slower than the small init"
	}
	if _, err := s.initLink(); err != nil {
		return err.Error()
	}
	return path
}
