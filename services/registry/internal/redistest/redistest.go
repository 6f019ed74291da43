// Package redistest gives tests Redis to work on: the shared test Redis with a key prefix of
// their own (tests run in parallel on it, so nobody may flush it), or a private redis-server
// started on a free port that a test may flush, stop and restart.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/converge-dev/converge/platform/database/dbtest"
)

// EnvURL names the environment variable holding the URL of the shared test Redis.
const EnvURL = "CONVERGE_TEST_REDIS_URL"

// DefaultURL is the shared test Redis when EnvURL is not set.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL answers the shared test Redis' URL.
func URL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// Client answers a client of the shared test Redis, closed when t ends. The test fails (never
// skips) when Redis does not answer.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	dbtest.SkipUnit(t, "Redis")
	opts, err := redis.ParseURL(URL())
	require.NoError(t, err, "%s", EnvURL)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	require.NoError(t, rdb.Ping(context.Background()).Err(), "the tests need Redis at %s (%s)", URL(), EnvURL)
	return rdb
}

// Prefix answers a key prefix no other test uses. DeletePrefix removes its keys when t ends.
func Prefix(t testing.TB, rdb redis.UniversalClient) string {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	p := "converge-test-" + hex.EncodeToString(b)
	t.Cleanup(func() { DeletePrefix(t, rdb, p) })
	return p
}

// DeletePrefix deletes every key of prefix (the keys "{prefix}:..."): what a FLUSHALL does to
// one test's key space, without touching the other tests' keys.
func DeletePrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "{"+prefix+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("redistest: scan %s: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			t.Errorf("redistest: delete %s: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

// Server is a private redis-server a test started.
type Server struct {
	t    testing.TB
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServer starts redis-server on a free loopback port with its data directory in t's
// temporary directory, and stops it when t ends. It saves nothing by itself (no RDB schedule,
// no AOF): a test persists with SAVE when it wants a snapshot to restart from.
func StartServer(t testing.TB) *Server {
	t.Helper()
	dbtest.SkipUnit(t, "redis-server")
	bin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "the test needs the redis-server binary")
	s := &Server{t: t, dir: t.TempDir()}
	s.Addr = freeAddr(t)
	t.Cleanup(s.Stop)
	s.start(bin)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command(bin,
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir, "--dbfilename", "dump.rdb",
		"--save", "", "--appendonly", "no", "--protected-mode", "yes", "--logfile", filepath.Join(s.dir, "redis.log"))
	require.NoError(s.t, s.cmd.Start())
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	// Wait until it answers (it loads dump.rdb first when there is one).
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := rdb.Ping(context.Background()).Err()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redistest: redis-server exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server at %s did not answer within 30s: %v", s.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Client answers a client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Kill stops the server at once (SIGKILL): nothing is saved.
func (s *Server) Kill() {
	s.t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server and starts it again on the same port and data directory: it comes
// back with its last SAVEd snapshot, or empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	bin, err := exec.LookPath("redis-server")
	require.NoError(s.t, err)
	s.start(bin)
}

// Stop kills the server if it runs.
func (s *Server) Stop() { s.Kill() }

// freeAddr answers a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

// RunID answers the run_id of the Redis rdb talks to: it changes with every start.
func RunID(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v, nil
		}
	}
	return "", errors.New("redistest: no run_id in INFO server")
}
