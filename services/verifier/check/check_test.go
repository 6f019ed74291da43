package check_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/services/verifier/check"
)

// bundle is what a check test works with: a target directory of its own and options with
// short retries.
type bundle struct {
	dir    string
	target *check.Target
	opts   *check.Options
	env    map[string]string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	b := &bundle{dir: dir, env: map[string]string{"PATH": os.Getenv("PATH"), "HOME": dir}}
	b.target = &check.Target{Dir: dir}
	b.opts = &check.Options{
		DefaultTimeout: 30 * time.Second,
		OutputCap:      1 << 20,
		ExcerptBytes:   4096,
		MaxAttempts:    2,
		RetryBackoff:   time.Millisecond,
		LookupEnv: func(name string) (string, bool) {
			v, ok := b.env[name]
			return v, ok
		},
		ScratchDir: t.TempDir(),
	}
	return b
}

// write creates a file of the target directory.
func (b *bundle) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(b.dir, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func (b *bundle) run(t *testing.T, c *verifierv1.Criterion) check.Result {
	t.Helper()
	if c.Id == "" {
		c.Id, c.Name, c.Tag = "F1", "test", verifierv1.CriterionTag_CRITERION_TAG_AUTO_VERIFY
	}
	return check.Run(t.Context(), b.target, b.opts, c)
}

func command(cc *verifierv1.CommandCheck) *verifierv1.Criterion {
	return &verifierv1.Criterion{Check: &verifierv1.Criterion_Command{Command: cc}}
}

func shell(line string, expect *verifierv1.CommandExpectation) *verifierv1.Criterion {
	return command(&verifierv1.CommandCheck{Shell: line, Expect: expect})
}

func requireStatus(t *testing.T, want verifierv1.CriterionStatus, r check.Result) {
	t.Helper()
	require.Equal(t, want, r.GetStatus(), "error %q, evidence %v", r.GetError(), r.GetEvidence())
}

// failedExpectations answers the expectations of the failed assertions.
func failedExpectations(r check.Result) []string {
	var out []string
	for _, a := range r.GetEvidence().GetAssertions() {
		if !a.GetPassed() {
			out = append(out, a.GetExpectation())
		}
	}
	return out
}

const (
	pass    = verifierv1.CriterionStatus_CRITERION_STATUS_PASS
	fail    = verifierv1.CriterionStatus_CRITERION_STATUS_FAIL
	errored = verifierv1.CriterionStatus_CRITERION_STATUS_ERROR
)

func TestCommandPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "VERSION", "1.2.3\n")
	r := b.run(t, command(&verifierv1.CommandCheck{
		Argv: []string{"cat", "VERSION"},
		Expect: &verifierv1.CommandExpectation{
			ExitCode: new(int32),
			Stdout:   &verifierv1.TextExpectation{Contains: []string{"1.2"}, NotContains: []string{"dev"}, Matches: []string{`(?m)^\d+\.\d+\.\d+$`, `^1`}},
		},
	}))
	requireStatus(t, pass, r)
	ev := r.GetEvidence().GetCommand()
	require.Equal(t, []string{"cat", "VERSION"}, ev.GetArgv())
	require.Equal(t, int32(0), ev.GetExitCode())
	require.Equal(t, "1.2.3\n", ev.GetStdoutTail())
	require.Equal(t, int64(6), ev.GetStdoutBytes())
	require.Len(t, r.GetEvidence().GetAssertions(), 5)
	require.Equal(t, int32(1), r.GetAttempts())
	require.Contains(t, r.GetEvidence().GetSummary(), "`cat VERSION` exited 0")
}

func TestCommandFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, shell(`echo '{"rows": 649, "ok": true}'; echo oops >&2; exit 3`, &verifierv1.CommandExpectation{
		Stderr:     &verifierv1.TextExpectation{NotContains: []string{"oops"}},
		StdoutJson: []*verifierv1.JsonFieldExpectation{{Path: "/rows", EqualsJson: "650"}, {Path: "/ok", EqualsJson: "true"}, {Path: "/missing"}},
	}))
	requireStatus(t, fail, r)
	require.Equal(t, []string{"exit code == 0", `stderr does not contain "oops"`, "stdout /rows = 650", "stdout /missing exists"}, failedExpectations(r))
	require.Equal(t, int32(3), r.GetEvidence().GetCommand().GetExitCode())
	require.Equal(t, []string{"sh", "-c", `echo '{"rows": 649, "ok": true}'; echo oops >&2; exit 3`}, r.GetEvidence().GetCommand().GetArgv())
	actual := r.GetEvidence().GetAssertions()[2].GetActual()
	require.Equal(t, "649", actual)
}

func TestCommandJSONNumbersByValue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, shell(`echo '{"n": 650.0, "o": {"b": [1, "x"], "a": null}}'`, &verifierv1.CommandExpectation{
		StdoutJson: []*verifierv1.JsonFieldExpectation{
			{Path: "/n", EqualsJson: "6.5e2"},
			{Path: "/o", EqualsJson: `{"a": null, "b": [1.0, "x"]}`},
			{Path: "/o/b/1", EqualsJson: `"x"`},
		},
	}))
	requireStatus(t, pass, r)
}

func TestCommandTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The command starts a grandchild and waits: the timeout must kill both.
	r := b.run(t, command(&verifierv1.CommandCheck{
		Shell:   `sleep 300 & echo $! > child.pid; wait`,
		Timeout: durationpb.New(300 * time.Millisecond),
	}))
	requireStatus(t, fail, r)
	ev := r.GetEvidence().GetCommand()
	require.True(t, ev.GetTimedOut())
	require.Equal(t, int32(-1), ev.GetExitCode())
	require.Contains(t, r.GetEvidence().GetSummary(), "killed after its 300ms timeout")

	pidText, err := os.ReadFile(filepath.Join(b.dir, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	require.NoError(t, err)
	// The grandchild is gone (or a zombie reaped by init): signal 0 finds nothing to signal.
	requireGone(t, pid)
}

// requireGone waits until process pid no longer exists. It was sent SIGKILL; the kernel removes
// it once its parent (init, for an orphan) reaps it.
func requireGone(t *testing.T, pid int) {
	t.Helper()
	for {
		err := syscall.Kill(pid, 0)
		if err != nil {
			require.ErrorIs(t, err, syscall.ESRCH)
			return
		}
		stat, rerr := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if rerr == nil && strings.Contains(string(stat), ") Z ") {
			return // killed, waiting to be reaped
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("process %d still runs", pid)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestCommandBlocked(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		c      *verifierv1.Criterion
		reason verifierv1.BlockReason
		error  string
	}{
		{"program missing", command(&verifierv1.CommandCheck{Argv: []string{"converge-no-such-program"}}),
			verifierv1.BlockReason_BLOCK_REASON_PROGRAM_MISSING, `program "converge-no-such-program" is not installed`},
		{"shell cannot find it", shell("converge-no-such-program --version", nil),
			verifierv1.BlockReason_BLOCK_REASON_PROGRAM_MISSING, "sh exit status 127"},
		{"credential missing", command(&verifierv1.CommandCheck{Argv: []string{"true"}, EnvPassthrough: []string{"EXPORT_API_TOKEN"}}),
			verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING, "EXPORT_API_TOKEN is not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := setup(t).run(t, tc.c)
			requireStatus(t, errored, r)
			require.Equal(t, tc.reason, r.GetBlockReason())
			require.Contains(t, r.GetError(), tc.error)
		})
	}
}

func TestCommandEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.env["EXPORT_API_TOKEN"] = "s3cret"
	b.env["NOT_PASSED"] = "x"
	r := b.run(t, command(&verifierv1.CommandCheck{
		Shell:          `echo "token=$EXPORT_API_TOKEN mode=$MODE other=$NOT_PASSED"; cat`,
		Env:            map[string]string{"MODE": "ci"},
		EnvPassthrough: []string{"EXPORT_API_TOKEN"},
		Stdin:          "from stdin",
		Expect: &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{
			Contains: []string{"token=s3cret mode=ci other=\n", "from stdin"},
		}},
	}))
	requireStatus(t, pass, r)
}

func TestCommandOutputCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.opts.OutputCap, b.opts.ExcerptBytes = 1024, 100
	r := b.run(t, shell(`i=0; while [ $i -lt 500 ]; do echo "line $i"; i=$((i+1)); done`, &verifierv1.CommandExpectation{
		Stdout: &verifierv1.TextExpectation{Contains: []string{"line 499"}, NotContains: []string{"line 0\n"}},
	}))
	requireStatus(t, pass, r)
	ev := r.GetEvidence().GetCommand()
	require.True(t, ev.GetOutputTruncated())
	require.Greater(t, ev.GetStdoutBytes(), int64(1024))
	require.LessOrEqual(t, len(ev.GetStdoutTail()), 100)
	require.True(t, strings.HasSuffix(ev.GetStdoutTail(), "line 499\n"))
}

func TestCommandWorkingDir(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "web/package.json", "{}")
	outside := t.TempDir()
	require.NoError(t, os.Symlink(outside, filepath.Join(b.dir, "escape")))

	r := b.run(t, command(&verifierv1.CommandCheck{Argv: []string{"ls"}, WorkingDir: "web",
		Expect: &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{Contains: []string{"package.json"}}}}))
	requireStatus(t, pass, r)

	r = b.run(t, command(&verifierv1.CommandCheck{Argv: []string{"ls"}, WorkingDir: "escape"}))
	requireStatus(t, fail, r)
	require.Contains(t, r.GetEvidence().GetAssertions()[0].GetActual(), "leaves the target directory")

	r = b.run(t, command(&verifierv1.CommandCheck{Argv: []string{"ls"}, WorkingDir: "missing"}))
	requireStatus(t, fail, r)
}

func TestCommandScratchDirectory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target = &check.Target{}
	r := b.run(t, shell(`ls -A | wc -l; touch made-here`, &verifierv1.CommandExpectation{
		Stdout: &verifierv1.TextExpectation{Matches: []string{`^\s*0\s*$`}},
	}))
	requireStatus(t, pass, r)
	entries, err := os.ReadDir(b.opts.ScratchDir)
	require.NoError(t, err)
	require.Empty(t, entries, "the scratch directory is removed")
}

func TestCommandLocatesTheFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "pkg/export.go", "package pkg\n")
	r := b.run(t, shell(`echo "ok  other"; echo "pkg/export.go:12:3: undefined: location" >&2; exit 1`, nil))
	requireStatus(t, fail, r)
	require.Equal(t, "pkg/export.go", r.File)
	require.Equal(t, int32(12), r.Line)

	// A file the output names that is not in the target is not a location.
	r = b.run(t, shell(`echo "/usr/lib/go/src/fmt/print.go:99: x"; exit 1`, nil))
	require.Empty(t, r.File)
}

func TestTargetDirectoryVanishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, os.RemoveAll(b.dir))
	for _, c := range []*verifierv1.Criterion{
		command(&verifierv1.CommandCheck{Argv: []string{"true"}}),
		{Check: &verifierv1.Criterion_File{File: &verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "x"}}}},
	} {
		r := b.run(t, c)
		requireStatus(t, errored, r)
		require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_TARGET_UNAVAILABLE, r.GetBlockReason())
		require.Contains(t, r.GetError(), "is gone")
	}
}

func httpCheck(path string, expect *verifierv1.HttpExpectation) *verifierv1.Criterion {
	return &verifierv1.Criterion{Check: &verifierv1.Criterion_Http{Http: &verifierv1.HttpCheck{
		Location: &verifierv1.HttpCheck_Path{Path: path},
		Expect:   expect,
	}}}
}

// app is a small real HTTP app.
func app(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/items", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" && r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = io.WriteString(w, `{"count": 2, "items": [{"sku": "SKU-1"}, {"sku": "SKU-2"}]}`)
	})
	mux.HandleFunc("POST /api/echo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	})
	mux.HandleFunc("GET /old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/items", http.StatusFound)
	})
	mux.HandleFunc("GET /big", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("0123456789", 1000))
	})
	mux.HandleFunc("GET /slow", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // a slow server is what is tested
		_, _ = io.WriteString(w, "late")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target.BaseURL = app(t).URL + "/"
	b.env["TOKEN_HEADER"] = "Bearer s3cret"

	r := b.run(t, httpCheck("/api/items", &verifierv1.HttpExpectation{
		Status:         200,
		HeaderContains: map[string]string{"content-type": "application/json"},
		Body:           &verifierv1.TextExpectation{Contains: []string{"SKU-2"}, Matches: []string{`"count":\s*2`}},
		BodyJson:       []*verifierv1.JsonFieldExpectation{{Path: "/count", EqualsJson: "2"}, {Path: "/items/1/sku", EqualsJson: `"SKU-2"`}},
		MaxLatency:     durationpb.New(time.Hour),
	}))
	requireStatus(t, pass, r)
	ev := r.GetEvidence().GetHttp()
	require.Equal(t, int32(200), ev.GetStatus())
	require.Equal(t, "GET", ev.GetMethod())
	require.True(t, strings.HasSuffix(ev.GetUrl(), "/api/items"), ev.GetUrl())
	require.Equal(t, map[string]string{"Content-Type": "application/json; charset=utf-8"}, ev.GetHeaders())
	require.Contains(t, ev.GetBodyExcerpt(), `"SKU-1"`)

	// header_env reads the verifier's environment.
	c := httpCheck("/api/items", nil)
	c.GetHttp().HeaderEnv = map[string]string{"Authorization": "TOKEN_HEADER"}
	requireStatus(t, pass, b.run(t, c))
	c.GetHttp().HeaderEnv = map[string]string{"Authorization": "NO_SUCH_VAR"}
	r = b.run(t, c)
	requireStatus(t, errored, r)
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING, r.GetBlockReason())

	// A body is sent; the method is the check's.
	c = httpCheck("/api/echo", &verifierv1.HttpExpectation{Body: &verifierv1.TextExpectation{Contains: []string{"ping"}}})
	c.GetHttp().Method, c.GetHttp().Body = "POST", "ping"
	requireStatus(t, pass, b.run(t, c))
}

func TestHTTPFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target.BaseURL = app(t).URL

	r := b.run(t, httpCheck("/api/missing", nil))
	requireStatus(t, fail, r)
	require.Equal(t, []string{"status is 2xx"}, failedExpectations(r))
	require.Equal(t, "404 Not Found", r.GetEvidence().GetAssertions()[0].GetActual())

	r = b.run(t, httpCheck("/api/items", &verifierv1.HttpExpectation{
		HeaderContains: map[string]string{"X-Missing": "x", "Content-Type": "text/csv"},
		BodyJson:       []*verifierv1.JsonFieldExpectation{{Path: "/count", EqualsJson: "3"}},
	}))
	requireStatus(t, fail, r)
	require.Equal(t, []string{`header Content-Type contains "text/csv"`, `header X-Missing contains "x"`, "body /count = 3"}, failedExpectations(r))

	r = b.run(t, httpCheck("/slow", &verifierv1.HttpExpectation{MaxLatency: durationpb.New(time.Millisecond)}))
	requireStatus(t, fail, r)
	require.Equal(t, []string{"latency <= 1ms"}, failedExpectations(r))
}

func TestHTTPRedirects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target.BaseURL = app(t).URL
	r := b.run(t, httpCheck("/old", &verifierv1.HttpExpectation{Status: 302, HeaderContains: map[string]string{"Location": "/api/items"}}))
	requireStatus(t, pass, r)

	c := httpCheck("/old", &verifierv1.HttpExpectation{Status: 200})
	c.GetHttp().FollowRedirects = true
	r = b.run(t, c)
	requireStatus(t, pass, r)
	require.True(t, strings.HasSuffix(r.GetEvidence().GetHttp().GetUrl(), "/api/items"))
}

func TestHTTPBodyCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target.BaseURL = app(t).URL
	b.opts.OutputCap, b.opts.ExcerptBytes = 1024, 20
	r := b.run(t, httpCheck("/big", &verifierv1.HttpExpectation{Body: &verifierv1.TextExpectation{Matches: []string{`^0123`}}}))
	requireStatus(t, pass, r)
	ev := r.GetEvidence().GetHttp()
	require.True(t, ev.GetBodyTruncated())
	require.Equal(t, int64(10000), ev.GetBodyBytes())
	require.Equal(t, "01234567890123456789", ev.GetBodyExcerpt())
}

// closedAddr answers a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

func TestHTTPUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.opts.MaxAttempts = 3
	var attempts []int32
	b.opts.OnAttempt = func(n int32) { attempts = append(attempts, n) }
	b.target.BaseURL = "http://" + closedAddr(t)
	r := b.run(t, httpCheck("/api/items", nil))
	requireStatus(t, errored, r)
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, r.GetBlockReason())
	require.Equal(t, int32(3), r.GetAttempts())
	require.Equal(t, []int32{1, 2, 3}, attempts)
	require.Contains(t, r.GetError(), "connection refused, 3 attempts")
	require.NotEqual(t, pass, r.GetStatus())
}

func TestHTTPNoAnswer(t *testing.T) {
	t.Parallel()
	// A server that takes the connection and never answers: the app's failure, not a blocker.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	conns := make(chan net.Conn, 16)
	t.Cleanup(func() {
		_ = lis.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	b := setup(t)
	b.target.BaseURL = "http://" + lis.Addr().String()
	c := httpCheck("/", nil)
	c.GetHttp().Timeout = durationpb.New(200 * time.Millisecond)
	r := b.run(t, c)
	requireStatus(t, fail, r)
	require.Equal(t, []string{"a response within 200ms"}, failedExpectations(r))
	require.Equal(t, int32(1), r.GetAttempts())
}

func fileCheck(fc *verifierv1.FileCheck) *verifierv1.Criterion {
	return &verifierv1.Criterion{Check: &verifierv1.Criterion_File{File: fc}}
}

func TestFile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.write(t, "migrations/0001_init.sql", "CREATE TABLE items (id int);\n")
	b.write(t, "migrations/0002_export.sql", "create table exports (id int);\nselect 1;")
	b.write(t, "app/server.go", "package app\n\nfunc main() {\n\tfmt.Println(\"debug\")\n}\n")
	secret := filepath.Join(t.TempDir(), "secret.sql")
	require.NoError(t, os.WriteFile(secret, []byte("CREATE TABLE x"), 0o644))
	require.NoError(t, os.Symlink(secret, filepath.Join(b.dir, "migrations", "0003_link.sql")))

	r := b.run(t, fileCheck(&verifierv1.FileCheck{
		Target: &verifierv1.FileCheck_Glob{Glob: "migrations/*.sql"},
		Expect: &verifierv1.FileExpectation{
			MinMatches: new(int32),
			MaxMatches: ptr(int32(2)),
			Content:    &verifierv1.TextExpectation{Matches: []string{`(?i)create table`}},
			MinLines:   ptr(int64(1)),
		},
	}))
	requireStatus(t, pass, r)
	ev := r.GetEvidence().GetFile()
	require.Equal(t, int32(2), ev.GetMatchCount(), "the symlink out of the target is not a match")
	require.Equal(t, "migrations/0001_init.sql", ev.GetFiles()[0].GetPath())
	require.Equal(t, int64(2), ev.GetFiles()[1].GetLineCount(), "a last line without a newline counts")
	require.Len(t, ev.GetFiles()[0].GetSha256(), 64)

	r = b.run(t, fileCheck(&verifierv1.FileCheck{
		Target: &verifierv1.FileCheck_Path{Path: "app/server.go"},
		Expect: &verifierv1.FileExpectation{
			Content:  &verifierv1.TextExpectation{NotContains: []string{"fmt.Println("}},
			MaxLines: ptr(int64(3)),
		},
	}))
	requireStatus(t, fail, r)
	require.Equal(t, []string{`content does not contain "fmt.Println("`, "at most 3 lines"}, failedExpectations(r))
	require.Equal(t, "app/server.go", r.File)
	require.Equal(t, int32(4), r.Line, "the line of the forbidden text")
	require.Contains(t, r.GetEvidence().GetFile().GetContentExcerpt(), "package app")

	// Presence.
	requireStatus(t, pass, b.run(t, fileCheck(&verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "app/server.go"}})))
	requireStatus(t, fail, b.run(t, fileCheck(&verifierv1.FileCheck{Target: &verifierv1.FileCheck_Path{Path: "app/missing.go"}})))
	// A symlink out of the target is absent.
	requireStatus(t, pass, b.run(t, fileCheck(&verifierv1.FileCheck{
		Target: &verifierv1.FileCheck_Path{Path: "migrations/0003_link.sql"},
		Expect: &verifierv1.FileExpectation{Presence: verifierv1.FilePresence_FILE_PRESENCE_ABSENT},
	})))
	requireStatus(t, fail, b.run(t, fileCheck(&verifierv1.FileCheck{
		Target: &verifierv1.FileCheck_Glob{Glob: "**/*.go"},
		Expect: &verifierv1.FileExpectation{Presence: verifierv1.FilePresence_FILE_PRESENCE_ABSENT},
	})))
	r = b.run(t, fileCheck(&verifierv1.FileCheck{Target: &verifierv1.FileCheck_Glob{Glob: "**/*.ts"}}))
	requireStatus(t, fail, r)
	require.Equal(t, []string{"at least 1 file matches **/*.ts"}, failedExpectations(r))
}

func ptr[T any](v T) *T { return &v }

// grpcServer starts a real converge server (platform/server: health and reflection) on a
// loopback port.
func grpcServer(t *testing.T) string {
	t.Helper()
	srv, err := server.Config{
		Name:           "check-test",
		Logger:         slog.New(slog.DiscardHandler),
		DrainDelay:     -1,
		DisableTracing: true,
	}.Complete()
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return lis.Addr().String()
}

func grpcCheck(gc *verifierv1.GrpcCheck) *verifierv1.Criterion {
	return &verifierv1.Criterion{Check: &verifierv1.Criterion_Grpc{Grpc: gc}}
}

func TestGRPC(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.target.GRPCAddress = grpcServer(t)

	r := b.run(t, grpcCheck(&verifierv1.GrpcCheck{Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}}}))
	requireStatus(t, pass, r)
	ev := r.GetEvidence().GetGrpc()
	require.Equal(t, "grpc.health.v1.Health/Check", ev.GetMethod())
	require.JSONEq(t, `{"status": "SERVING"}`, ev.GetResponseExcerpt())
	require.Contains(t, r.GetEvidence().GetSummary(), "→ SERVING")

	// A health check of a service the server does not know.
	r = b.run(t, grpcCheck(&verifierv1.GrpcCheck{Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{Service: "acme.Nope"}}}))
	requireStatus(t, fail, r)
	require.Equal(t, int32(5), r.GetEvidence().GetGrpc().GetCode(), "NOT_FOUND")

	// A unary call resolved through reflection, with a JSON request.
	r = b.run(t, grpcCheck(&verifierv1.GrpcCheck{
		Call: &verifierv1.GrpcCheck_Unary{Unary: &verifierv1.GrpcUnaryCall{
			Method: "/grpc.health.v1.Health/Check", RequestJson: `{"service": ""}`,
		}},
		Expect: &verifierv1.GrpcExpectation{
			ResponseJson: []*verifierv1.JsonFieldExpectation{{Path: "/status", EqualsJson: `"SERVING"`}},
			MaxLatency:   durationpb.New(time.Hour),
		},
	}))
	requireStatus(t, pass, r)

	// An expected error.
	r = b.run(t, grpcCheck(&verifierv1.GrpcCheck{
		Call:   &verifierv1.GrpcCheck_Unary{Unary: &verifierv1.GrpcUnaryCall{Method: "grpc.health.v1.Health/Check", RequestJson: `{"service": "acme.Nope"}`}},
		Expect: &verifierv1.GrpcExpectation{Code: 5, MessageContains: "unknown service"},
	}))
	requireStatus(t, pass, r)

	// What the server does not have fails, with the reason as evidence.
	for method, want := range map[string]string{
		"acme.Nope/Do":                 "not found by reflection",
		"grpc.health.v1.Health/Nope":   "has no method Nope",
		"grpc.health.v1.Health/Watch":  "streaming method",
		"grpc.health.v1.Health/Check ": "",
	} {
		if want == "" {
			continue
		}
		r = b.run(t, grpcCheck(&verifierv1.GrpcCheck{Call: &verifierv1.GrpcCheck_Unary{Unary: &verifierv1.GrpcUnaryCall{Method: method}}}))
		requireStatus(t, fail, r)
		require.Contains(t, r.GetEvidence().GetGrpc().GetMessage(), want, method)
	}
	r = b.run(t, grpcCheck(&verifierv1.GrpcCheck{Call: &verifierv1.GrpcCheck_Unary{Unary: &verifierv1.GrpcUnaryCall{
		Method: "grpc.health.v1.Health/Check", RequestJson: `{"servise": "x"}`}}}))
	requireStatus(t, fail, r)
	require.Contains(t, r.GetEvidence().GetGrpc().GetMessage(), "request_json does not fit grpc.health.v1.HealthCheckRequest")
}

func TestGRPCUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.run(t, grpcCheck(&verifierv1.GrpcCheck{Address: closedAddr(t), Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}}}))
	requireStatus(t, errored, r)
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, r.GetBlockReason())
	require.Equal(t, int32(2), r.GetAttempts())

	b.target.GRPCAddress = grpcServer(t)
	r = b.run(t, grpcCheck(&verifierv1.GrpcCheck{Call: &verifierv1.GrpcCheck_Health{Health: &verifierv1.GrpcHealthCall{}},
		MetadataEnv: map[string]string{"authorization": "NO_SUCH_VAR"}}))
	requireStatus(t, errored, r)
	require.Equal(t, verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING, r.GetBlockReason())
}
