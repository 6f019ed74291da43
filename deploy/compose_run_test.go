package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// composeBlocks answers the ```sh blocks of docs/deploy.md's "Compose, on one host" section, in
// order, each as its lines.
func composeBlocks(t *testing.T) [][]string {
	t.Helper()
	raw, err := os.ReadFile("../docs/deploy.md")
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "## Compose, on one host")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(doc[start+1:], "\n## ")
	require.Greater(t, end, 0)
	section := doc[start : start+1+end]
	var blocks [][]string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, strings.Split(strings.TrimSpace(m[1]), "\n"))
	}
	return blocks
}

// TestComposeAsDocumented follows docs/deploy.md's Compose section as written, on podman and
// podman-compose: build the images, write the .env, `podman-compose up -d`, then
// `converge run ... --server 127.0.0.1:7071` of a three-task list on a repository served by
// `git daemon` (only tasks.md, done-criteria.md and the repository URL of the docs' command are
// replaced), expecting CONVERGED; the run is on the dashboard (port 7080) and three agents ran; then
// `podman-compose stop -t 30` must leave every container exited 0, and `down -v` removes them.
//
// It needs podman, podman-compose, runc and mmdebstrap (Debian packages), Go, git and grpcurl,
// ports 7071 and 7080 free, and several minutes: `make deploy-smoke` runs it with
// CONVERGE_COMPOSE_TEST=1 (so does CI); otherwise it skips.
func TestComposeAsDocumented(t *testing.T) {
	if os.Getenv("CONVERGE_COMPOSE_TEST") != "1" {
		t.Skip("CONVERGE_COMPOSE_TEST=1 runs it (make deploy-smoke): podman-compose, the images, ports 7071 and 7080")
	}
	blocks := composeBlocks(t)
	require.Len(t, blocks, 3, "docs/deploy.md's Compose section: up, use, stop")
	for _, port := range []string{"7071", "7080"} {
		l, err := net.Listen("tcp", "0.0.0.0:"+port)
		require.NoError(t, err, "port %s must be free: the documented Compose publishes it", port)
		require.NoError(t, l.Close())
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	composeDir := filepath.Join(root, "deploy", "compose")
	tmp := t.TempDir()

	// The machine's podman settings (cgroupfs, runc, no default ulimits), as make images uses them:
	// not part of the docs, which assume a podman that works.
	conf := filepath.Join(tmp, "containers.conf")
	require.NoError(t, os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = []\n\n[engine]\ncgroup_manager = \"cgroupfs\"\nruntime = \"runc\"\n"), 0o644))
	regs := filepath.Join(tmp, "registries.conf")
	require.NoError(t, os.WriteFile(regs, []byte("unqualified-search-registries = []\n"), 0o644))
	// converge on the PATH, as an operator has it.
	bin := filepath.Join(tmp, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "converge"), ".")
	build.Dir = filepath.Join(root, "cmd", "converge")
	built, err := build.CombinedOutput()
	require.NoError(t, err, "%s", built)
	env := append(os.Environ(), "CONTAINERS_CONF="+conf, "CONTAINERS_REGISTRIES_CONF="+regs,
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	sh := func(dir string, timeout time.Duration, script string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-ec", script)
		cmd.Dir, cmd.Env = dir, env
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	// The deployment's containers: Compose names the project "converge" (compose.yaml's name);
	// podman-compose 1.0 names it after the directory, "compose".
	project := "converge"
	if out, err := sh(composeDir, time.Minute, "podman-compose version"); err == nil && strings.Contains(out, "version  1.0.") {
		project = "compose"
	}
	ps := "podman ps -a --filter label=com.docker.compose.project=" + project
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := sh(composeDir, time.Minute, `for c in $(`+ps+` --format '{{.Names}}'); do echo "--- $c"; podman logs --tail 30 "$c" 2>&1; done`)
			t.Log(logs)
		}
		out, err := sh(composeDir, 3*time.Minute, "podman-compose down -v -t 5 >/dev/null 2>&1; rm -f .env")
		if err != nil {
			t.Logf("cleanup: %v\n%s", err, out)
		}
	})

	// Block 1, from the checkout's root: images, .env, up, ps.
	out, err := sh(root, 25*time.Minute, strings.Join(blocks[0], "\n"))
	require.NoError(t, err, "%s", out)
	t.Logf("up:\n%s", tail(out, 40))

	// The repository, served by git daemon on the host's address (the containers reach it there).
	hostIP := outboundIP(t)
	repos := filepath.Join(tmp, "repos")
	seed := filepath.Join(tmp, "seed")
	require.NoError(t, os.MkdirAll(repos, 0o755))
	_, err = sh(tmp, time.Minute, fmt.Sprintf(`git init -q -b main %[1]s
echo "# compose" >%[1]s/README.md
git -C %[1]s add README.md
git -C %[1]s -c user.name=t -c user.email=t@t commit -q -m start
git clone -q --bare %[1]s %[2]s/app.git`, seed, repos))
	require.NoError(t, err)
	port := freePort(t)
	daemon := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack",
		"--base-path="+repos, "--listen="+hostIP, "--port="+port, repos)
	require.NoError(t, daemon.Start())
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })
	repoURL := "git://" + net.JoinHostPort(hostIP, port) + "/app.git"
	tasks := filepath.Join(tmp, "tasks.md")
	require.NoError(t, os.WriteFile(tasks, []byte(composeTasks), 0o644))
	criteria := filepath.Join(tmp, "done-criteria.md")
	require.NoError(t, os.WriteFile(criteria, []byte(composeCriteria), 0o644))

	// Every service up: the Scheduler serves once its schema is current and its peers answer.
	token := strings.TrimSpace(must(sh(composeDir, time.Minute, `sed -n 's/^CONVERGE_TOKEN=//p' .env`)))
	require.NotEmpty(t, token)
	var health string
	require.Eventually(t, func() bool {
		health, _ = sh(composeDir, 30*time.Second, "grpcurl -plaintext 127.0.0.1:7071 grpc.health.v1.Health/Check")
		return strings.Contains(health, "SERVING") && !strings.Contains(health, "NOT_SERVING")
	}, 5*time.Minute, time.Second, "the Scheduler never served: %s", health)
	// And the Scheduler's peers: podman-compose starts a service without waiting for depends_on's
	// conditions (the migrate job included), and podman here runs no healthcheck timer, so nothing
	// reports (healthy). Each peer's own healthcheck, run in its container, says when its schema is
	// current; a run that reached Verify Done before that would end BLOCKED.
	for _, svc := range []string{"registry", "knowledge", "verifier"} {
		var probe string
		require.Eventually(t, func() bool {
			var err error
			probe, err = sh(composeDir, 30*time.Second, fmt.Sprintf(`c=$(%s --filter label=com.docker.compose.service=%s --format '{{.Names}}' | head -n 1)
test -n "$c" && podman exec "$c" /usr/local/bin/converge-healthcheck`, ps, svc))
			return err == nil
		}, 5*time.Minute, time.Second, "the %s never became healthy: %s", svc, probe)
	}

	// Block 2, in deploy/compose: the token, health, converge run.
	use := strings.Join(blocks[1], "\n")
	for from, to := range map[string]string{" tasks.md ": " " + tasks + " ", "done-criteria.md": criteria,
		"https://git.example.com/team/app.git": repoURL} {
		require.Contains(t, use, from)
		use = strings.ReplaceAll(use, from, to)
	}
	out, err = sh(composeDir, 10*time.Minute, use)
	require.NoError(t, err, "%s", out)
	require.Contains(t, out, "CONVERGED")
	t.Logf("run:\n%s", tail(out, 20))

	// The run on the dashboard, read with the token; three agents.
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:7080/", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, "%s", page)
	require.Contains(t, string(page), "CONVERGED")
	agents := must(sh(composeDir, time.Minute, ps+` --filter status=running --filter label=com.docker.compose.service=agent --format '{{.Names}}'`))
	require.Len(t, strings.Fields(agents), 3, agents)

	// Block 3, in deploy/compose: stop (every container drains and exits 0), then down -v.
	require.Len(t, blocks[2], 2)
	out, err = sh(composeDir, 10*time.Minute, blocks[2][0])
	require.NoError(t, err, "%s", out)
	states := must(sh(composeDir, time.Minute, ps+` --format '{{.Names}} {{.Exited}} {{.ExitCode}}'`))
	lines := strings.Split(strings.TrimSpace(states), "\n")
	require.GreaterOrEqual(t, len(lines), 10, states) // postgres, redis, migrate, 4 services, 3 agents
	for _, l := range lines {
		f := strings.Fields(l)
		require.Len(t, f, 3, l)
		require.Equal(t, "true", f[1], "%s: still running after stop", f[0])
		require.Equal(t, "0", f[2], "%s: a container did not exit 0 after SIGTERM\n%s", f[0], states)
	}
	out, err = sh(composeDir, 5*time.Minute, blocks[2][1])
	require.NoError(t, err, "%s", out)
	left := must(sh(composeDir, time.Minute, ps+` --format '{{.Names}}'`))
	require.Empty(t, strings.TrimSpace(left))
}

func must(s string, err error) string {
	if err != nil {
		panic(fmt.Sprintf("%v: %s", err, s))
	}
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// outboundIP is this host's address on its default route: reachable from the containers (and
// from here), unlike loopback.
func outboundIP(t *testing.T) string {
	t.Helper()
	c, err := net.Dial("udp", "192.0.2.1:9")
	require.NoError(t, err)
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "0.0.0.0:0")
	require.NoError(t, err)
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// composeTasks is what the documented `converge run` builds: three shell tasks in two waves.
const composeTasks = "# Tasks: compose\n\n## Phase 1: Files\n\n" +
	"### Task 1.1: Hello\n\n**Status:** 🔴 TODO\n**Files:** `hello.txt` (create)\n**Validation:** `test -s hello.txt`\n**Command:** `echo hello >hello.txt`\n\n" +
	"### Task 1.2: World\n\n**Status:** 🔴 TODO\n**Files:** `world.txt` (create)\n**Validation:** `test -s world.txt`\n**Command:** `echo world >world.txt`\n\n" +
	"### Task 1.3: Both\n\n**Status:** 🔴 TODO\n**Files:** `both.txt` (create)\n**Depends on:** 1.1, 1.2\n**Validation:** `grep -q hello both.txt`\n**Command:** `cat hello.txt world.txt >both.txt`\n"

// composeCriteria is its done criteria: the Verifier checks the run branch's files.
const composeCriteria = "# Done criteria: compose\n\n## F1: Both greetings are there\nTag: AUTO_VERIFY\nFiles: both.txt\n\n" +
	"```check\nfile:\n  path: both.txt\n  expect:\n    content:\n      contains: [\"hello\", \"world\"]\n```\n"
