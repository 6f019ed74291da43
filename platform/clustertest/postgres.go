package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPostgresURL names the environment variable with the Postgres server clusters use by
// default (the tests' server; its user must be allowed to create databases).
const EnvPostgresURL = "CONVERGE_TEST_POSTGRES_URL"

// DefaultPostgresURL is the server when EnvPostgresURL is not set.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// PostgresURL answers $CONVERGE_TEST_POSTGRES_URL or DefaultPostgresURL.
func PostgresURL() string {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// Postgres is a Postgres server clusters make their databases on: a given one (UsePostgres) or a
// private one this process started (StartPostgres), which may also be stopped and started.
type Postgres struct {
	server *url.URL // a URL to its maintenance database

	// A private server: its binaries, directory and port, and the user it runs as ("" = us).
	bin, dir, port, asUser string
}

// UsePostgres answers the server at serverURL (the URL of a database its user may create
// databases from, e.g. postgres://postgres@127.0.0.1:5432/postgres).
func UsePostgres(tb TB, serverURL string) *Postgres {
	tb.Helper()
	u, err := url.Parse(serverURL)
	if err != nil || u.Host == "" {
		tb.Fatalf("clustertest: %q is not a Postgres URL: %v", serverURL, err)
	}
	return &Postgres{server: u}
}

// StartPostgres makes a fresh Postgres cluster (initdb) in a temporary directory and starts it
// on a free loopback port, fsync off; it is stopped and removed when tb ends. The binaries are
// $CONVERGE_PG_BIN, the newest /usr/lib/postgresql/*/bin, or initdb's directory on PATH. As root,
// Postgres runs as the postgres user.
func StartPostgres(tb TB) *Postgres {
	tb.Helper()
	pg := &Postgres{bin: pgBinDir(tb), port: FreePort(tb)}
	pg.server = &url.URL{Scheme: "postgres", User: url.User("postgres"), Host: "127.0.0.1:" + pg.port, Path: "/postgres", RawQuery: "sslmode=disable"}
	dir, err := os.MkdirTemp("", "converge-pg-")
	if err != nil {
		tb.Fatalf("clustertest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	pg.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("clustertest: running as root needs a postgres user to run Postgres as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatalf("clustertest: %v", err)
		}
		pg.asUser = "postgres"
	}
	pg.run(tb, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
	pg.Start(tb)
	tb.Cleanup(func() {
		_ = pg.command("pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop").Run()
	})
	return pg
}

// pgBinDir finds initdb's directory.
func pgBinDir(tb TB) string {
	tb.Helper()
	for _, env := range []string{"CONVERGE_PG_BIN", "CONVERGE_FAULTS_PG_BIN"} {
		if d := os.Getenv(env); d != "" {
			return d
		}
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
	if err != nil {
		tb.Fatalf("clustertest: initdb not found: set CONVERGE_PG_BIN to Postgres' bin directory")
	}
	return filepath.Dir(p)
}

// command runs a Postgres binary (as the postgres user when we are root: postgres refuses root).
func (pg *Postgres) command(name string, args ...string) *exec.Cmd {
	bin := filepath.Join(pg.bin, name)
	if pg.asUser != "" {
		cmd := exec.Command("runuser", append([]string{"-u", pg.asUser, "--", bin}, args...)...)
		cmd.Dir = "/" // the caller's directory may be closed to that user
		return cmd
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = pg.dir
	return cmd
}

func (pg *Postgres) run(tb TB, name string, args ...string) {
	tb.Helper()
	if out, err := pg.command(name, args...).CombinedOutput(); err != nil {
		tb.Fatalf("clustertest: %s %v: %v\n%s", name, args, err, out)
	}
}

func (pg *Postgres) private(tb TB) {
	tb.Helper()
	if pg.dir == "" {
		tb.Fatalf("clustertest: only a private Postgres (StartPostgres) can be stopped and started")
	}
}

// Start starts a private server (again, after Stop) and waits until it accepts connections.
func (pg *Postgres) Start(tb TB) {
	tb.Helper()
	pg.private(tb)
	opts := fmt.Sprintf("-p %s -c listen_addresses=127.0.0.1 -k %s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300",
		pg.port, pg.dir)
	pg.run(tb, "pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-l", filepath.Join(pg.dir, "log"), "-o", opts, "-w", "-t", "60", "start")
}

// Stop stops a private server the hard way (immediate: no checkpoint, every session cut, crash
// recovery at the next Start).
func (pg *Postgres) Stop(tb TB) {
	tb.Helper()
	pg.private(tb)
	pg.run(tb, "pg_ctl", "-D", filepath.Join(pg.dir, "data"), "-m", "immediate", "-w", "stop")
}

// HostPort answers the server's host:port.
func (pg *Postgres) HostPort() string { return pg.server.Host }

// URL answers the URL of database db reached at hostPort ("" = the server's own address; a
// proxy's address to go through it).
func (pg *Postgres) URL(db, hostPort string) string {
	u := *pg.server
	if hostPort != "" {
		u.Host = hostPort
	}
	u.Path, u.RawPath = "/"+db, ""
	return u.String()
}

// CreateDatabase makes database name ("" = converge_c_<random>) and answers its name and URL;
// it is dropped (WITH (FORCE)) when tb ends.
func (pg *Postgres) CreateDatabase(tb TB, name string) (string, string) {
	tb.Helper()
	if name == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		name = "converge_c_" + hex.EncodeToString(b[:])
	}
	if err := pg.admin(func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		return err
	}); err != nil {
		tb.Fatalf("clustertest: create database %s on %s: %v (point %s at a server whose user may create databases)",
			name, pg.server.Redacted(), err, EnvPostgresURL)
	}
	tb.Cleanup(func() {
		err := pg.admin(func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			return err
		})
		if err != nil {
			tb.Logf("clustertest: drop database %s: %v", name, err)
		}
	})
	return name, pg.URL(name, "")
}

func (pg *Postgres) admin(fn func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.server.String())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return fn(ctx, conn)
}

// Query runs one SQL statement on database db and answers the first column of its first row as
// text ("" when there is none).
func (pg *Postgres) Query(db, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL(db, ""))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	out := ""
	if rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return "", err
		}
		if len(vals) > 0 && vals[0] != nil {
			out = fmt.Sprint(vals[0])
		}
	}
	return out, rows.Err()
}
