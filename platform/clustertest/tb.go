package clustertest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
)

// TB is what the harness needs of its caller: *testing.T and *testing.B satisfy it, and [Run]
// gives one to a command. Fatalf must be called from the goroutine that runs the test (or
// [Run]'s function).
type TB interface {
	Helper()
	Cleanup(func())
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
}

// Run calls fn with a TB for a command (a benchmark's main, not a test): Logf goes to logf (nil:
// nowhere), Fatalf ends fn, and the cleanups fn registered run when it returns, last first, as
// in a test. Run answers fn's error, or the Fatalf and Errorf messages.
func Run(logf func(format string, args ...any), fn func(tb TB) error) (err error) {
	s := &script{logf: logf}
	defer func() {
		r := recover()
		s.cleanup()
		if f, ok := r.(fatal); ok {
			s.errs = append(s.errs, string(f))
		} else if r != nil {
			panic(r)
		}
		if len(s.errs) > 0 {
			msg := strings.Join(s.errs, "\n")
			if err != nil {
				msg = err.Error() + "\n" + msg
			}
			err = fmt.Errorf("%s", msg)
		}
	}()
	return fn(s)
}

type fatal string

// script is Run's TB.
type script struct {
	logf func(format string, args ...any)

	mu       sync.Mutex
	cleanups []func()
	errs     []string
}

func (s *script) Helper() {}

func (s *script) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *script) Logf(format string, args ...any) {
	if s.logf != nil {
		s.logf(format, args...)
	}
}

func (s *script) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

func (s *script) Fatalf(format string, args ...any) {
	panic(fatal(fmt.Sprintf(format, args...)))
}

func (s *script) TempDir() string {
	dir, err := os.MkdirTemp("", "converge-clustertest-")
	if err != nil {
		s.Fatalf("clustertest: %v", err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// cleanup runs the cleanups, last registered first, each once; a cleanup may register more.
func (s *script) cleanup() {
	for {
		s.mu.Lock()
		if len(s.cleanups) == 0 {
			s.mu.Unlock()
			return
		}
		f := s.cleanups[len(s.cleanups)-1]
		s.cleanups = s.cleanups[:len(s.cleanups)-1]
		s.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					if f, ok := r.(fatal); ok {
						s.Errorf("%s", string(f))
						return
					}
					buf := make([]byte, 4096)
					s.Errorf("cleanup panicked: %v\n%s", r, buf[:runtime.Stack(buf, false)])
				}
			}()
			f()
		}()
	}
}
