package faults

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The suite's own Postgres and Redis: initdb into a temporary directory and a redis-server, each
// on a port of its own, so restarting or flushing them disturbs nothing else on the machine.

// pgServer is a private Postgres cluster.
type pgServer struct {
	bin, dir, port string
	asUser         string // run the binaries as this user ("" = as we are)
}

// pgBinDir finds initdb: $CONVERGE_FAULTS_PG_BIN, the newest /usr/lib/postgresql/*/bin, or PATH.
func pgBinDir(t *testing.T) string {
	if d := os.Getenv("CONVERGE_FAULTS_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "initdb")) {
			return d
		}
	}
	p, err := exec.LookPath("initdb")
	require.NoError(t, err, "initdb not found: set CONVERGE_FAULTS_PG_BIN to Postgres' bin directory")
	return filepath.Dir(p)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// pgCommand runs a Postgres binary (as the postgres user when we are root: postgres refuses root).
func (pg *pgServer) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(pg.bin, name)
	if pg.asUser != "" {
		cmd := exec.Command("runuser", append([]string{"-u", pg.asUser, "--", bin}, args...)...)
		cmd.Dir = "/" // the test's directory may be closed to that user (psql warns, and its output is read)
		return cmd
	}
	return exec.Command(bin, args...)
}

func (pg *pgServer) run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := pg.command(name, args...)
	cmd.Dir = pg.dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
}

// startPostgres makes a fresh cluster in a temporary directory and starts it on a free port.
func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	pg := &pgServer{bin: pgBinDir(t), port: freePort(t)}
	dir, err := os.MkdirTemp("", "converge-faults-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root needs a postgres user to run Postgres as")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
		pg.asUser = "postgres"
	}
	pg.run(t, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	pg.start(t)
	t.Cleanup(func() {
		cmd := pg.command("pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop")
		_ = cmd.Run()
	})
	return pg
}

func (pg *pgServer) start(t *testing.T) {
	t.Helper()
	opts := fmt.Sprintf("-p %s -c listen_addresses=127.0.0.1 -k %s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300",
		pg.port, pg.dir)
	pg.run(t, "pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-l", filepath.Join(pg.dir, "log"), "-o", opts, "-w", "-t", "60", "start")
}

// stop stops Postgres the hard way (immediate: no checkpoint, every session cut, crash recovery
// at the next start).
func (pg *pgServer) stop(t *testing.T) {
	t.Helper()
	pg.run(t, "pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop")
}

// createDB makes a database and answers its URL.
func (pg *pgServer) createDB(t *testing.T, name string) string {
	t.Helper()
	pg.run(t, "createdb", "-h", "127.0.0.1", "-p", pg.port, "-U", "postgres", name)
	return pg.url(name, "127.0.0.1:"+pg.port)
}

func (pg *pgServer) url(db, hostPort string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", hostPort, db)
}

// psql runs one SQL command on database db and answers its output (unaligned, tuples only).
func (pg *pgServer) psql(db, sql string) (string, error) {
	out, err := pg.command("psql", "-h", "127.0.0.1", "-p", pg.port, "-U", "postgres", "-d", db, "-Atc", sql).CombinedOutput()
	return string(out), err
}

// redisServer is a private redis-server without persistence.
type redisServer struct {
	port string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	r := &redisServer{port: freePort(t)}
	r.start(t)
	t.Cleanup(func() { r.kill() })
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + r.port }

func (r *redisServer) start(t *testing.T) {
	t.Helper()
	r.cmd = exec.Command("redis-server", "--port", r.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning", "--dir", os.TempDir())
	require.NoError(t, r.cmd.Start())
	r.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(r.cmd, r.done)
	require.True(t, eventually(20*time.Second, func() bool { _, err := r.do("PING"); return err == nil }), "redis-server did not answer")
}

// kill ends redis-server with SIGKILL and waits for it.
func (r *redisServer) kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
}

// do sends one command (RESP) and answers the first line of the reply.
func (r *redisServer) do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.addr(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "-") {
		return line, fmt.Errorf("redis: %s", line)
	}
	return line, nil
}

// freePort answers a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	return port
}

func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}
