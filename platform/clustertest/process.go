package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long Stop waits after SIGTERM before SIGKILL.
const DefaultGrace = 20 * time.Second

// ProcessSpec says what StartProcess runs.
type ProcessSpec struct {
	Name string   // for logs and messages; its log file is <LogDir>/<Name>.log
	Bin  string   // the program (a path, e.g. from Binary)
	Args []string // its arguments
	Env  []string // added to this process's environment
	// LogDir holds the process's log file (stdout and stderr); "" is a temporary directory.
	LogDir string
	// Dir is the working directory ("" = ours).
	Dir string
	// CleanExit makes StartProcess's cleanup fail tb when the process, stopped at the end with
	// SIGTERM, does not exit with status 0 within the grace period.
	CleanExit bool
	// Grace is how long Stop waits after SIGTERM before SIGKILL (0: DefaultGrace).
	Grace time.Duration
}

// Process is a started binary whose output goes to a log file. A test may kill, stop, continue
// and restart it; at the end it is stopped (SIGTERM, SIGKILL after the grace period).
type Process struct {
	Name    string
	LogPath string
	spec    ProcessSpec

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current incarnation exited
	err    error         // its Wait error
	killed bool          // by Kill (its exit status is not judged)
	starts int
}

// StartProcess starts spec's binary; it is stopped when tb ends (and must exit cleanly then if
// spec.CleanExit).
func StartProcess(tb TB, spec ProcessSpec) *Process {
	tb.Helper()
	if spec.LogDir == "" {
		spec.LogDir = tb.TempDir()
	}
	p, err := startProcess(spec)
	if err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
	tb.Cleanup(func() {
		err := p.Stop()
		if spec.CleanExit && err != nil {
			tb.Errorf("clustertest: %s did not exit cleanly on SIGTERM: %v; output:\n%s", p.Name, err, p.Tail(40))
		}
	})
	return p
}

func startProcess(spec ProcessSpec) (*Process, error) {
	if spec.Name == "" {
		spec.Name = filepath.Base(spec.Bin)
	}
	if spec.Grace <= 0 {
		spec.Grace = DefaultGrace
	}
	p := &Process{Name: spec.Name, LogPath: filepath.Join(spec.LogDir, spec.Name+".log"), spec: spec}
	return p, p.start()
}

func (p *Process) start() error {
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.spec.Bin, p.spec.Args...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Dir = p.spec.Dir
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err, p.killed = cmd, done, nil, false
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.mu.Lock()
		if p.cmd == cmd {
			p.err = err
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Pid answers the process id of the current incarnation.
func (p *Process) Pid() int {
	cmd, _ := p.current()
	return cmd.Process.Pid
}

// Done is closed when the current incarnation has exited.
func (p *Process) Done() <-chan struct{} {
	_, done := p.current()
	return done
}

// Exited reports whether the current incarnation has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// ExitErr answers how the current incarnation exited (nil: status 0, or still running).
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// ExitCode answers the current incarnation's exit status: -1 while it runs, or when a signal
// ended it.
func (p *Process) ExitCode() int {
	cmd, done := p.current()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Starts answers how many times the process was started (1 + restarts).
func (p *Process) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Output answers everything the process (every incarnation) wrote so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Tail answers the last n lines of Output.
func (p *Process) Tail(n int) string { return Tail(p.Output(), n) }

// Tail answers the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Signal sends sig to the current incarnation.
func (p *Process) Signal(sig os.Signal) error {
	cmd, _ := p.current()
	return cmd.Process.Signal(sig)
}

// Kill is kill -9: SIGKILL, then it waits (up to 10 s) for the exit.
func (p *Process) Kill() {
	p.mu.Lock()
	p.killed = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// Pause stops the process (SIGSTOP) until Continue.
func (p *Process) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Continue resumes a paused process (SIGCONT).
func (p *Process) Continue() error { return p.Signal(syscall.SIGCONT) }

// Stop ends the current incarnation the polite way: SIGCONT (were it paused), SIGTERM, and
// SIGKILL when it has not exited after the grace period. It answers an error when the process
// did not exit with status 0 on SIGTERM (nil for one already exited after Kill).
func (p *Process) Stop() error {
	p.mu.Lock()
	cmd, done, killed := p.cmd, p.done, p.killed
	p.mu.Unlock()
	select {
	case <-done:
		if killed {
			return nil
		}
		return p.exitErr("had exited")
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return p.exitErr("")
	case <-time.After(p.spec.Grace):
		p.Kill()
		return fmt.Errorf("still running %s after SIGTERM: killed", p.spec.Grace)
	}
}

func (p *Process) exitErr(how string) error {
	err := p.ExitErr()
	if err == nil {
		return nil
	}
	if how != "" {
		return fmt.Errorf("%s: %w", how, err)
	}
	return err
}

// Restart stops the current incarnation (Stop) unless it has exited, and starts the process
// again with the same arguments and environment; its log goes on in the same file.
func (p *Process) Restart(tb TB) {
	tb.Helper()
	if !p.Exited() {
		_ = p.Stop()
	}
	if err := p.start(); err != nil {
		tb.Fatalf("clustertest: restart: %v", err)
	}
}
