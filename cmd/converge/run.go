package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/converge-dev/converge/gen/converge/common/v1"
	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/gitexec"
	"github.com/converge-dev/converge/platform/grpcerr"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/scheduler/tasklist"
	"github.com/converge-dev/converge/services/verifier/criteria"
)

// runOptions configure `converge run`.
type runOptions struct {
	client clientFlags
	// TasksFile is the task list document.
	TasksFile string
	// Format overrides the format the file's extension says.
	Format string
	// Repo overrides the list's repository: a local git repository, or a clone URL the services
	// reach (https, ssh, git, file, or scp-like) for a deployment that does not share this disk.
	Repo string
	// repoDir is the local repository the run builds in, once resolved: the in-process agents'
	// only allowed root.
	repoDir string
	// Criteria is a done-criteria.md that overrides the list's.
	Criteria string
	// Agents is the number of local agents of the in-process suite.
	Agents int
	// MaxParallel caps the tasks per wave (0 = the Scheduler's default, 4).
	MaxParallel int
	// Dispatch is "strict" (every wave a barrier), "eager" (a later wave's task starts once
	// what it depends on completed without a commit or is integrated, and nothing running
	// overlaps its files) or "" (the
	// Scheduler's default, eager).
	Dispatch string
	// DataDir keeps the in-process suite's data; empty = in memory.
	DataDir string
	// InMemory is the default without --data-dir; the flag exists to say it.
	InMemory bool
	// JSON prints the summary as JSON on stdout (progress goes to stderr).
	JSON bool
	// Heartbeat is how often the execution's agents heartbeat and extend their lease (a lease is
	// three heartbeats); 0 = the agents' default, 30 s.
	Heartbeat time.Duration
	// MaxRetries is the retries of a failed task (it runs at most MaxRetries+1 times); nil = the
	// Scheduler's default, 3.
	MaxRetries *int
	// MaxFailedTasks is the stop rule's limit: more failed tasks end the run FAILED; nil = the
	// Scheduler's default, 3.
	MaxFailedTasks *int
	// CriticalPhases are the phases a failed task of ends the run FAILED; nil = the Scheduler's
	// default (database).
	CriticalPhases []string
	// AllowUndeclaredFiles lets a task's try change files outside its declared ones (they are
	// reported and discarded) instead of failing it SCOPE_GUARD.
	AllowUndeclaredFiles bool
	// NoWriteBack leaves a tasks.md alone (default: its Status lines and tracking table follow
	// the run).
	NoWriteBack bool
	// Resume continues this execution (paused: resumed; failed or cancelled: a RETRY run of its
	// list) instead of importing the file.
	Resume string
	// envErr is a CONVERGE_* variable of these flags that does not parse.
	envErr error
}

// Bounds of --heartbeat and --max-retries (those of AgentConfig and ExecutionOptions).
const (
	minHeartbeat  = 100 * time.Millisecond
	maxHeartbeat  = 10 * time.Minute
	maxMaxRetries = 20
)

func runCommand() *cobra.Command {
	var o runOptions
	var retries, maxFailed int // --max-retries, --max-failed-tasks; -1 = not given
	cmd := &cobra.Command{
		Use:   "run <tasks.md|execution-plan.md|tasks.yaml|tasks.json> | run --resume <execution> [tasks.md]",
		Short: "Build a task list with local agents (or on --server) and exit 0 only when Verify Done answers CONVERGED",
		Long: "converge run imports a task list, starts an execution and shows its progress until Verify Done " +
			"answers. Without --server it starts the whole suite in this process on the embedded store (in " +
			"memory unless --data-dir) with --agents local agents; with --server it submits to that deployment " +
			"and watches. The format comes from the file's extension (.md: tasks.md, .yaml/.yml, .json) or " +
			"--format (tasks-md, plan for a 07-build execution plan, json, yaml). --repo names the git repository to build in (overriding the list's), --criteria the " +
			"done-criteria.md Verify Done checks (overriding the list's). A repository with uncommitted " +
			"changes is built from its last commit, without them: run warns and lists them.\n\n" +
			"--heartbeat sets how often the execution's agents heartbeat and extend their lease (a lease " +
			"is three heartbeats; default 30 s): an agent that dies holding a task loses it after at most " +
			"a lease, or sooner when the Registry reports it stale. --max-retries sets how often a failed " +
			"task is retried (it runs at most max-retries + 1 times; default 3).\n\n" +
			"A tasks.md is kept current as the run goes (seed pb-build): each task's **Status:** line becomes " +
			"🟡 IN PROGRESS, then 🟢 DONE (its steps checked), ⏭️ SKIPPED, ❌ FAILED, 🔵 BLOCKED or 🛑 DCR, by " +
			"precise edits of that task's block, and an \"## Execution Tracking\" table is appended (or updated) " +
			"when the run ends; every other byte stays. Run the file again to continue: DONE tasks are not run " +
			"again, SKIPPED and BLOCKED ones not at all. --no-write-back leaves the file alone.\n\n" +
			"--resume EXECUTION continues an execution instead of starting one: a paused one is resumed, a " +
			"failed or cancelled one is run again as a RETRY of its list (its completed tasks are not run " +
			"again). It needs the execution's store: --server, or the --data-dir it ran with.\n\n" +
			"Exit status: 0 when the execution CONVERGED, 1 when it did not (or an error), 2 for a usage " +
			"error (nothing started), 130 when interrupted (the execution is cancelled first).",
		Example: "  converge run examples/greeter/tasks.md --repo /tmp/greeter --criteria examples/greeter/done-criteria.md\n" +
			"  converge run tasks.md --heartbeat 5s --max-retries 1\n" +
			"  converge run docs/execution-plan.md --format plan\n" +
			"  converge run --resume ex_01J... --server 127.0.0.1:7070\n" +
			"  converge run tasks.yaml --server scheduler.internal:7070 --token \"$CONVERGE_TOKEN\"",
		Args: func(cmd *cobra.Command, args []string) error {
			if o.Resume != "" {
				return maxArgs(1, "one task list file (with --resume, optional: the tasks.md to write back to)")(cmd, args)
			}
			return exactArgs(1, "one task list file")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				o.TasksFile = args[0]
			}
			fs := cmd.Flags()
			if retries != -1 {
				o.MaxRetries = &retries
			}
			if maxFailed != -1 {
				o.MaxFailedTasks = &maxFailed
			}
			if !fs.Changed("critical-phase") {
				o.CriticalPhases = nil
			}
			return runRun(cmd.Context(), o, runEnv{
				stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(), live: isTerminalWriter(cmd.OutOrStdout()) && !o.JSON,
				rerun: rerunCommand(os.Args), agentsSet: fs.Changed("agents"), dataDirSet: fs.Changed("data-dir"),
				inMemorySet: fs.Changed("in-memory"),
			})
		},
	}
	o.client.bind(cmd, "", "submit to the converge deployment at this address instead of starting one in-process")
	fs := cmd.Flags()
	fs.StringVar(&o.Repo, "repo", "", "git repository to build in (overrides the list's repository): a local directory, or a clone URL (https://, ssh://, git://, file://, git@host:path) the agents and the Scheduler reach")
	fs.StringVar(&o.Criteria, "criteria", "", "done-criteria.md that Verify Done checks (overrides the list's)")
	fs.IntVar(&o.Agents, "agents", 3, "local agents of the in-process suite (not with --server)")
	fs.IntVar(&o.MaxParallel, "max-parallel", 0, "most tasks per wave, and so at once (0 = the Scheduler's default, 4)")
	fs.StringVar(&o.Dispatch, "dispatch", os.Getenv("CONVERGE_DISPATCH"), "when a later wave's task may start: eager (once the tasks it depends on completed without a commit or are integrated, and nothing running touches its files) or strict (once its whole wave opens); default: the Scheduler's, eager [CONVERGE_DISPATCH]")
	fs.StringVar(&o.DataDir, "data-dir", "", "keep the in-process suite's databases here (default: in memory)")
	fs.BoolVar(&o.InMemory, "in-memory", false, "keep nothing (the default without --data-dir)")
	fs.BoolVar(&o.JSON, "json", false, "print the summary as JSON on stdout; progress goes to stderr")
	fs.StringVar(&o.Format, "format", "", "task list format: tasks-md, plan (execution plan), json or yaml (default: from the extension)")
	fs.IntVar(&maxFailed, "max-failed-tasks", -1, "stop rule: more failed tasks than this end the run FAILED, 0 to 10000; -1 = the Scheduler's default, 3")
	fs.StringSliceVar(&o.CriticalPhases, "critical-phase", nil, "stop rule: a failed task of this phase ends the run FAILED at once (repeat or comma-separate; default: database)")
	fs.BoolVar(&o.AllowUndeclaredFiles, "allow-undeclared-files", false, "a task may change files outside its declared ones: they are reported and discarded (default: the try fails SCOPE_GUARD)")
	fs.BoolVar(&o.NoWriteBack, "no-write-back", false, "leave a tasks.md alone (default: its Status lines and tracking table follow the run)")
	fs.StringVar(&o.Resume, "resume", "", "continue this execution (paused: resume; failed or cancelled: a RETRY run of its list) instead of starting one")
	heartbeat, herr := envDuration("CONVERGE_HEARTBEAT")
	envRetries, rerr := envInt("CONVERGE_MAX_RETRIES", -1)
	o.envErr = errors.Join(herr, rerr)
	fs.DurationVar(&o.Heartbeat, "heartbeat", heartbeat, "how often the execution's agents heartbeat and extend their lease (a lease is three), 100ms to 10m; 0 = the agents' default, 30s [CONVERGE_HEARTBEAT]")
	fs.IntVar(&retries, "max-retries", envRetries, "retries of a failed task: it runs at most N+1 times, 0 to 20; -1 = the Scheduler's default, 3 [CONVERGE_MAX_RETRIES]")
	return cmd
}

// runEnv is what runRun needs of its surroundings (tests set it).
type runEnv struct {
	stdout, stderr io.Writer
	// live draws the terminal's live block.
	live bool
	// rerun is the command line that runs it again (for the next steps).
	rerun string
	// which flags were given.
	agentsSet, dataDirSet, inMemorySet bool
	// signals, when set, replaces SIGINT/SIGTERM (tests).
	signals context.Context
	// suiteReady, when set, is told the in-process suite's address once it serves (tests).
	suiteReady func(addr string)
}

// runRun is `converge run`.
func runRun(parent context.Context, o runOptions, env runEnv) error {
	// Usage first: nothing starts on a bad command line.
	inProcess := o.client.Server == ""
	switch {
	case !inProcess && (env.agentsSet || env.dataDirSet || env.inMemorySet):
		return usagef("--agents, --data-dir and --in-memory configure the in-process suite: not with --server (the deployment's agents run the list)")
	case o.DataDir != "" && o.InMemory:
		return usagef("--data-dir and --in-memory: give one")
	case inProcess && o.Agents < 1:
		return usagef("--agents %d: the in-process suite needs at least one agent to run anything", o.Agents)
	case o.Agents > 64:
		return usagef("--agents %d: at most 64 local agents", o.Agents)
	case o.MaxParallel < 0 || o.MaxParallel > 1024:
		return usagef("--max-parallel %d: want 0 (the default) to 1024", o.MaxParallel)
	case o.Dispatch != "" && o.Dispatch != "strict" && o.Dispatch != "eager":
		return usagef("--dispatch %q: want strict or eager", o.Dispatch)
	case o.envErr != nil:
		return usageError{o.envErr}
	case o.Heartbeat != 0 && (o.Heartbeat < minHeartbeat || o.Heartbeat > maxHeartbeat):
		return usagef("--heartbeat %s: want 0 (the agents' default, 30s) or %s to %s", o.Heartbeat, minHeartbeat, maxHeartbeat)
	case o.MaxRetries != nil && (*o.MaxRetries < 0 || *o.MaxRetries > maxMaxRetries):
		return usagef("--max-retries %d: want 0 to %d (or -1, the Scheduler's default, 3)", *o.MaxRetries, maxMaxRetries)
	case o.MaxFailedTasks != nil && (*o.MaxFailedTasks < 0 || *o.MaxFailedTasks > 10000):
		return usagef("--max-failed-tasks %d: want 0 to 10000 (or -1, the Scheduler's default, 3)", *o.MaxFailedTasks)
	}
	if o.Resume != "" {
		return runResume(parent, o, env)
	}
	format, err := importFormat(o.TasksFile, o.Format)
	if err != nil {
		return err
	}
	content, err := os.ReadFile(o.TasksFile)
	if err != nil {
		return usageError{err}
	}
	doc, err := tasklist.Parse(format, content)
	if err != nil {
		var perr *tasklist.ParseError
		if errors.As(err, &perr) {
			return usagef("%s:%d: %s", o.TasksFile, perr.Line, perr.Msg)
		}
		return usagef("%s: %v", o.TasksFile, err)
	}
	base := &schedulerv1.TaskListSpec{}
	if doc.Spec.GetName() == "" {
		base.Name = strings.TrimSuffix(filepath.Base(o.TasksFile), filepath.Ext(o.TasksFile))
	}
	if o.Criteria != "" {
		md, err := os.ReadFile(o.Criteria)
		if err != nil {
			return usageError{fmt.Errorf("--criteria: %w", err)}
		}
		if _, err := criteria.Parse(string(md)); err != nil {
			var cerr *criteria.Error
			if errors.As(err, &cerr) {
				lines := make([]string, len(cerr.Problems))
				for i, p := range cerr.Problems {
					lines[i] = fmt.Sprintf("%s:%d: %s", o.Criteria, p.Line, p.Message)
				}
				return usagef("--criteria does not parse:\n%s", strings.Join(lines, "\n"))
			}
			return usagef("--criteria %s: %v", o.Criteria, err)
		}
		base.DoneCriteria = string(md)
	}
	// The repository: --repo, else the list's. A local one must be a git repository of its own.
	switch {
	case cloneURL.MatchString(o.Repo):
		base.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Url{Url: o.Repo}, BaseRef: doc.Spec.GetRepository().GetBaseRef()}
	case o.Repo != "":
		dir, err := checkGitRepo(o.Repo)
		if err != nil {
			return err
		}
		base.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}, BaseRef: doc.Spec.GetRepository().GetBaseRef()}
	case doc.Spec.GetRepository().GetPath() != "" && inProcess:
		p := doc.Spec.GetRepository().GetPath()
		if !filepath.IsAbs(p) { // relative to the task list file
			p = filepath.Join(filepath.Dir(o.TasksFile), p)
		}
		dir, err := checkGitRepo(p)
		if err != nil {
			return err
		}
		base.Repository = &schedulerv1.Repository{Source: &schedulerv1.Repository_Path{Path: dir}, BaseRef: doc.Spec.GetRepository().GetBaseRef()}
	}

	// A local repository is built from a commit: say what that leaves out.
	if dir := base.GetRepository().GetPath(); dir != "" {
		warnUncommitted(env.stderr, dir, base.GetRepository().GetBaseRef())
	}

	o.repoDir = base.GetRepository().GetPath()
	writeBackTo := ""
	if format == schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD && !o.NoWriteBack {
		writeBackTo = o.TasksFile
	}
	return runAndFollow(parent, o, env, writeBackTo, func(ctx context.Context, conn *grpc.ClientConn, client schedulerv1.SchedulerServiceClient) (string, error) {
		imported, err := client.ImportTaskList(ctx, &schedulerv1.ImportTaskListRequest{Format: format, Content: content, Base: base})
		if err != nil {
			if status.Code(err) == codes.InvalidArgument {
				var lines []string
				for _, v := range grpcerr.Violations(err) {
					lines = append(lines, fmt.Sprintf("%s: %s", o.TasksFile, v.Description))
				}
				if len(lines) > 0 {
					return "", usagef("the task list is refused:\n%s", strings.Join(lines, "\n"))
				}
			}
			return "", rpcError("import "+o.TasksFile, err)
		}
		for _, w := range imported.GetWarnings() {
			fmt.Fprintf(env.stderr, "%s:%d: warning: %s\n", o.TasksFile, w.GetLine(), w.GetMessage())
		}
		if o.client.Server != "" {
			warnWithoutAgents(ctx, conn, env.stderr, o.client.Server)
		}
		startRes, err := client.StartExecution(ctx, &schedulerv1.StartExecutionRequest{
			TaskListId: imported.GetTaskList().GetId(), Options: executionOptions(o), TriggeredBy: schedulerv1.ExecutionTrigger_EXECUTION_TRIGGER_USER,
			RequestId: "run-" + randomHex(8),
		})
		if err != nil {
			return "", rpcError("start the execution", err)
		}
		return startRes.GetExecution().GetId(), nil
	})
}

// executionOptions are the options `converge run` starts its execution with.
func executionOptions(o runOptions) *schedulerv1.ExecutionOptions {
	opts := &schedulerv1.ExecutionOptions{MaxParallel: int32(o.MaxParallel), AllowUndeclaredFiles: o.AllowUndeclaredFiles,
		Dispatch: dispatchMode(o.Dispatch)}
	if o.Heartbeat > 0 {
		opts.AgentConfig = &commonv1.AgentConfig{HeartbeatInterval: durationpb.New(o.Heartbeat)}
	}
	if o.MaxRetries != nil {
		opts.MaxRetries = proto.Int32(int32(*o.MaxRetries))
	}
	if o.MaxFailedTasks != nil {
		opts.MaxFailedTasks = proto.Int32(int32(*o.MaxFailedTasks))
	}
	if o.CriticalPhases != nil {
		opts.CriticalPhases = &schedulerv1.CriticalPhases{Phases: o.CriticalPhases}
	}
	return opts
}

// maxUncommittedListed is how many uncommitted paths the warning of `converge run` lists.
const maxUncommittedListed = 20

// warnUncommitted warns on w when the repository at dir has uncommitted changes (tracked or
// untracked files): the run builds from a commit (ref, or HEAD), without them. It lists the first
// paths as git status --porcelain shows them.
func warnUncommitted(w io.Writer, dir, ref string) {
	out, err := gitexec.Git(context.Background(), dir, "status", "--porcelain=v1", "--untracked-files=all")
	if err != nil {
		fmt.Fprintf(w, "warning: cannot tell whether %s has uncommitted changes (git status: %v)\n", dir, err)
		return
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return
	}
	if ref == "" {
		ref = "HEAD"
	}
	commit := ref
	if sha, err := git(dir, "rev-parse", "--short=12", "--verify", "--quiet", ref+"^{commit}"); err == nil && sha != "" {
		commit = fmt.Sprintf("%s, %s", ref, sha)
	}
	fmt.Fprintf(w, "warning: %s has %s: the run builds from its last commit (%s) without them; commit them first to build them:\n",
		dir, plural(len(lines), "uncommitted change"), commit)
	for i, l := range lines {
		if i == maxUncommittedListed {
			fmt.Fprintf(w, "  … and %d more (git -C %s status)\n", len(lines)-maxUncommittedListed, shellQuote(dir))
			break
		}
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// envDuration reads a duration from the environment variable name (0 when unset).
func envDuration(name string) (time.Duration, error) {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a duration (like 5s or 1m)", name, v)
	}
	return d, nil
}

// envInt reads an integer from the environment variable name (def when unset).
func envInt(name string, def int) (int, error) {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q: not an integer", name, v)
	}
	return n, nil
}

// gatherSummary reads an execution's summary.
func gatherSummary(ctx context.Context, client schedulerv1.SchedulerServiceClient, id string, elapsed time.Duration, f followUp) (*runSummary, error) {
	got, err := client.GetExecution(ctx, &schedulerv1.GetExecutionRequest{ExecutionId: id})
	if err != nil {
		return nil, rpcError("execution "+id, err)
	}
	list, err := client.GetTaskList(ctx, &schedulerv1.GetTaskListRequest{TaskListId: got.GetExecution().GetTaskListId(), View: schedulerv1.TaskListView_TASK_LIST_VIEW_FULL})
	if err != nil {
		return nil, rpcError("task list", err)
	}
	as, err := allAssignments(ctx, client, id)
	if err != nil {
		return nil, err
	}
	return newSummary(got.GetExecution(), got.GetWaves(), list.GetTaskList(), as, elapsed, f), nil
}

// suite is the in-process suite of `converge run`.
type suite struct {
	conn    *grpc.ClientConn
	cancel  context.CancelFunc
	done    chan error
	logFile *os.File
	logPath string
	keepLog bool
}

// startSuite starts all five services and o.Agents agents in this process on a loopback port and
// waits until they serve. Their log goes to a file (kept when the run does not converge).
func startSuite(sigCtx context.Context, o runOptions, env runEnv) (*suite, error) {
	s := &suite{done: make(chan error, 1)}
	var err error
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("--data-dir: %w", err)
		}
		s.logPath = filepath.Join(o.DataDir, "converge-run.log")
		s.logFile, err = os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		s.keepLog = true
	} else {
		s.logFile, err = os.CreateTemp("", "converge-run-*.log")
		if err == nil {
			s.logPath = s.logFile.Name()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("suite log: %w", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.closeLog()
		return nil, err
	}
	dopts := devOptions{
		DataDir: o.DataDir, InMemory: o.DataDir == "", Agents: o.Agents,
		AgentDrainTimeout: 2 * time.Second, DrainDelay: time.Millisecond,
		// The local agents build in the run's repository and nowhere else.
		AgentAllowedRoots: []string{},
	}
	if dir := o.repoDir; dir != "" {
		dopts.AgentAllowedRoots = []string{dir}
	}
	dopts.LogFormat, dopts.LogLevel = "text", "info"
	// The suite listens on loopback, where any local user could call it: it takes a token of
	// its own, which only this process knows.
	dopts.DevToken = auth.NewToken()
	dopts.Flags.Listen = lis.Addr().String()
	ready := make(chan string, 1)
	dopts.Ready = func(addr string) { ready <- addr }
	// The suite outlives the signal context: after Ctrl-C it still has to cancel the execution.
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- runDev(ctx, dopts, lis, s.logFile) }()

	t := time.NewTimer(2 * time.Minute)
	defer t.Stop()
	select {
	case addr := <-ready:
		if s.conn, err = dialSelf(servicecmd.Flags{AuthTokens: []string{dopts.DevToken}}, addr); err != nil {
			s.keepLog = true
			s.stop()
			return nil, err
		}
		if env.suiteReady != nil {
			env.suiteReady(addr)
		}
		return s, nil
	case err := <-s.done:
		if err == nil {
			err = errors.New("it stopped before serving")
		}
		s.done <- err
		s.keepLog = true
		s.stop()
		return nil, fmt.Errorf("the in-process suite did not start: %w (log: %s)", err, s.logPath)
	case <-sigCtx.Done():
		s.stop()
		return nil, exitError{code: exitInterrupted, err: errors.New("interrupted while the suite started")}
	case <-t.C:
		s.keepLog = true
		s.stop()
		return nil, fmt.Errorf("the in-process suite did not serve within 2 minutes (log: %s)", s.logPath)
	}
}

// stop drains the agents and stops the services.
func (s *suite) stop() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.cancel()
	_ = <-s.done // stopping: the suite's own error was reported when it happened
	s.closeLog()
}

func (s *suite) closeLog() {
	if s.logFile == nil {
		return
	}
	_ = s.logFile.Close()
	if !s.keepLog {
		_ = os.Remove(s.logPath)
	}
}

// warnWithoutAgents warns when the deployment has no live agent: the run would wait forever.
func warnWithoutAgents(ctx context.Context, conn grpc.ClientConnInterface, w io.Writer, server string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := registryv1.NewRegistryServiceClient(conn).ListAgents(cctx, &registryv1.ListAgentsRequest{PageSize: 100})
	if err != nil {
		return // a Scheduler without a Registry next to it: nothing to say
	}
	stale, err := registryv1.NewRegistryServiceClient(conn).ListStaleAgents(cctx, &registryv1.ListStaleAgentsRequest{})
	if err == nil && len(res.GetAgents()) > len(stale.GetAgents()) {
		return
	}
	if err != nil && len(res.GetAgents()) > 0 {
		return
	}
	fmt.Fprintf(w, "warning: no live agent is registered at %s: the run waits until one claims work "+
		"(start some with `converge dev --agents 3` or converge-agent)\n", server)
}

// importFormat is the task list format: --format, else the file's extension.
func importFormat(path, flag string) (schedulerv1.ImportFormat, error) {
	switch strings.ToLower(flag) {
	case "":
	case "tasks-md", "tasks.md", "md":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, nil
	case "plan", "execution-plan":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_EXECUTION_PLAN, nil
	case "json":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, nil
	case "yaml", "yml":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, nil
	default:
		return 0, usagef("--format %q: want tasks-md, plan, json or yaml", flag)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".md", ".markdown":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_TASKS_MD, nil
	case ".yaml", ".yml":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_YAML, nil
	case ".json":
		return schedulerv1.ImportFormat_IMPORT_FORMAT_JSON, nil
	}
	return 0, usagef("%s: cannot tell the format from the extension (.md, .yaml, .yml, .json): give --format", path)
}

// cloneURL is what --repo takes as a URL rather than a directory: the Scheduler's Repository.url
// forms.
var cloneURL = regexp.MustCompile(`^((https?|ssh|git|file)://\S+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:\S+)$`)

// checkGitRepo answers dir's absolute path when it is the top of a git repository with at least
// one commit, and says how to make it one otherwise.
func checkGitRepo(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", usageError{err}
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", usagef("repository %s: no such directory", dir)
	}
	if _, err := exec.LookPath("git"); err != nil {
		return "", errors.New("git is not installed: converge works on repositories with the git CLI")
	}
	makeRepo := fmt.Sprintf("git -C %[1]s init && git -C %[1]s add -A && git -C %[1]s commit -m 'initial commit'", shellQuote(abs))
	top, err := git(abs, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", usagef("repository %s is not a git repository: converge commits each task to a branch of one. Make it one first:\n  %s", dir, makeRepo)
	}
	realAbs, _ := filepath.EvalSymlinks(abs)
	realTop, _ := filepath.EvalSymlinks(top)
	if realAbs != realTop {
		return "", usagef("repository %s is not a git repository of its own: it is a directory inside %s. "+
			"Give the repository's top (--repo %s), or copy the directory out and make it a repository:\n  %s", dir, top, shellQuote(top), makeRepo)
	}
	if _, err := git(abs, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"); err != nil {
		return "", usagef("repository %s has no commit yet: the first wave starts from one. Commit its files first:\n  git -C %[2]s add -A && git -C %[2]s commit -m 'initial commit'", dir, shellQuote(abs))
	}
	return abs, nil
}

// git runs git in dir and answers its trimmed output.
func git(dir string, args ...string) (string, error) {
	out, err := gitexec.Git(context.Background(), dir, args...)
	return strings.TrimSpace(out), err
}

// rerunCommand is the command line as typed, for "run it again".
func rerunCommand(args []string) string {
	if len(args) == 0 {
		return "converge run ..."
	}
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	q[0] = "converge"
	return strings.Join(q, " ")
}

// isTerminalWriter says whether w is an interactive terminal.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// dispatchMode is the DispatchMode of --dispatch ("" = unset: the Scheduler's default).
func dispatchMode(flag string) schedulerv1.DispatchMode {
	switch flag {
	case "strict":
		return schedulerv1.DispatchMode_DISPATCH_MODE_STRICT_WAVES
	case "eager":
		return schedulerv1.DispatchMode_DISPATCH_MODE_EAGER
	}
	return schedulerv1.DispatchMode_DISPATCH_MODE_UNSPECIFIED
}
