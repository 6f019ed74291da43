package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	agentv1 "github.com/converge-dev/converge/gen/converge/agent/v1"
	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/clustertest"
)

// The example of examples/greeter, from this package's directory.
const (
	greeterTasks    = "../../examples/greeter/tasks.md"
	greeterCriteria = "../../examples/greeter/done-criteria.md"
	greeterRepo     = "../../examples/greeter/repo"
)

// cli runs the converge command line in-process and answers its exit code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := rootCommand()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := execute(root, &errOut)
	return code, out.String(), errOut.String()
}

// greeterCopy copies the example's starting point to a new git repository, as run.sh does.
func greeterCopy(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "greeter")
	require.NoError(t, os.CopyFS(dir, os.DirFS(greeterRepo)))
	gitIn(t, dir, "init", "-q")
	gitIn(t, dir, "add", "-A")
	gitIn(t, dir, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "greeter: the starting point")
	return dir
}

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// Every mistake on the command line is exit 2 with a message that says what is wrong, and starts
// nothing.
func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(tmp, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	badTasks := write("bad.md", "# Tasks: bad\n\n### Task 1.1: ok\n**Timeout:** soon\n")
	badCriteria := write("bad-criteria.md", "## F1: builds\nTag: SOMETIMES\n")
	noTasks := write("tasks.txt", "")
	notGit := filepath.Join(tmp, "plain")
	require.NoError(t, os.MkdirAll(notGit, 0o755))
	repo := greeterCopy(t)
	inside := filepath.Join(repo, "greet")
	require.NoError(t, os.MkdirAll(inside, 0o755))
	empty := filepath.Join(tmp, "empty")
	require.NoError(t, os.MkdirAll(empty, 0o755))
	gitIn(t, empty, "init", "-q")

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no file", []string{"run"}, []string{"want one task list file, got 0 arguments"}},
		{"two files", []string{"run", greeterTasks, greeterTasks}, []string{"got 2 arguments"}},
		{"unknown flag", []string{"run", greeterTasks, "--bogus"}, []string{"unknown flag: --bogus"}},
		{"bad number", []string{"run", greeterTasks, "--agents", "many"}, []string{`invalid argument "many"`}},
		{"unknown extension", []string{"run", noTasks}, []string{"cannot tell the format from the extension", "--format"}},
		{"bad format", []string{"run", greeterTasks, "--format", "xml"}, []string{`--format "xml": want tasks-md, plan, json or yaml`}},
		{"missing file", []string{"run", filepath.Join(tmp, "missing.md")}, []string{"missing.md: no such file or directory"}},
		{"no agents", []string{"run", greeterTasks, "--agents", "0"}, []string{"--agents 0: the in-process suite needs at least one agent"}},
		{"agents with server", []string{"run", greeterTasks, "--server", "127.0.0.1:1", "--agents", "2"}, []string{"not with --server"}},
		{"data dir and in-memory", []string{"run", greeterTasks, "--data-dir", tmp, "--in-memory"}, []string{"--data-dir and --in-memory: give one"}},
		{"max parallel", []string{"run", greeterTasks, "--max-parallel", "-1"}, []string{"--max-parallel -1"}},
		{"dispatch", []string{"run", greeterTasks, "--dispatch", "fast"}, []string{`--dispatch "fast": want strict or eager`}},
		{"heartbeat too short", []string{"run", greeterTasks, "--heartbeat", "50ms"}, []string{"--heartbeat 50ms: want 0 (the agents' default, 30s) or 100ms to 10m0s"}},
		{"heartbeat too long", []string{"run", greeterTasks, "--heartbeat", "1h"}, []string{"--heartbeat 1h0m0s"}},
		{"max retries", []string{"run", greeterTasks, "--max-retries", "21"}, []string{"--max-retries 21: want 0 to 20"}},
		{"max retries negative", []string{"run", greeterTasks, "--max-retries", "-2"}, []string{"--max-retries -2"}},
		{"task list does not parse", []string{"run", badTasks}, []string{"bad.md:4: task 1.1: timeout"}},
		{"criteria do not parse", []string{"run", greeterTasks, "--criteria", badCriteria}, []string{"--criteria does not parse", "bad-criteria.md:2:"}},
		{"repo not git", []string{"run", greeterTasks, "--repo", notGit}, []string{"is not a git repository", "git -C " + notGit + " init && git -C " + notGit + " add -A && git -C " + notGit + " commit"}},
		{"repo inside another", []string{"run", greeterTasks, "--repo", inside}, []string{"is not a git repository of its own: it is a directory inside " + repo}},
		{"repo without commit", []string{"run", greeterTasks, "--repo", empty}, []string{"has no commit yet", "commit -m 'initial commit'"}},
		{"repo missing", []string{"run", greeterTasks, "--repo", filepath.Join(tmp, "nope")}, []string{"no such directory"}},
		{"logs bad type", []string{"logs", "ex_1", "--type", "task_failed,bogus"}, []string{`--type "bogus": not an event type`, "task_failed"}},
		{"logs tail", []string{"logs", "ex_1", "--tail", "501"}, []string{"--tail 501"}},
		{"status two", []string{"status", "ex_1", "ex_2"}, []string{"want at most one execution id"}},
		{"status limit", []string{"status", "--limit", "0"}, []string{"--limit 0"}},
		{"watch nothing", []string{"watch"}, []string{"want one execution id"}},
		{"watch cursor", []string{"watch", "ex_1", "--after-seq", "-1"}, []string{"--after-seq -1"}},
		{"knowledge limit", []string{"knowledge", "--limit", "0"}, []string{"--limit 0"}},
		{"knowledge confidence", []string{"knowledge", "--min-confidence", "2"}, []string{"--min-confidence 2"}},
		{"knowledge args", []string{"knowledge", "export.sh"}, []string{"want no arguments"}},
		{"knowledge not a repository", []string{"knowledge", "--repo", tmp}, []string{"is not a git repository"}},
		{"dev agents", []string{"dev", "--agents", "-1"}, []string{"--agents -1"}},
		{"dev args", []string{"dev", "now"}, []string{"unexpected arguments"}},
		{"unknown command", []string{"rum"}, []string{`unknown command "rum"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := cli(t, tc.args...)
			require.Equal(t, exitUsage, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			for _, w := range tc.want {
				require.Contains(t, errOut, w)
			}
			require.Empty(t, out, "a usage error prints nothing on stdout")
		})
	}
}

// Without a server the client commands say how to get one (exit 1: not a usage error).
func TestCLINoServer(t *testing.T) {
	t.Parallel()
	addr := clustertest.FreeAddr(t)
	for _, args := range [][]string{{"status", "--server", addr}, {"logs", "ex_1", "--server", addr}, {"watch", "ex_1", "--server", addr},
		{"run", greeterTasks, "--server", addr}} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			code, _, errOut := cli(t, args...)
			require.Equal(t, exitFailure, code, "%v: %s", args, errOut)
			require.Contains(t, errOut, "no converge server answers at "+addr+": start one with `converge dev`", args)
		})
	}
}

// converge run --server against a running `converge dev --agents 3` (a real loopback listener):
// the example converges, then watch, status and logs look at the execution.
func TestRunOnServer(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents, o.AgentDrainTimeout = true, 3, 5*time.Second })
	repo := greeterCopy(t)

	// The dev server's Agent service shows its first local agent.
	st, err := agentv1.NewAgentServiceClient(b.conn).GetStatus(context.Background(), &agentv1.GetStatusRequest{})
	require.NoError(t, err)
	require.Regexp(t, `^agent-1-[0-9a-f]{4}$`, st.GetInstanceId())

	start := time.Now()
	code, out, errOut := cli(t, "run", greeterTasks, "--server", b.addr, "--repo", repo, "--criteria", greeterCriteria, "--no-write-back")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	t.Logf("converge run --server: %s", time.Since(start).Round(time.Millisecond))
	require.Contains(t, out, "[6/6] ✅ Task")
	require.Contains(t, out, "↻ Task 1.3: Greeting tests — try 1/")
	require.Contains(t, out, "✅ Task 1.3: Greeting tests (2 tries)")
	require.Contains(t, out, "✅ Verdict: CONVERGED — 6 criteria passed")
	require.Contains(t, out, "Tasks: 6/6 completed | 0 skipped | 0 failed")
	require.Contains(t, out, "git -C "+repo+" log --oneline converge/ex_")
	id := regexp.MustCompile(`ex_[0-9A-Z]+`).FindString(out)
	require.NotEmpty(t, id)

	// status: the table, then the one execution.
	code, out, errOut = cli(t, "status", "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Regexp(t, `EXECUTION\s+LIST\s+RUN\s+STATUS\s+OUTCOME\s+TASKS\s+WAVE\s+CREATED`, out)
	require.Regexp(t, id+`\s+Tasks: greeter\s+1\s+COMPLETED\s+CONVERGED\s+6/6\s+4/4`, out)
	code, out, errOut = cli(t, "status", id, "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "Status:     COMPLETED")
	require.Contains(t, out, "Verdict:    ✅ CONVERGED")
	require.Regexp(t, `(?m)^3\s+COMPLETED\s+1\s+1\s+0\s+0\s+[0-9a-f]{12}$`, out)
	code, out, _ = cli(t, "status", id, "--server", b.addr, "--json")
	require.Equal(t, exitOK, code)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, "OUTCOME_CONVERGED", got["execution"].(map[string]any)["outcome"])

	// logs: filtered by type and by task; the tail.
	code, out, errOut = cli(t, "logs", id, "--server", b.addr, "--type", "verdict,EXECUTION_COMPLETED")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^#\d+\s+\S+ \S+\s+VERDICT\s+-\s+-\s+Verify Done: CONVERGED`, lines[0])
	require.Contains(t, lines[1], "EXECUTION_COMPLETED")
	code, out, _ = cli(t, "logs", id, "--server", b.addr, "--task", "1.3", "--type", "task_failed")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "try 1/")
	// -f on the ended run: the same page, then its stream (batched) ends at once.
	code, followed, _ := cli(t, "logs", id, "--server", b.addr, "--task", "1.3", "--type", "task_failed", "-f")
	require.Equal(t, exitOK, code)
	require.Equal(t, out, followed)
	code, out, _ = cli(t, "logs", id, "--server", b.addr, "--tail", "1", "--json")
	require.Equal(t, exitOK, code)
	var last map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &last), out)
	require.Equal(t, "EVENT_TYPE_EXECUTION_COMPLETED", last["event_type"])

	// watch replays the ended execution and exits 0; from a cursor it shows only what follows.
	code, out, errOut = cli(t, "watch", id, "--server", b.addr)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "[1/6] ✅ Task 1.1: Greeting package")
	require.Contains(t, out, "Tasks: 6/6 completed")
	seq, err := strconv.ParseInt(last["seq"].(string), 10, 64) // protojson: 64-bit integers are strings
	require.NoError(t, err)
	code, out, _ = cli(t, "watch", id, "--server", b.addr, "--after-seq", strconv.FormatInt(seq-2, 10))
	require.Equal(t, exitOK, code)
	require.NotContains(t, out, "✅ Task 1.1: Greeting package —", "tasks ended before the cursor are not shown again")
	require.Contains(t, out, "🏁 Execution ended CONVERGED")
}

// syncWriter is a buffer written by one goroutine and read by another.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// converge run without --server: the suite starts in this process (in memory) with 3 agents, the
// example converges in 4 waves, and the run branch holds one commit per task in dependency order.
func TestRunInProcessConverges(t *testing.T) {
	t.Parallel()
	repo := greeterCopy(t)
	var out, errOut bytes.Buffer
	start := time.Now()
	err := runRun(context.Background(), runOptions{TasksFile: greeterTasks, Repo: repo, Criteria: greeterCriteria, Agents: 3, JSON: true, NoWriteBack: true},
		runEnv{stdout: &out, stderr: &errOut, rerun: "converge run"})
	require.NoError(t, err, "stderr:\n%s", errOut.String())
	t.Logf("converge run (in-process): %s", time.Since(start).Round(time.Millisecond))
	var sum struct {
		Converged bool          `json:"converged"`
		RunBranch string        `json:"run_branch"`
		Tasks     []summaryTask `json:"tasks"`
		Waves     []struct {
			WaveNumber int32 `json:"wave_number"`
			Placements []struct {
				TaskID string `json:"task_id"`
				Reason string `json:"reason"`
			} `json:"placements"`
		} `json:"waves"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &sum), out.String())
	require.True(t, sum.Converged)
	require.Contains(t, errOut.String(), "[6/6] ✅", "progress goes to stderr with --json")
	require.NotContains(t, errOut.String(), "uncommitted", "a clean repository gets no warning")

	// Four waves; 2.2 waits a wave for 2.1 because both write README.md.
	require.Len(t, sum.Waves, 4)
	require.Equal(t, "2.2", sum.Waves[2].Placements[0].TaskID)
	require.Equal(t, "PLACEMENT_REASON_FILE_CONFLICT", sum.Waves[2].Placements[0].Reason)
	tries := map[string]int32{}
	for _, tk := range sum.Tasks {
		require.Equal(t, "completed", tk.Status, tk.ID)
		tries[tk.ID] = tk.Tries
	}
	require.Equal(t, int32(2), tries["1.3"], "1.3 fails its first try and passes its second")

	requireTaskCommits(t, repo, sum.RunBranch, greeterDeps)
	// The merged program passes its tests.
	checkout := filepath.Join(t.TempDir(), "checkout")
	gitIn(t, repo, "worktree", "add", "-q", checkout, sum.RunBranch)
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = checkout
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	testOut, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", testOut)
}

// greeterDeps are the example's dependencies: task → the tasks it depends on.
var greeterDeps = map[string][]string{"1.1": nil, "1.2": {"1.1"}, "1.3": {"1.1"}, "2.1": {"1.1"}, "2.2": {"1.1"}, "3.1": {"1.2", "2.1", "2.2"}}

// requireTaskCommits checks the run branch: exactly one "Task <id>: ..." commit per task, each
// after the commits of the tasks it depends on.
func requireTaskCommits(t *testing.T, repo, branch string, deps map[string][]string) {
	t.Helper()
	base := gitIn(t, repo, "rev-parse", "HEAD")
	log := gitIn(t, repo, "log", "--no-merges", "--reverse", "--format=%H %s", base+".."+branch)
	commit := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		m := regexp.MustCompile(`^([0-9a-f]+) Task ([^:]+): `).FindStringSubmatch(line)
		require.NotNil(t, m, "a commit on the run branch that is no task's: %q", line)
		_, dup := commit[m[2]]
		require.False(t, dup, "task %s committed twice:\n%s", m[2], log)
		commit[m[2]] = m[1]
	}
	require.Len(t, commit, len(deps), log)
	for task, ds := range deps {
		for _, d := range ds {
			cmd := exec.Command("git", "-C", repo, "merge-base", "--is-ancestor", commit[d], commit[task])
			require.NoError(t, cmd.Run(), "task %s's commit does not come after its dependency %s's:\n%s", task, d, log)
		}
	}
}

// Ctrl-C during a run cancels the execution, prints the summary and ends with 130.
func TestRunInterruptCancels(t *testing.T) {
	t.Parallel()
	tasks := filepath.Join(t.TempDir(), "slow.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# Tasks: slow\n\n### Task 1.1: Wait\n\n**Command:** `sleep 60`\n\n"+
		"### Task 1.2: After\n\n**Depends on:** 1.1\n**Command:** `true`\n"), 0o644))
	signals, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	out, errOut := &syncWriter{}, &syncWriter{}
	done := make(chan error, 1)
	go func() {
		done <- runRun(context.Background(), runOptions{TasksFile: tasks, Agents: 1},
			runEnv{stdout: out, stderr: errOut, rerun: "converge run slow.md", signals: signals})
	}()
	// Interrupt once the task runs.
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was interrupted: %v\n%s", err, errOut.String())
		default:
		}
		return strings.Contains(out.String(), "Task 1.1: Wait — in progress")
	}, 60*time.Second, 20*time.Millisecond)
	interrupted := time.Now()
	interrupt()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("run did not end within 60s of the interrupt")
	}
	t.Logf("interrupt to exit: %s", time.Since(interrupted).Round(time.Millisecond))
	var ee exitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitInterrupted, ee.code)
	text := out.String()
	require.Contains(t, text, "🛑 Interrupted: cancelling ex_")
	require.Contains(t, text, "Outcome: CANCELLED")
	require.Contains(t, text, "Run it again when ready: converge run slow.md")
	if logFile := regexp.MustCompile(`The suite's own log: (\S+)`).FindStringSubmatch(text); logFile != nil {
		_ = os.Remove(logFile[1]) // kept for a person when a run does not converge
	}
}

// A dev server with agents stops cleanly: its agents are drained (setupDev's cleanup requires
// runDev to return nil within 30 s).
func TestDevAgentsDrainOnStop(t *testing.T) {
	t.Parallel()
	b := setupDev(t, func(o *devOptions) { o.InMemory, o.Agents, o.AgentDrainTimeout = true, 2, 2*time.Second })
	res, err := schedulerv1.NewSchedulerServiceClient(b.conn).ListExecutions(context.Background(), &schedulerv1.ListExecutionsRequest{})
	require.NoError(t, err)
	require.Empty(t, res.GetExecutions())
	st, err := agentv1.NewAgentServiceClient(b.conn).GetStatus(context.Background(), &agentv1.GetStatusRequest{})
	require.NoError(t, err)
	require.NotEmpty(t, st.GetInstanceId())
}

// A run whose result misses a done-criterion ends 1 with the failed criterion named; its suite
// log is kept and named. (A pure command DAG: no repository, a scratch directory per task.)
func TestRunNotConvergedExitsOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tasks := filepath.Join(dir, "dag.md")
	crit := filepath.Join(dir, "criteria.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# dag\n\n### Task 1: First\n**Command:** `true`\n\n### Task 2: Second\n**Depends on:** 1\n**Command:** `true`\n"), 0o644))
	require.NoError(t, os.WriteFile(crit, []byte("## F1: The impossible holds\nTag: AUTO_VERIFY\n\n```check\ncommand:\n  shell: exit 3\n```\n\n"+
		"## F2: The possible holds\nTag: AUTO_VERIFY\n\n```check\ncommand:\n  shell: exit 0\n```\n"), 0o644))
	code, out, errOut := cli(t, "run", tasks, "--criteria", crit, "--agents", "2")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "[2/2] ✅ Task")
	require.Contains(t, out, "❌ Verdict: FAILED — 1 of 2 criteria failed: F1")
	require.Contains(t, out, "Verdict: ❌ FAILED — 1 of 2 criteria failed: F1 (report vr_")
	require.Contains(t, out, "Outcome: FAILED")
	require.Contains(t, out, "The tasks ran but the result misses done-criteria F1")
	require.NotContains(t, out, "Run branch:", "no repository, no run branch")
	logFile := regexp.MustCompile(`The suite's own log: (\S+)`).FindStringSubmatch(out)
	require.NotNil(t, logFile, out)
	require.FileExists(t, logFile[1])
	_ = os.Remove(logFile[1])
}

// The CONVERGE_* variables of --heartbeat and --max-retries: a value that does not parse is a
// usage error that names the variable. (Not parallel: it sets the environment.)
func TestRunFlagEnvironment(t *testing.T) {
	t.Setenv("CONVERGE_HEARTBEAT", "soon")
	t.Setenv("CONVERGE_MAX_RETRIES", "three")
	code, out, errOut := cli(t, "run", greeterTasks)
	require.Equal(t, exitUsage, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, `CONVERGE_HEARTBEAT="soon": not a duration`)
	require.Contains(t, errOut, `CONVERGE_MAX_RETRIES="three": not an integer`)

	t.Setenv("CONVERGE_HEARTBEAT", "7s")
	t.Setenv("CONVERGE_MAX_RETRIES", "2")
	cmd := runCommand()
	require.Equal(t, "7s", cmd.Flags().Lookup("heartbeat").DefValue)
	require.Equal(t, "2", cmd.Flags().Lookup("max-retries").DefValue)
}

// converge run on a repository with uncommitted changes (issue 12, defect 13) warns on stderr
// and lists them (at most 20, then how many more), then builds from the last commit; --heartbeat
// and --max-retries reach the execution's options.
func TestRunWarnsUncommittedAndSetsTiming(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(repo, 0o755))
	gitIn(t, repo, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# committed\n"), 0o644))
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "initial")
	// One tracked file changed, 24 new ones.
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# not committed\n"), 0o644))
	for i := range 24 {
		require.NoError(t, os.WriteFile(filepath.Join(repo, fmt.Sprintf("draft-%02d.txt", i)), []byte("draft\n"), 0o644))
	}
	tasks := filepath.Join(t.TempDir(), "tasks.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# Tasks: dirty\n\n### Task 1.1: Write\n\n**File:** `out.txt`\n**Command:** `echo done > out.txt`\n"), 0o644))

	// No done-criteria and no validation command: CONVERGED_PENDING_HUMAN, so exit 1.
	// (--data-dir: the suite log it keeps goes away with the test.)
	// (--no-write-back: the second run below runs the same task again.)
	code, out, errOut := cli(t, "run", tasks, "--repo", repo, "--agents", "1", "--heartbeat", "2s", "--max-retries", "1", "--json", "--data-dir", t.TempDir(), "--no-write-back")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, errOut, "warning: "+repo+" has 25 uncommitted changes: the run builds from its last commit (HEAD, ")
	require.Contains(t, errOut, "\n   M README.md\n", "git status --porcelain lines, as git prints them")
	require.Contains(t, errOut, "\n  ?? draft-00.txt\n")
	require.Contains(t, errOut, "\n  ?? draft-18.txt\n")
	require.NotContains(t, errOut, "draft-19.txt", "at most 20 paths are listed")
	require.Contains(t, errOut, "  … and 5 more (git -C "+repo+" status)\n")

	var sum struct {
		RunBranch string `json:"run_branch"`
		Execution struct {
			Options struct {
				MaxRetries  int `json:"max_retries"`
				AgentConfig struct {
					HeartbeatInterval string `json:"heartbeat_interval"`
				} `json:"agent_config"`
			} `json:"options"`
		} `json:"execution"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sum), out)
	require.Equal(t, 1, sum.Execution.Options.MaxRetries)
	require.Equal(t, "2s", sum.Execution.Options.AgentConfig.HeartbeatInterval)
	// Built from the commit: the run branch has the committed README, not the change.
	require.Equal(t, "# committed", gitIn(t, repo, "show", sum.RunBranch+":README.md"))
	require.Equal(t, "done", gitIn(t, repo, "show", sum.RunBranch+":out.txt"))

	// Verify Done had nothing to check, so there is no report: the next steps name none.
	code, out, errOut = cli(t, "run", tasks, "--repo", repo, "--agents", "1")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "Outcome: CONVERGED_PENDING_HUMAN")
	require.NotContains(t, out, "for report")
	require.Contains(t, out, "  - Confirm the result yourself: nothing was checked for you")
	if logFile := regexp.MustCompile(`The suite's own log: (\S+)`).FindStringSubmatch(out); logFile != nil {
		_ = os.Remove(logFile[1])
	}
}

// Without --heartbeat and --max-retries the execution keeps the defaults: nothing is sent.
func TestRunExecutionOptionsDefaults(t *testing.T) {
	t.Parallel()
	opts := executionOptions(runOptions{MaxParallel: 2})
	require.Nil(t, opts.MaxRetries, "an unset --max-retries is not 0 retries")
	require.Nil(t, opts.GetAgentConfig())
	zero := 0
	opts = executionOptions(runOptions{Heartbeat: 5 * time.Second, MaxRetries: &zero})
	require.Equal(t, int32(0), opts.GetMaxRetries())
	require.NotNil(t, opts.MaxRetries)
	require.Equal(t, 5*time.Second, opts.GetAgentConfig().GetHeartbeatInterval().AsDuration())
	require.False(t, opts.GetAllowUndeclaredFiles(), "undeclared files are refused unless asked")
	require.True(t, executionOptions(runOptions{AllowUndeclaredFiles: true}).GetAllowUndeclaredFiles(), "--allow-undeclared-files")
}

// The case (issue 12, defect 1, seen from converge run): a task whose command always
// fails runs exactly --max-retries + 1 times and is reported failed with its command's error, not
// as an agent that stopped.
func TestRunFailingTaskRunsMaxRetriesPlusOne(t *testing.T) {
	t.Parallel()
	repo := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(repo, 0o755))
	gitIn(t, repo, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README.md"), []byte("# repo\n"), 0o644))
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "-c", "user.name=test", "-c", "user.email=test@example.invalid", "commit", "-q", "-m", "initial")
	count := filepath.Join(t.TempDir(), "count")
	tasks := filepath.Join(t.TempDir(), "tasks.md")
	require.NoError(t, os.WriteFile(tasks, []byte("# Tasks: fails\n\n### Task 1.1: Always fails\n\n**File:** `out.txt`\n"+
		"**Command:** `sh -c 'echo run >> "+count+"; echo the widget is missing >&2; exit 1'`\n"), 0o644))
	code, out, errOut := cli(t, "run", tasks, "--repo", repo, "--agents", "1", "--max-retries", "2", "--heartbeat", "1s")
	require.Equal(t, exitFailure, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	b, err := os.ReadFile(count)
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(string(b), "run\n"), "--max-retries 2: the command runs 3 times\n%s", out)
	require.Contains(t, out, "❌ Task 1.1: Always fails (failed after 3 tries: ")
	require.Contains(t, out, "exit status 1")
	require.NotContains(t, out, "stopped before finishing")
	if logFile := regexp.MustCompile(`The suite's own log: (\S+)`).FindStringSubmatch(out); logFile != nil {
		_ = os.Remove(logFile[1])
	}
}

// TestRepoTakesCloneURLs: --repo is a clone URL (sent as Repository.url) in the forms the
// Scheduler accepts, and a local directory otherwise.
func TestRepoTakesCloneURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"https://git.example.com/team/app.git", "ssh://git@host/app.git", "git://10.0.0.1:9418/app.git",
		"file:///srv/app.git", "git@github.com:team/app.git"} {
		require.True(t, cloneURL.MatchString(u), u)
	}
	for _, d := range []string{"/tmp/app", "app", "./app", "C:/repo", "a b://x"} {
		require.False(t, cloneURL.MatchString(d), d)
	}
}
