package clustertest

import (
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Run runs the cleanups last first, turns Fatalf into its error and ends the function there.
func TestRunFatalAndCleanups(t *testing.T) {
	var order []string
	reached := false
	err := Run(nil, func(tb TB) error {
		tb.Cleanup(func() { order = append(order, "first") })
		tb.Cleanup(func() { order = append(order, "second") })
		dir := tb.TempDir()
		tb.Cleanup(func() { _, err := os.Stat(dir); order = append(order, "dir:"+boolString(err == nil)) })
		tb.Fatalf("stop %d", 1)
		reached = true
		return nil
	})
	require.EqualError(t, err, "stop 1")
	require.False(t, reached)
	require.Equal(t, []string{"dir:true", "second", "first"}, order)

	require.NoError(t, Run(nil, func(TB) error { return nil }))
	err = Run(nil, func(tb TB) error { tb.Errorf("bad"); return io.EOF })
	require.EqualError(t, err, "EOF\nbad")
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// A proxy forwards; Down refuses connections (nothing listens), Up forwards again on the same
// address; Cut resets.
func TestProxyDownUpCut(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	roundTrip := func(addr string) error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		require.Equal(t, "ping", string(b))
		return nil
	}
	p, err := NewProxyDown(echo.Addr().String())
	require.NoError(t, err)
	defer p.Close()
	err = roundTrip(p.Addr)
	require.Error(t, err)
	require.Contains(t, err.Error(), "refused")
	// While down, the port stays the proxy's: nothing else on the machine can listen on it and
	// make Up fail with "address already in use" (TestStandaloneSurvivesMissingStores did).
	if runtime.GOOS == "linux" {
		other, err := net.Listen("tcp", p.Addr)
		if err == nil {
			_ = other.Close()
		}
		require.Error(t, err, "another listener took the down proxy's port")
	}
	require.NoError(t, p.Up())
	require.NoError(t, roundTrip(p.Addr))
	p.Cut()
	require.Error(t, roundTrip(p.Addr))
	p.Restore()
	require.NoError(t, roundTrip(p.Addr))
	p.Down()
	require.Error(t, roundTrip(p.Addr))
	require.NoError(t, p.Up())
	require.NoError(t, roundTrip(p.Addr))
}

// A process keeps its log across a restart; Stop answers how it exited; Kill is not an error.
func TestProcessLifecycle(t *testing.T) {
	p := StartProcess(t, ProcessSpec{Name: "sh", Bin: "/bin/sh", Args: []string{"-c", `echo started; trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done`}, CleanExit: true, Grace: 5 * time.Second})
	require.True(t, Eventually(10*time.Second, func() bool { return strings.Contains(p.Output(), "started") }))
	require.NoError(t, p.Pause())
	require.NoError(t, p.Continue())
	require.NoError(t, p.Stop())
	require.True(t, p.Exited())
	require.Contains(t, p.Output(), "bye")
	p.Restart(t)
	require.Equal(t, 2, p.Starts())
	require.True(t, Eventually(10*time.Second, func() bool { return strings.Count(p.Output(), "started") == 2 }))
	p.Kill()
	require.True(t, p.Exited())
	require.NoError(t, p.Stop(), "a killed process is not a failed stop")
	p.Restart(t)
	require.True(t, Eventually(10*time.Second, func() bool { return strings.Count(p.Output(), "started") == 3 }))
	require.NoError(t, p.Stop())
	require.Equal(t, "bye", Tail(p.Output(), 1))
}
