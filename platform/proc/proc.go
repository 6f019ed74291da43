// Package proc runs one external process the way converge runs every command it does not trust
// to behave: a task's command, an agent CLI, a validation command, a verifier's command check.
//
// A process runs with an exact environment (see Env), in its own process group, under a
// timeout. When the timeout fires or the context ends, the whole group is killed (SIGKILL to
// -pgid), so a `sleep 60 &` the command left behind goes too; the group is also killed once the
// leader exits, so nothing it started outlives it. On Linux the leader also gets SIGKILL when the
// calling process dies; Spec.Groups records live groups (GroupDir) so that a caller killed with
// SIGKILL has what it left killed by the next one (KillRecorded). Output is kept up to a cap: the last bytes,
// where test runners and compilers put their verdict, with a count of what was dropped. A
// process that escaped the group (setsid) and still holds the output pipe does not hang Run: it
// stops reading after WaitDelay. Spec.Sandbox confines a process further (sandbox.go): its own
// user, PID and mount namespaces with a fresh /proc, another uid, no capabilities, a cgroup
// killed whole at the end; DetectSandbox answers what the host allows and what it does not.
//
//	res := proc.Run(ctx, proc.Spec{
//		Shell:     "go test ./...",
//		Dir:       worktree,
//		Env:       proc.Env(nil, nil),
//		Timeout:   2 * time.Minute,
//		OutputCap: 64 << 10,
//	})
//	switch {
//	case res.Err != nil: // did not start
//	case res.TimedOut: // killed after the timeout
//	case res.ExitCode != 0:
//	}
package proc

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults for zero fields of a Spec.
const (
	// DefaultOutputCap is how many bytes of output Run keeps when Spec.OutputCap is not set.
	DefaultOutputCap = 64 << 10
	// DefaultWaitDelay is how long Run keeps reading output (and feeding stdin) after the
	// process exited or was killed, when Spec.WaitDelay is not set.
	DefaultWaitDelay = 2 * time.Second
)

// ErrNoCommand is Result.Err of a Spec with neither Argv nor Shell.
var ErrNoCommand = errors.New("proc: nothing to run: neither argv nor shell is set")

// Spec says what to run and how.
type Spec struct {
	// Argv is the program and its arguments; the program is looked up in the PATH of the
	// calling process. When empty, Shell is run.
	Argv []string
	// Shell is a shell line, run as `sh -c Shell` when Argv is empty.
	Shell string
	// Dir is the working directory ("" = the caller's).
	Dir string
	// Env is the process's exact environment, "NAME=value" entries. Nil is an empty
	// environment, never the caller's: build one with Env.
	Env []string
	// Stdin is the process's standard input (nil = empty).
	Stdin io.Reader
	// Timeout bounds the run; 0 means only ctx bounds it.
	Timeout time.Duration
	// OutputCap is how many bytes of combined stdout and stderr Result.Output keeps: the last
	// ones (default DefaultOutputCap).
	OutputCap int64
	// Stdout, when set, receives the process's standard output instead of Result.Output.
	// Writes come from a goroutine of Run (one per stream: a writer given as both Stdout and
	// Stderr must be safe for concurrent use) and are over when Run returns.
	Stdout io.Writer
	// Stderr, when set, receives the process's standard error instead of Result.Output.
	Stderr io.Writer
	// WaitDelay is how long Run keeps reading output and writing stdin after the process
	// exited or was killed, for a process outside the group that holds the pipes
	// (default DefaultWaitDelay).
	WaitDelay time.Duration
	// Groups, when set, is told when the process group starts and once it was killed: a
	// GroupDir lets the caller kill it when it stops, and the next process kill what a caller
	// killed with SIGKILL left running.
	Groups Recorder
	// Sandbox, when set, confines the process (see Sandbox): namespaces, another uid, a cgroup.
	Sandbox *Sandbox
}

// Result is what happened to a run.
type Result struct {
	// ExitCode is the process's exit status; -1 when it was killed (timeout, cancelled context,
	// a signal) or did not start.
	ExitCode int
	// TimedOut is set when Spec.Timeout fired and the process was killed for it.
	TimedOut bool
	// Canceled is set when ctx ended before the process did and it was killed for it.
	Canceled bool
	// Status is how the process ended in the operating system's words, e.g. "exit status 3"
	// or "signal: killed"; "" when it did not start.
	Status string
	// Output is the tail of combined stdout and stderr (the streams not sent to Spec.Stdout or
	// Spec.Stderr), at most OutputCap bytes, interleaved as written. Raw bytes: it may start in
	// the middle of a UTF-8 sequence when Truncated.
	Output string
	// Truncated is set when bytes of output were dropped to respect the cap.
	Truncated bool
	// Discarded is how many bytes of output were dropped from the front of Output.
	Discarded int64
	// Duration is the time from start to exit (or to the failed start).
	Duration time.Duration
	// Err is set when the process could not start (program not found, Dir missing, ctx already
	// done, ErrNoCommand); errors.Is works with exec.ErrNotFound, fs.ErrNotExist and the
	// context's errors. A process that ran and failed has a nil Err and says so in ExitCode.
	Err error
}

// Run runs spec and waits for it, its output readers and the killing of its process group.
// It never returns before every process of the group was sent SIGKILL.
func Run(ctx context.Context, spec Spec) Result {
	argv := spec.Argv
	if len(argv) == 0 {
		if spec.Shell == "" {
			return Result{ExitCode: -1, Err: ErrNoCommand}
		}
		argv = []string{"sh", "-c", spec.Shell}
	}
	waitDelay := spec.WaitDelay
	if waitDelay <= 0 {
		waitDelay = DefaultWaitDelay
	}
	outputCap := spec.OutputCap
	if outputCap <= 0 {
		outputCap = DefaultOutputCap
	}

	runCtx := ctx
	if spec.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, spec.Timeout)
		defer cancel()
	}

	if spec.Sandbox != nil && spec.Sandbox.Namespaces && !strings.Contains(argv[0], "/") {
		// Resolved here, as without a sandbox: a missing program is Err, not an exit status.
		p, err := exec.LookPath(argv[0])
		if err != nil {
			return Result{ExitCode: -1, Err: err}
		}
		argv = append([]string{p}, argv[1:]...)
	}
	cmd := command(argv)
	if spec.Sandbox != nil {
		path, args, err := spec.Sandbox.argv(argv)
		if err != nil {
			return Result{ExitCode: -1, Err: err}
		}
		if path != "" {
			cmd.Path, cmd.Args, cmd.Err = path, args, nil
		}
	}
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Stdin = spec.Stdin
	if spec.Stdin == nil {
		// One /dev/null for every run rather than exec's opening (and polling setup) of its own.
		if null, err := devNull(); err == nil {
			cmd.Stdin = null
		}
	}
	// The process leads a group of its own, so that killing the group kills what it started.
	// On Linux it is also killed when the calling process dies (even by SIGKILL); what it
	// started is then left to Spec.Groups' records.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	var cg *runCgroup
	if spec.Sandbox != nil {
		var err error
		if cg, err = spec.Sandbox.prepare(cmd.SysProcAttr); err != nil {
			return Result{ExitCode: -1, Err: err}
		}
	}
	// Whatever is left in the run's cgroup (setsid children included) goes when Run returns; an
	// emptied cgroup goes back to the pool (cgroup.go).
	defer func() { cg.release() }()
	// Bounds the stdin copy (the output pipes are read by Run itself, see below).
	cmd.WaitDelay = waitDelay

	combined := NewTailBuffer(outputCap)
	pipes, err := connect(cmd, spec, combined)
	if err != nil {
		return Result{ExitCode: -1, Err: err}
	}

	start := time.Now()
	var ticks int64 = -1
	if spec.Groups != nil {
		ticks = bootTicks()
	}
	if err := runCtx.Err(); err != nil { // as exec.CommandContext's Start does
		pipes.abort()
		return Result{ExitCode: -1, Err: err}
	}
	if err := cmd.Start(); err != nil {
		pipes.abort()
		return Result{ExitCode: -1, Err: err, Duration: time.Since(start)}
	}
	// The end of ctx (or of the timeout) kills the group. A callback rather than
	// exec.CommandContext's goroutine per run, which waits on ctx and the exit (issue 17: a
	// goroutine started, scheduled and woken per task).
	var killed atomic.Bool
	pid := cmd.Process.Pid
	stopKill := context.AfterFunc(runCtx, func() {
		killed.Store(true)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
	pipes.started()
	if spec.Groups != nil {
		record(spec.Groups, cmd.Process.Pid, ticks)
	}

	_ = cmd.Wait() // ProcessState says how it ended
	stopKill()
	duration := time.Since(start)
	// Whatever the process left running in its group goes with it; this also closes the
	// output pipes those processes held.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cg.release()
	cg = nil
	if spec.Groups != nil {
		spec.Groups.Ended(cmd.Process.Pid)
	}
	pipes.drain(waitDelay)

	res := Result{
		ExitCode:  cmd.ProcessState.ExitCode(),
		Status:    cmd.ProcessState.String(),
		Output:    combined.String(),
		Truncated: combined.Truncated(),
		Discarded: combined.Discarded(),
		Duration:  duration,
	}
	if killed.Load() {
		res.ExitCode = -1
		if ctx.Err() != nil {
			res.Canceled = true
		} else {
			res.TimedOut = true
		}
	}
	return res
}

// command is exec.Command of argv (Run kills it when its context ends), with the shell of a
// Spec.Shell looked up in the PATH once per PATH rather than per run (exec's LookPath stats each
// PATH entry before it: a tenth of the spawn's CPU in the agent's profile, issue 17). Any other
// program is looked up per run, as exec does (one installed since is found).
func command(argv []string) *exec.Cmd {
	if argv[0] != "sh" {
		return exec.Command(argv[0], argv[1:]...)
	}
	path := os.Getenv("PATH")
	shell.mu.Lock()
	found, ok := shell.found[path]
	shell.mu.Unlock()
	if !ok {
		p, err := exec.LookPath("sh")
		if err != nil {
			return exec.Command(argv[0], argv[1:]...) // its Err says why
		}
		found = p
		shell.mu.Lock()
		shell.found[path] = p
		shell.mu.Unlock()
	}
	cmd := exec.Command(found, argv[1:]...)
	cmd.Args[0] = argv[0]
	return cmd
}

// devNull is the standard input of every run without one: /dev/null, opened once and never closed
// (exec.Cmd passes an *os.File as it is and does not close it).
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// shell caches the path of sh per value of PATH.
var shell = struct {
	mu    sync.Mutex
	found map[string]string
}{found: map[string]string{}}

// pipes are the output pipes of one run. Run reads them itself rather than letting os/exec copy
// them: exec's Wait waits for its copies, which a grandchild holding a pipe would hold up until
// the WaitDelay, while here the group is killed as soon as the leader exits and the pipes reach
// end of file at once.
type pipes struct {
	readers []*os.File
	writers []*os.File
	dests   []io.Writer
	left    atomic.Int32  // readers still reading
	done    chan struct{} // closed by the last reader to reach end of file
}

// connect gives cmd its stdout and stderr: one pipe per stream that has a writer of its own,
// one shared pipe (into combined) for the others.
func connect(cmd *exec.Cmd, spec Spec, combined io.Writer) (*pipes, error) {
	p := &pipes{}
	var shared *os.File
	open := func(dest io.Writer) (*os.File, error) {
		r, w, err := outputPipe()
		if err != nil {
			return nil, err
		}
		p.readers, p.writers, p.dests = append(p.readers, r), append(p.writers, w), append(p.dests, dest)
		return w, nil
	}
	streams := []struct {
		dest io.Writer
		set  func(*os.File)
	}{
		{spec.Stdout, func(f *os.File) { cmd.Stdout = f }},
		{spec.Stderr, func(f *os.File) { cmd.Stderr = f }},
	}
	for _, s := range streams {
		if s.dest != nil {
			w, err := open(s.dest)
			if err != nil {
				p.abort()
				return nil, err
			}
			s.set(w)
			continue
		}
		if shared == nil {
			w, err := open(combined)
			if err != nil {
				p.abort()
				return nil, err
			}
			shared = w
		}
		s.set(shared)
	}
	return p, nil
}

// started closes Run's copies of the write ends (the child has its own) and starts reading.
func (p *pipes) started() {
	for _, w := range p.writers {
		_ = w.Close()
	}
	p.done = make(chan struct{})
	p.left.Store(int32(len(p.readers)))
	if len(p.readers) == 0 {
		close(p.done)
	}
	for i, r := range p.readers {
		go func(r *os.File, dest io.Writer) {
			buf := copyBuffers.Get().(*[]byte)
			// Not io.Copy(dest, r): *os.File's WriteTo allocates (and zeroes) a 32 KiB buffer
			// per call, a tenth of Run's own CPU for a short command (issue 17).
			_, _ = io.CopyBuffer(dest, readerOnly{r}, *buf)
			copyBuffers.Put(buf)
			if p.left.Add(-1) == 0 {
				close(p.done)
			}
		}(r, p.dests[i])
	}
}

// copyBuffers are the output readers' buffers, shared by runs.
var copyBuffers = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

// readerOnly hides a reader's WriteTo from io.CopyBuffer, which then uses the buffer it is given.
type readerOnly struct{ io.Reader }

// drain waits for the readers to reach end of file, at most delay; then it closes the read ends,
// which ends the readers. (Usually they are done already: no timer is made then.)
func (p *pipes) drain(delay time.Duration) {
	select {
	case <-p.done:
	default:
		timer := time.NewTimer(delay)
		select {
		case <-p.done:
		case <-timer.C:
			for _, r := range p.readers {
				_ = r.Close()
			}
			<-p.done
		}
		timer.Stop()
	}
	for _, r := range p.readers {
		_ = r.Close()
	}
}

// abort closes every pipe of a run that did not start.
func (p *pipes) abort() {
	for _, f := range p.writers {
		_ = f.Close()
	}
	for _, f := range p.readers {
		_ = f.Close()
	}
}
