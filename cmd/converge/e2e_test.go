package main

// End-to-end tests against the real binaries: `converge dev` driven by the README's grpcurl
// transcripts, and the standalone service binaries against this machine's Postgres and Redis,
// including their absence.

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/converge-dev/converge/platform/clustertest"
	"github.com/converge-dev/converge/platform/database/dbtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustertest.RemoveBinaries()
	os.Exit(code)
}

// start runs a binary (platform/clustertest) until the test ends, when it must exit cleanly on
// SIGTERM.
func start(t *testing.T, bin string, env []string, args ...string) *clustertest.Process {
	t.Helper()
	return clustertest.StartProcess(t, clustertest.ProcessSpec{Bin: clustertest.Binary(t, bin), Env: env, Args: args, CleanExit: true})
}

func waitHealth(t *testing.T, p *clustertest.Process, addr, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	clustertest.WaitHealth(t, p, addr, service, want, 0)
}

// downProxy is a fault proxy to target that nothing listens on until Up: what an unreachable
// Postgres or Redis looks like.
func downProxy(t *testing.T, target string) *clustertest.Proxy {
	t.Helper()
	p, err := clustertest.NewProxyDown(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// withHostPort answers rawURL with its host:port replaced.
func withHostPort(t *testing.T, rawURL, hostPort string) string {
	t.Helper()
	re := regexp.MustCompile(`^([a-z]+://(?:[^@/]*@)?)([^/?]+)(.*)$`)
	m := re.FindStringSubmatch(rawURL)
	require.NotNil(t, m, "unexpected URL %q", rawURL)
	return m[1] + hostPort + m[3]
}

// Every standalone binary starts against the real Postgres (and Redis), migrates and serves.
func TestStandaloneBinariesServe(t *testing.T) {
	t.Parallel()
	pg := dbtest.Postgres(t)
	for _, svc := range []string{"scheduler", "registry", "knowledge", "verifier", "agent"} {
		t.Run(svc, func(t *testing.T) {
			addr := clustertest.FreeAddr(t)
			args := []string{"--listen", addr}
			if svc == "agent" {
				// The worker keeps retrying a Scheduler and Registry that do not answer; its API serves.
				args = append(args, "--scheduler", clustertest.FreeAddr(t), "--registry", clustertest.FreeAddr(t), "--data-dir", t.TempDir())
			}
			p := start(t, "converge-"+svc, []string{
				"CONVERGE_POSTGRES_URL=" + pg, "CONVERGE_REDIS_URL=" + clustertest.RedisURL(), "CONVERGE_MIGRATE=true",
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
	redisTarget := regexp.MustCompile(`://(?:[^@/]*@)?([^/]+)`).FindStringSubmatch(clustertest.RedisURL())
	require.NotNil(t, redisTarget)
	pgProxy, redisProxy := downProxy(t, pgTarget[1]), downProxy(t, redisTarget[1])

	addr := clustertest.FreeAddr(t)
	p := start(t, "converge-registry", nil,
		"--listen", addr, "--migrate",
		"--postgres-url", withHostPort(t, pgURL, pgProxy.Addr),
		"--redis-url", withHostPort(t, clustertest.RedisURL(), redisProxy.Addr))

	const svc = "converge.registry.v1.RegistryService"
	waitHealth(t, p, addr, svc, healthpb.HealthCheckResponse_NOT_SERVING)
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		out := p.Output()
		return strings.Contains(out, "connection refused") && strings.Contains(out, "retrying")
	}), "no clear log of the unreachable stores:\n%s", p.Output())

	require.NoError(t, pgProxy.Up())
	// Postgres alone is not enough: Redis is still down.
	require.True(t, clustertest.Eventually(30*time.Second, func() bool {
		return strings.Contains(p.Output(), "redis at "+redisProxy.Addr)
	}), "no clear log of the unreachable Redis:\n%s", p.Output())
	got, err := clustertest.Health(addr, svc)
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, got)

	require.NoError(t, redisProxy.Up())
	waitHealth(t, p, addr, svc, healthpb.HealthCheckResponse_SERVING)
	require.False(t, p.Exited(), "the registry exited")
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
			addr = clustertest.FreeAddr(t)
			args := append([]string{"dev", "--in-memory", "--insecure-no-auth", "--listen", addr}, strings.Fields(b.serverArgs)...)
			p := start(t, "converge", nil, args...)
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
		out, err := exec.Command(clustertest.Binary(t, "converge"), append([]string{"migrate"}, args...)...).CombinedOutput()
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

	out, err := exec.Command(clustertest.Binary(t, "converge"), "migrate", "--service", "nope", "--data-dir", dir).CombinedOutput()
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
	cmd.Env = append(os.Environ(), "CONVERGE="+clustertest.Binary(t, "converge"), "CONVERGE_EXAMPLE_DIR="+dir)
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
