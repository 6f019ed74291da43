package dashboard_test

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	schedulerv1 "github.com/converge-dev/converge/gen/converge/scheduler/v1"
	"github.com/converge-dev/converge/platform/client"
)

// The tests run the real binaries: `converge dev --dashboard` (and `converge-agent` workers), built
// once by TestMain from this checkout, and the greeter example through `converge run --server`.
var (
	convergeBin string
	agentBin    string
	repoRoot    string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test here skips under -short: no need to build
	}
	dir, err := os.MkdirTemp("", "converge-dashboard-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	wd, _ := os.Getwd()
	repoRoot = filepath.Clean(filepath.Join(wd, "..", "..", ".."))
	convergeBin = filepath.Join(dir, "converge")
	agentBin = filepath.Join(dir, "converge-agent")
	for _, b := range []struct{ dir, out, pkg string }{
		{filepath.Join(repoRoot, "cmd", "converge"), convergeBin, "."},
		{filepath.Join(repoRoot, "services", "agent"), agentBin, "./cmd/converge-agent"},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// proc is a child process whose stderr is kept and searched.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// find waits until re matches the output and answers its first group.
func (p *proc) find(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m[1]
		}
		select {
		case <-p.done:
			if m := re.FindStringSubmatch(p.output()); m != nil {
				return m[1]
			}
			t.Fatalf("process ended before %s appeared: %v\n%s", re, p.err, p.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within 60 s:\n%s", re, p.output())
		}
	}
}

// start runs a binary until the test ends (SIGTERM, then SIGKILL after 20 s).
func start(t *testing.T, dir, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Dir = dir
	r, w := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = w, w
	require.NoError(t, p.cmd.Start())
	go func() {
		s := bufio.NewScanner(r)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			p.mu.Lock()
			p.out.Write(s.Bytes())
			p.out.WriteByte('\n')
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		p.err = p.cmd.Wait()
		_ = w.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(bin), p.output())
		}
	})
	return p
}

// suite is a running `converge dev` with its dashboard.
type suite struct {
	dev  *proc
	addr string // gRPC
	url  string // dashboard, "http://host:port"
	dir  string
}

var (
	listenRe = regexp.MustCompile(`msg="converge dev: scheduler[^\n]* listen=(\S+)`)
	urlRe    = regexp.MustCompile(`msg="converge dev: dashboard" url=(http://[^/\s]+)/`)
)

// startDev starts `converge dev --in-memory` with a dashboard on free ports; extra are more flags.
func startDev(t *testing.T, extra ...string) *suite {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"dev", "--in-memory", "--insecure-no-auth", "--listen", "127.0.0.1:0", "--dashboard", "127.0.0.1:0",
		"--verifier-allowed-root", dir}, extra...)
	p := start(t, dir, convergeBin, args...)
	s := &suite{dev: p, dir: dir}
	s.addr = p.find(t, listenRe)
	s.url = p.find(t, urlRe)
	require.Eventually(t, func() bool {
		res, err := http.Get(s.url + "/static/app.js")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	return s
}

// conn is a gRPC connection to the suite with token (empty = none).
func (s *suite) conn(t *testing.T, token string) *grpc.ClientConn {
	t.Helper()
	c, err := client.Dial(s.addr, client.Options{Token: token})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// greeterRepo copies examples/greeter/repo into a new git repository under the suite's dir.
func (s *suite) greeterRepo(t *testing.T) string {
	t.Helper()
	repo := filepath.Join(s.dir, "greeter")
	require.NoError(t, os.CopyFS(repo, os.DirFS(filepath.Join(repoRoot, "examples", "greeter", "repo"))))
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=dashboard test", "-c", "user.email=test@converge.invalid", "commit", "-q", "-m", "greeter: the starting point"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	// Under converge's checkout go would take converge's go.work: the copy gets its own.
	require.NoError(t, os.WriteFile(filepath.Join(repo, "go.work"), []byte("go 1.22\n\nuse .\n"), 0o644))
	f, err := os.OpenFile(filepath.Join(repo, ".git", "info", "exclude"), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, _ = f.WriteString("go.work\n")
	require.NoError(t, f.Close())
	return repo
}

// runGreeter submits the greeter example to the suite with `converge run --server` (in the
// background: the returned proc ends when the run does).
func (s *suite) runGreeter(t *testing.T, extra ...string) *proc {
	t.Helper()
	return s.runGreeterWith(t, filepath.Join(repoRoot, "examples", "greeter", "done-criteria.md"), extra...)
}

// humanCriteria is the greeter's done-criteria plus one HUMAN_VERIFY criterion, for sign-off.
func (s *suite) humanCriteria(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", "greeter", "done-criteria.md"))
	require.NoError(t, err)
	b = append(b, "\n## U1: The greeting reads well\nTag: HUMAN_VERIFY\n\nA person runs `go run . Ada` and finds the greeting friendly.\n"...)
	path := filepath.Join(s.dir, "done-criteria-human.md")
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// runGreeterWith is runGreeter with other done-criteria.
func (s *suite) runGreeterWith(t *testing.T, criteria string, extra ...string) *proc {
	t.Helper()
	repo := s.greeterRepo(t)
	ex := filepath.Join(repoRoot, "examples", "greeter")
	args := append([]string{"run", filepath.Join(ex, "tasks.md"), "--repo", repo, "--criteria", criteria,
		"--server", s.addr, "--no-write-back"}, extra...)
	return start(t, s.dir, convergeBin, args...)
}

// startAgent starts a converge-agent worker against the suite.
func (s *suite) startAgent(t *testing.T, name string) *proc {
	t.Helper()
	return start(t, s.dir, agentBin, "--listen", "127.0.0.1:0", "--scheduler", s.addr, "--registry", s.addr,
		"--knowledge", s.addr, "--instance-id", name, "--data-dir", filepath.Join(s.dir, "agent-"+name),
		"--allowed-root", s.dir) // the greeter's copy is built in s.dir
}

// firstExecution waits for the suite's first execution and answers its id.
func (s *suite) firstExecution(t *testing.T, token string) string {
	t.Helper()
	sched := schedulerv1.NewSchedulerServiceClient(s.conn(t, token))
	var id string
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := sched.ListExecutions(ctx, &schedulerv1.ListExecutionsRequest{})
		if err != nil || len(res.GetExecutions()) == 0 {
			return false
		}
		id = res.GetExecutions()[0].GetId()
		return true
	}, 60*time.Second, 50*time.Millisecond)
	return id
}

// get fetches a dashboard page; headers are "Name: value" strings.
func (s *suite) get(t *testing.T, path string, headers ...string) (int, string) {
	t.Helper()
	return s.do(t, http.MethodGet, path, "", headers...)
}

func (s *suite) do(t *testing.T, method, path, form string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(form))
	require.NoError(t, err)
	if form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, Timeout: 30 * time.Second}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}
