package clustertest

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// EnvRedisURL names the environment variable with the Redis clusters use by default.
const EnvRedisURL = "CONVERGE_TEST_REDIS_URL"

// DefaultRedisURL is the Redis when EnvRedisURL is not set.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// RedisURL answers $CONVERGE_TEST_REDIS_URL or DefaultRedisURL.
func RedisURL() string {
	if u := os.Getenv(EnvRedisURL); u != "" {
		return u
	}
	return DefaultRedisURL
}

// Redis is a Redis clusters use: a given one (UseRedis) or a private redis-server this process
// started (StartRedis), without persistence, which may be killed and started again.
type Redis struct {
	url *url.URL

	mu   sync.Mutex
	port string // a private server's
	cmd  *exec.Cmd
	done chan struct{}
}

// UseRedis answers the Redis at rawURL (redis://host:port/db).
func UseRedis(tb TB, rawURL string) *Redis {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		tb.Fatalf("clustertest: %q is not a Redis URL: %v", rawURL, err)
	}
	return &Redis{url: u}
}

// StartRedis starts a private redis-server (from PATH) on a free loopback port, without
// persistence; it is killed when tb ends.
func StartRedis(tb TB) *Redis {
	tb.Helper()
	r := &Redis{port: FreePort(tb)}
	r.url = &url.URL{Scheme: "redis", Host: "127.0.0.1:" + r.port, Path: "/0"}
	r.Start(tb)
	tb.Cleanup(r.Kill)
	return r
}

// URL answers the Redis URL.
func (r *Redis) URL() string { return r.url.String() }

// Addr answers its host:port.
func (r *Redis) Addr() string { return r.url.Host }

// Start starts a private server (again, after Kill) on its port and waits until it answers.
func (r *Redis) Start(tb TB) {
	tb.Helper()
	if r.port == "" {
		tb.Fatalf("clustertest: only a private Redis (StartRedis) can be started")
	}
	cmd := exec.Command("redis-server", "--port", r.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning", "--dir", os.TempDir())
	if err := cmd.Start(); err != nil {
		tb.Fatalf("clustertest: redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	if !Eventually(20*time.Second, func() bool { _, err := r.Do("PING"); return err == nil }) {
		tb.Fatalf("clustertest: redis-server on port %s did not answer", r.port)
	}
}

// Kill ends a private server with SIGKILL and waits for it (a no-op for a given Redis).
func (r *Redis) Kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// Do sends one command (to database 0) and answers the first line of the reply (an error reply is an error).
func (r *Redis) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.Addr(), 2*time.Second)
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
