package main

// End-to-end tests against the real binaries: `converge dev` driven by the README's grpcurl
// transcripts, and the standalone service binaries against this machine's Postgres and Redis,
// including their absence.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/converge-dev/converge/platform/database/dbtest"
)

// binDir holds the binaries built once for every test of the package.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binary answers the path of a built binary: "converge" or "converge-<service>".
func binary(t *testing.T, name string) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "converge-bin-")
		if binErr != nil {
			return
		}
		pkgs := map[string]string{
			"converge":           ".",
			"converge-scheduler": "github.com/converge-dev/converge/services/scheduler/cmd/converge-scheduler",
			"converge-registry":  "github.com/converge-dev/converge/services/registry/cmd/converge-registry",
			"converge-knowledge": "github.com/converge-dev/converge/services/knowledge/cmd/converge-knowledge",
			"converge-verifier":  "github.com/converge-dev/converge/services/verifier/cmd/converge-verifier",
			"converge-agent":     "github.com/converge-dev/converge/services/agent/cmd/converge-agent",
		}
		for bin, pkg := range pkgs {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, bin), pkg).CombinedOutput()
			if err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	require.NoError(t, binErr)
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// freeAddr answers a loopback address nothing listens on (a port just released by the kernel).
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// process is a started binary whose output is kept for assertions.
type process struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// start runs a binary until the test ends; at the end it is sent SIGTERM and must exit cleanly.
func start(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(t, p.cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			require.NoError(t, err, "%s did not exit cleanly:\n%s", bin, p.output())
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("%s did not stop within 30s of SIGINT:\n%s", bin, p.output())
		}
	})
	return p
}

// healthOf answers the health of service ("" for the server) at addr, or the error.
func healthOf(addr, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return res.GetStatus(), err
}

func waitHealth(t *testing.T, p *process, addr, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	var last string
	ok := assertEventually(30*time.Second, func() bool {
		got, err := healthOf(addr, service)
		last = fmt.Sprintf("%v %v", got, err)
		return err == nil && got == want
	})
	require.True(t, ok, "health of %q never became %v (last: %s); output:\n%s", service, want, last, p.output())
}

func assertEventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.After(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline:
			return cond()
		case <-tick.C:
		}
	}
}

// proxy forwards a loopback port to target once opened; until then nothing listens on its port,
// which is what an unreachable Postgres or Redis looks like.
type proxy struct {
	addr, target string
	lis          net.Listener
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{addr: freeAddr(t), target: target}
	t.Cleanup(func() {
		if p.lis != nil {
			_ = p.lis.Close()
		}
	})
	return p
}

func (p *proxy) open(t *testing.T) {
	t.Helper()
	lis, err := net.Listen("tcp", p.addr)
	require.NoError(t, err)
	p.lis = lis
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", p.target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
}

// withHostPort answers rawURL with its host:port replaced.
func withHostPort(t *testing.T, rawURL, hostPort string) string {
	t.Helper()
	re := regexp.MustCompile(`^([a-z]+://(?:[^@/]*@)?)([^/?]+)(.*)$`)
	m := re.FindStringSubmatch(rawURL)
	require.NotNil(t, m, "unexpected URL %q", rawURL)
	return m[1] + hostPort + m[3]
}

func redisURL() string {
	if u := os.Getenv("CONVERGE_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Every standalone binary starts against the real Postgres (and Redis), migrates and serves.
func TestStandaloneBinariesServe(t *testing.T) {
	t.Parallel()
	pg := dbtest.Postgres(t)
	for _, svc := range []string{"scheduler", "registry", "knowledge", "verifier", "agent"} {
		t.Run(svc, func(t *testing.T) {
			addr := freeAddr(t)
			args := []string{"--listen", addr}
			if svc == "agent" {
				// The worker keeps retrying a Scheduler and Registry that do not answer; its API serves.
				args = append(args, "--scheduler", freeAddr(t), "--registry", freeAddr(t), "--data-dir", t.TempDir())
			}
			p := start(t, binary(t, "converge-"+svc), []string{
				"CONVERGE_POSTGRES_URL=" + pg, "CONVERGE_REDIS_URL=" + redisURL(), "CONVERGE_MIGRATE=true",
			}, args...)
			waitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING)
		})
	}
}

// With Postgres and Redis unreachable, the registry says so, reports NOT_SERVING and keeps retrying;
// when they come up it migrates and turns SERVING. It never exits.
func TestStandaloneSurvivesMissingStores(t *testing.T) {
	t.Parallel()
	pg := dbtest.Postgres(t)
	pgURL := strings.Replace(pg, "localhost", "127.0.0.1", 1)
	pgTarget := regexp.MustCompile(`@([^/]+)/`).FindStringSubmatch(pgURL)
	require.NotNil(t, pgTarget, pgURL)
	redisTarget := regexp.MustCompile(`://(?:[^@/]*@)?([^/]+)`).FindStringSubmatch(redisURL())
	require.NotNil(t, redisTarget)
	pgProxy, redisProxy := newProxy(t, pgTarget[1]), newProxy(t, redisTarget[1])

	addr := freeAddr(t)
	p := start(t, binary(t, "converge-registry"), nil,
		"--listen", addr, "--migrate",
		"--postgres-url", withHostPort(t, pgURL, pgProxy.addr),
		"--redis-url", withHostPort(t, redisURL(), redisProxy.addr))

	const svc = "converge.registry.v1.RegistryService"
	waitHealth(t, p, addr, svc, healthpb.HealthCheckResponse_NOT_SERVING)
	require.True(t, assertEventually(30*time.Second, func() bool {
		out := p.output()
		return strings.Contains(out, "connection refused") && strings.Contains(out, "retrying")
	}), "no clear log of the unreachable stores:\n%s", p.output())

	pgProxy.open(t)
	// Postgres alone is not enough: Redis is still down.
	require.True(t, assertEventually(30*time.Second, func() bool {
		return strings.Contains(p.output(), "redis at "+redisProxy.addr)
	}), "no clear log of the unreachable Redis:\n%s", p.output())
	got, err := healthOf(addr, svc)
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, got)

	redisProxy.open(t)
	waitHealth(t, p, addr, svc, healthpb.HealthCheckResponse_SERVING)
	require.Nil(t, p.cmd.ProcessState, "the registry exited")
}

// The grpcurl transcripts of README.md and docs/*.md hold against a real `converge dev`: each `$ `
// command is run and its output compared line by line with the lines below it ("..." stands for
// any lines). Blocks run in order against one server per set of server arguments, so a transcript
// may build on the one before it.
func TestREADMETranscripts(t *testing.T) {
	t.Parallel()
	grpcurl := findGrpcurl(t)
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	var blocks []transcriptBlock
	for _, path := range append([]string{"../../README.md"}, docs...) {
		blocks = append(blocks, readTranscripts(t, path)...)
	}
	require.NotEmpty(t, blocks)
	servers := map[string]string{} // server args → address
	for _, b := range blocks {
		addr, ok := servers[b.serverArgs]
		if !ok {
			addr = freeAddr(t)
			args := append([]string{"dev", "--in-memory", "--listen", addr}, strings.Fields(b.serverArgs)...)
			p := start(t, binary(t, "converge"), nil, args...)
			waitHealth(t, p, addr, "", healthpb.HealthCheckResponse_SERVING)
			servers[b.serverArgs] = addr
		}
		for _, c := range b.commands {
			line := strings.ReplaceAll(c.line, "127.0.0.1:7070", addr)
			require.True(t, strings.HasPrefix(line, "grpcurl "), "%s line %d: only grpcurl commands are run: %s", b.path, c.lineNo, c.line)
			cmd := exec.Command("sh", "-c", grpcurl+strings.TrimPrefix(line, "grpcurl"))
			// Lines may call grpcurl again inside $(...): the same one.
			cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, _ := cmd.CombinedOutput() // grpcurl exits non-zero for an error status; the output says which
			got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			require.True(t, matchLines(c.want, got), "%s line %d: %s\nwant:\n%s\ngot:\n%s",
				b.path, c.lineNo, c.line, strings.Join(c.want, "\n"), strings.Join(got, "\n"))
		}
	}
}

type transcriptCommand struct {
	line   string
	lineNo int
	want   []string
}

type transcriptBlock struct {
	path       string
	serverArgs string
	commands   []transcriptCommand
}

// readTranscripts parses the ```console blocks of a markdown file. A block preceded by
// `<!-- transcript-server: ARGS -->` runs against a server started with ARGS.
func readTranscripts(t *testing.T, path string) []transcriptBlock {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		blocks     []transcriptBlock
		cur        *transcriptBlock
		serverArgs string
		n          int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "<!-- transcript-server:"):
			serverArgs = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "<!-- transcript-server:"), "-->"))
		case cur == nil && line == "```console":
			cur = &transcriptBlock{path: filepath.Base(path), serverArgs: serverArgs}
			serverArgs = ""
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil && strings.HasPrefix(line, "$ "):
			cur.commands = append(cur.commands, transcriptCommand{line: strings.TrimPrefix(line, "$ "), lineNo: n})
		case cur != nil:
			require.NotEmpty(t, cur.commands, "%s:%d: output before any command", path, n)
			last := &cur.commands[len(cur.commands)-1]
			last.want = append(last.want, line)
		}
	}
	require.NoError(t, sc.Err())
	return blocks
}

// matchLines reports whether got matches want, where a "..." line in want matches any lines.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && strings.TrimRight(want[0], " ") == strings.TrimRight(got[0], " ") && matchLines(want[1:], got[1:])
}

// findGrpcurl answers grpcurl from PATH or the tools directory `make tools` installs into.
func findGrpcurl(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p
	}
	for _, dir := range []string{os.Getenv("TOOLS_DIR"), "../../.tools"} {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, "bin", "grpcurl"); fileExists(p) {
			return p
		}
	}
	t.Fatal("grpcurl not found on PATH or in .tools/bin: run `make tools`")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	pg := dbtest.Postgres(t)
	run := func(args ...string) string {
		out, err := exec.Command(binary(t, "converge"), append([]string{"migrate"}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	before := run("--postgres-url", pg, "--status")
	require.Contains(t, before, "pending")
	require.NotContains(t, before, "applied")
	after := run("--postgres-url", pg)
	require.NotContains(t, after, "pending")
	for _, s := range stateful {
		require.Contains(t, after, s)
	}
	require.Equal(t, after, run("--postgres-url", pg, "--status"), "a second look must find the same")

	dir := t.TempDir()
	require.NotContains(t, run("--data-dir", dir), "pending")

	out, err := exec.Command(binary(t, "converge"), "migrate", "--service", "nope", "--data-dir", dir).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `--service "nope"`)
}

// The README's main command, `make example`: examples/greeter/run.sh with the built converge
// binary copies the sample repository to a fresh git repository and runs
// `converge run examples/greeter/tasks.md --repo ... --criteria ... --agents 3` with the suite in
// process. The example converges; the run branch holds one commit per task in dependency order;
// the merged program passes its tests and greets.
func TestExampleConverges(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "greeter")
	cmd := exec.Command("sh", "../../examples/greeter/run.sh")
	cmd.Env = append(os.Environ(), "CONVERGE="+binary(t, "converge"), "CONVERGE_EXAMPLE_DIR="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	t.Logf("make example: %s", time.Since(start).Round(time.Millisecond))
	out := stdout.String()
	for _, want := range []string{
		"── Wave 3/4: 1 task (2.2)",
		"↻ Task 1.3: Greeting tests — try 1/",
		"[6/6] ✅ Task",
		"✅ Verdict: CONVERGED — 6 criteria passed",
		"Tasks: 6/6 completed | 0 skipped | 0 failed",
		"✅ Task 1.3: Greeting tests (2 tries)",
	} {
		require.Contains(t, out, want)
	}
	branch := regexp.MustCompile(`Run branch: (converge/ex_[0-9A-Z]+)`).FindStringSubmatch(out)
	require.NotNil(t, branch, out)
	require.Contains(t, out, "git -C "+dir+" log --oneline "+branch[1])
	requireTaskCommits(t, dir, branch[1], greeterDeps)

	// The run branch, checked out, passes its tests and greets (go.work: run.sh's, see there).
	gitIn(t, dir, "checkout", "-q", branch[1])
	for _, c := range [][]string{{"go", "test", "-count=1", "./..."}, {"go", "run", ".", "Ada"}} {
		run := exec.Command(c[0], c[1:]...)
		run.Dir = dir
		got, err := run.CombinedOutput()
		require.NoError(t, err, "%v: %s", c, got)
		if c[1] == "run" {
			require.Equal(t, "Hello, Ada\n", string(got))
		}
	}
}
